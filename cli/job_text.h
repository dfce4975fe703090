// How peregrinectl prints a TrainingJob: `status` (phase, attempt, step, ETTR, standbys,
// code revision, machines, conditions, the latest incidents, evictions), `incidents`
// (every incident with its kind, signal, decision, actions and time lost) and `timeline`
// (the job's Kubernetes Events and its incidents' detected/decided/resumed times, in
// time order). Input is the JSON the controller writes (controller/status_json.h, the
// TrainingJob's .status) with the job's spec; both backends (the controller's HTTP API
// and the API server) print through here.
//
// Pure formatting; thread-safe. Throws nothing: a field of the wrong type is printed as
// absent ("-" or 0). Callers check the shape first with JobViewFromObject.
#ifndef PEREGRINE_CLI_JOB_TEXT_H_
#define PEREGRINE_CLI_JOB_TEXT_H_

#include <cstddef>
#include <ostream>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace peregrine {

// How many incidents `status` shows (the newest); `incidents` shows all of them.
inline constexpr size_t kStatusIncidents = 5;

// {"namespace", "name", "spec", "status"} (the controller API's job form) from a
// TrainingJob object. kFailedPrecondition when the controller has not written a status
// yet; kInvalidArgument when spec or status is not an object.
absl::StatusOr<nlohmann::json> JobViewFromObject(const nlohmann::json& object);

// `job` is the view above (the controller API answers it as is).
void PrintJobStatus(const nlohmann::json& job, std::ostream& out);
void PrintJobIncidents(const nlohmann::json& job, std::ostream& out);
// `events`: core/v1 Event objects about the job (any order).
void PrintJobTimeline(const nlohmann::json& job, const nlohmann::json& events, std::ostream& out);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_JOB_TEXT_H_
