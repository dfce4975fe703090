#include "agent/inspection/inspection_result.h"

#include "absl/strings/str_cat.h"

namespace peregrine {

const char* InspectionStatusName(InspectionStatus status) {
  switch (status) {
    case InspectionStatus::kOk: return "OK";
    case InspectionStatus::kNotPresent: return "NOT_PRESENT";
    case InspectionStatus::kWarning: return "WARNING";
    case InspectionStatus::kFault: return "FAULT";
    case InspectionStatus::kError: return "ERROR";
  }
  return "UNKNOWN";
}

int InspectionSeverity(InspectionStatus status) {
  switch (status) {
    case InspectionStatus::kWarning: return 1;
    case InspectionStatus::kFault: return 2;
    default: return 0;
  }
}

std::string InspectionResult::DebugString() const {
  return absl::StrCat(kind, "/", component, " ", InspectionStatusName(status),
                      machine_attributed ? " (machine)" : "", ": ", summary);
}

}  // namespace peregrine
