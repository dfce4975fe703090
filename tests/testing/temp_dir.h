// TempDir: a fresh directory under the system temp dir, removed with its contents when the
// object goes away (kept when PEREGRINE_KEEP_TEST_DIRS is set, to debug a failure).
// Creation failing fails the test (Catch2 REQUIRE). Not thread-safe; owned by one test.
#ifndef PEREGRINE_TESTS_TESTING_TEMP_DIR_H_
#define PEREGRINE_TESTS_TESTING_TEMP_DIR_H_

#include <string>

namespace peregrine::testing {

class TempDir {
 public:
  // `prefix` names the directory (<tmp>/<prefix>-XXXXXX) so a kept one is easy to find.
  explicit TempDir(const std::string& prefix = "peregrine-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name (not created).
  std::string Path(const std::string& name) const;
  // Writes `content` to path()/relative, creating parent directories; returns its path.
  std::string Write(const std::string& relative, const std::string& content, bool executable = false) const;
  // Creates path()/relative and its parents.
  void MakeDir(const std::string& relative) const;

 private:
  std::string path_;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_TEMP_DIR_H_
