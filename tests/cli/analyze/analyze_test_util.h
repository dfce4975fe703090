// Helpers for the analyze tests: a temporary directory removed on destruction, fixture
// paths, file I/O, and running `peregrinectl analyze` as a function.
#ifndef PEREGRINE_TESTS_CLI_ANALYZE_ANALYZE_TEST_UTIL_H_
#define PEREGRINE_TESTS_CLI_ANALYZE_ANALYZE_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/analyze/analyze_command.h"

namespace peregrine::analyze_test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "peregrine-analyze-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string Path(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  REQUIRE(out.good());
  out << text;
  REQUIRE(out.good());
}

inline std::string Fixture(const std::string& name) {
  return std::string(PEREGRINE_SOURCE_DIR) + "/tests/cli/analyze/testdata/" + name;
}

inline std::string StackFixture(const std::string& name) {
  return std::string(PEREGRINE_SOURCE_DIR) + "/tests/diagnosis/testdata/stacks/" + name;
}

struct Result {
  int code = 0;
  std::string out, err;
  nlohmann::json Json() const {
    INFO(out << err);
    REQUIRE(code == 0);
    return nlohmann::json::parse(out);
  }
};

inline Result Analyze(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  Result r;
  r.code = RunAnalyze(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

}  // namespace peregrine::analyze_test

#endif  // PEREGRINE_TESTS_CLI_ANALYZE_ANALYZE_TEST_UTIL_H_
