// JSON form of JobStatus: the TrainingJob status subresource (camelCase, the CRD's
// status schema), the local state file and the controller's HTTP API all use it.
// Adapter code (nlohmann-json); thread-safe.
#ifndef PEREGRINE_CONTROLLER_STATUS_JSON_H_
#define PEREGRINE_CONTROLLER_STATUS_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "controller/core/job_state.h"

namespace peregrine {

// kStored: the TrainingJob status and the state file; bounded for a 100,000-GPU job
// (a larger job's slots as the compact machineTable, an incident's first
// kMaxStoredIncidentMachines machine ids, an eviction reason equal to its incident's
// signal stored once; status_compact.h). Everything the decision core resumes from reads
// back exactly. kFull: the controller's HTTP API; every slot listed, every machine id.
enum class StatusForm { kStored, kFull };

// Serialises every field (the CRD's status schema declares each one, so the API server
// prunes nothing); times as RFC 3339 strings in UTC with microseconds, "" when unset.
std::string JobStatusToJson(const JobStatus& status, int indent = -1, StatusForm form = StatusForm::kStored);
// kInvalidArgument naming the field when the text is not a JobStatus. Reads both forms
// and the statuses older controllers wrote (listed machines, placement, eventsSeen).
absl::StatusOr<JobStatus> JobStatusFromJson(const std::string& text);

std::string FormatRfc3339(int64_t unix_nanos);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_STATUS_JSON_H_
