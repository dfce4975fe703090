#include "tests/testing/temp_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace peregrine::testing {

TempDir::TempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  path_ = tmpl;
}

TempDir::~TempDir() {
  if (std::getenv("PEREGRINE_KEEP_TEST_DIRS") != nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Path(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

std::string TempDir::Write(const std::string& relative, const std::string& content, bool executable) const {
  const std::filesystem::path p = std::filesystem::path(path_) / relative;
  std::filesystem::create_directories(p.parent_path());
  {
    std::ofstream out(p, std::ios::trunc | std::ios::binary);
    REQUIRE(out.good());
    out << content;
    REQUIRE(out.good());
  }
  if (executable) REQUIRE(::chmod(p.c_str(), 0755) == 0);
  return p.string();
}

void TempDir::MakeDir(const std::string& relative) const {
  std::filesystem::create_directories(std::filesystem::path(path_) / relative);
}

}  // namespace peregrine::testing
