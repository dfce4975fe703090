// Fixture files of the inspection tests (tests/agent/inspection/testdata); temporary
// directories come from the kit (tests/testing/temp_dir.h).
#ifndef PEREGRINE_TESTS_AGENT_INSPECTION_TEST_UTIL_H_
#define PEREGRINE_TESTS_AGENT_INSPECTION_TEST_UTIL_H_

#include <string>

#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::testing {

inline std::string FixturePath(const std::string& name) {
  return SourcePath("tests/agent/inspection/testdata/" + name);
}

inline std::string Fixture(const std::string& name) { return ReadFile(FixturePath(name)); }

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_AGENT_INSPECTION_TEST_UTIL_H_
