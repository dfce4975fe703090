// WriteFileDurably (base/durable_file.h): replaces files whole, keeps the mode, leaves no
// temporary behind, and names the path on errors.
#include "base/durable_file.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int Entries(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.exists() ? 1 : 0;
  return n;
}

TEST_CASE("WriteFileDurably creates and replaces a file whole and leaves no temporary", "[unit]") {
  testing::TempDir dir;
  const std::string path = dir.Path("status.json");
  REQUIRE(WriteFileDurably(path, "{\"a\": 1}").ok());
  CHECK(Slurp(path) == "{\"a\": 1}");
  const std::string big(1 << 20, 'x');
  REQUIRE(WriteFileDurably(path, big).ok());
  CHECK(Slurp(path) == big);
  REQUIRE(WriteFileDurably(path, "").ok());
  CHECK(Slurp(path).empty());
  CHECK(Entries(dir.path()) == 1);
}

TEST_CASE("WriteFileDurably applies the mode to a new file", "[unit]") {
  testing::TempDir dir;
  const std::string path = dir.Path("token");
  REQUIRE(WriteFileDurably(path, "secret\n", 0600).ok());
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("WriteFileDurably names the path when the directory is missing and keeps the old file on failure", "[unit]") {
  testing::TempDir dir;
  const absl::Status missing = WriteFileDurably(dir.Path("no/such/dir/file"), "x");
  CHECK(absl::IsInternal(missing));
  CHECK_THAT(std::string(missing.message()), Catch::Contains("no/such/dir/file"));

  // The rename fails (the target is a non-empty directory): the old content stays, and
  // the temporary is removed.
  const std::string target = dir.Path("occupied");
  dir.Write("occupied/inside", "keep");
  const absl::Status s = WriteFileDurably(target, "new");
  CHECK(absl::IsInternal(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("rename"));
  CHECK(Slurp(dir.Path("occupied/inside")) == "keep");
  CHECK(Entries(dir.path()) == 1);
}

}  // namespace
}  // namespace peregrine
