#include "agent/inspection/inspection_result.h"

#include "absl/strings/str_cat.h"

namespace peregrine {

const char* InspectionOutcomeName(InspectionOutcome status) {
  switch (status) {
    case InspectionOutcome::kOk: return "OK";
    case InspectionOutcome::kNotPresent: return "NOT_PRESENT";
    case InspectionOutcome::kWarning: return "WARNING";
    case InspectionOutcome::kFault: return "FAULT";
    case InspectionOutcome::kError: return "ERROR";
    case InspectionOutcome::kCannotSee: return "CANNOT_SEE";
  }
  return "UNKNOWN";
}

int InspectionSeverity(InspectionOutcome status) {
  switch (status) {
    case InspectionOutcome::kWarning: return 1;
    case InspectionOutcome::kFault: return 2;
    default: return 0;
  }
}

std::string InspectionResult::DebugString() const {
  return absl::StrCat(kind, "/", component, " ", InspectionOutcomeName(status),
                      machine_attributed ? " (machine)" : "", ": ", summary);
}

}  // namespace peregrine
