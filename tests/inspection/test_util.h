// Helpers shared by the inspection tests: fixture files and self-deleting temp dirs.
#ifndef PEREGRINE_TESTS_INSPECTION_TEST_UTIL_H_
#define PEREGRINE_TESTS_INSPECTION_TEST_UTIL_H_

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace peregrine::testing {

inline std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(PEREGRINE_SOURCE_DIR) + "/tests/inspection/testdata/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string FixturePath(const std::string& name) {
  return std::string(PEREGRINE_SOURCE_DIR) + "/tests/inspection/testdata/" + name;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "peregrine-inspect-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

  // Writes `content` to path()/relative, creating parent directories.
  std::string Write(const std::string& relative, const std::string& content,
                    bool executable = false) const {
    const std::filesystem::path p = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(p.parent_path());
    {
      std::ofstream out(p, std::ios::trunc);
      REQUIRE(out.good());
      out << content;
    }
    if (executable) REQUIRE(chmod(p.c_str(), 0755) == 0);
    return p.string();
  }
  void MakeDir(const std::string& relative) const {
    std::filesystem::create_directories(std::filesystem::path(path_) / relative);
  }

 private:
  std::string path_;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_INSPECTION_TEST_UTIL_H_
