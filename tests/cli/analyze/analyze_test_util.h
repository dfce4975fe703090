// Helpers for the analyze tests: fixture paths and running `peregrinectl analyze` as a
// function (temporary directories and file I/O: tests/testing/).
#ifndef PEREGRINE_TESTS_CLI_ANALYZE_ANALYZE_TEST_UTIL_H_
#define PEREGRINE_TESTS_CLI_ANALYZE_ANALYZE_TEST_UTIL_H_

#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli/analyze/analyze_command.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::analyze_test {

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
