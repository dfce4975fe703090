// A hot code update of a running job, as `peregrinectl update` sends it to the
// controller's HTTP API (POST /api/v1/jobs/{namespace}/{name}/code):
//   {"revision": "r2", "image": "...", "command": ["python", "train.py"], "urgent": true}
// revision is required; image and command are optional and keep the job's current
// values when absent. Applying it to a job replaces spec.codeVersion's fields and sets
// the annotation peregrine.dev/hot-update to "urgent" (restart in place now) or removes
// it (lazy: applied at the next failure-triggered restart or when
// faultTolerance.hotUpdateWindowHours expire); the decision engine does the rest.
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_CONTROLLER_CODE_UPDATE_H_
#define PEREGRINE_CONTROLLER_CODE_UPDATE_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/job_spec.h"

namespace peregrine {

inline constexpr char kHotUpdateAnnotation[] = "peregrine.dev/hot-update";

struct CodeUpdateRequest {
  std::string revision;                              // required, non-empty
  std::optional<std::string> image;                  // absent: keep
  std::optional<std::vector<std::string>> command;   // absent: keep; present: non-empty
  bool urgent = false;
};

// Parses the JSON body. kInvalidArgument naming the field on any error (unknown
// fields included).
absl::StatusOr<CodeUpdateRequest> ParseCodeUpdateRequest(std::string_view json_text);
std::string CodeUpdateRequestToJson(const CodeUpdateRequest& request);

// `job` with the update applied (spec.codeVersion and the hot-update annotation). The
// result is not validated here: callers pass it to ValidateTrainingJob / UpdateJob.
TrainingJob ApplyCodeUpdate(TrainingJob job, const CodeUpdateRequest& request);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CODE_UPDATE_H_
