// Captured stacks of the stack tests (tests/diagnosis/testdata/stacks; its README.md says
// how each was captured). A fixture that cannot be read fails the test (Catch2 REQUIRE).
#ifndef PEREGRINE_TESTS_DIAGNOSIS_STACK_FIXTURES_H_
#define PEREGRINE_TESTS_DIAGNOSIS_STACK_FIXTURES_H_

#include <string>

#include "tests/testing/files.h"

namespace peregrine {

// The text of testdata/stacks/`name`.
inline std::string StackFixture(const std::string& name) {
  return testing::ReadFile(testing::SourcePath("tests/diagnosis/testdata/stacks/" + name));
}

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_DIAGNOSIS_STACK_FIXTURES_H_
