#include "tests/testing/files.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <sstream>

namespace peregrine::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadFileIfExists(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  INFO(path);
  REQUIRE(out.good());
  out << content;
  REQUIRE(out.good());
}

std::string SourcePath(const std::string& relative) { return std::string(PEREGRINE_SOURCE_DIR) + "/" + relative; }

std::string BinaryPath(const std::string& relative) { return std::string(PEREGRINE_BINARY_DIR) + "/" + relative; }

}  // namespace peregrine::testing
