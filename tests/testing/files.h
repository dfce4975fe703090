// Whole-file reads and writes for tests. A file that cannot be opened fails the test
// (Catch2 REQUIRE); use ReadFileIfExists where a missing file is an expected outcome.
#ifndef PEREGRINE_TESTS_TESTING_FILES_H_
#define PEREGRINE_TESTS_TESTING_FILES_H_

#include <string>

namespace peregrine::testing {

// The bytes of `path`; REQUIREs that it can be read.
std::string ReadFile(const std::string& path);
// The bytes of `path`, or "" when it cannot be opened.
std::string ReadFileIfExists(const std::string& path);
// Replaces `path` with `content`; REQUIREs that the write succeeds.
void WriteFile(const std::string& path, const std::string& content);
// PEREGRINE_SOURCE_DIR/<relative>: fixtures under the source tree.
std::string SourcePath(const std::string& relative);
// PEREGRINE_BINARY_DIR/<relative>: binaries and libraries of the build.
std::string BinaryPath(const std::string& relative);

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_FILES_H_
