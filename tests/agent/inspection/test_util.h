// Fixture files of the inspection tests (tests/agent/inspection/testdata) and a lookup of
// one component's result; temporary directories come from the kit (tests/testing/temp_dir.h).
#ifndef PEREGRINE_TESTS_AGENT_INSPECTION_TEST_UTIL_H_
#define PEREGRINE_TESTS_AGENT_INSPECTION_TEST_UTIL_H_

#include <string>
#include <vector>

#include "agent/inspection/inspection_result.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::testing {

inline std::string FixturePath(const std::string& name) {
  return SourcePath("tests/agent/inspection/testdata/" + name);
}

inline std::string Fixture(const std::string& name) { return ReadFile(FixturePath(name)); }

// The result for `component` in `results`, or nullptr when there is none.
inline const InspectionResult* Find(const std::vector<InspectionResult>& results, const std::string& component) {
  for (const InspectionResult& r : results) {
    if (r.component == component) return &r;
  }
  return nullptr;
}

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_AGENT_INSPECTION_TEST_UTIL_H_
