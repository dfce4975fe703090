// Applying a hot code update (proto/api/code_update_request.h, what `peregrinectl
// update` sends to POST /api/v1/jobs/{namespace}/{name}/code) to a job replaces spec.codeVersion's fields and sets
// the annotation peregrine.dev/hot-update to "urgent" (restart in place now) or removes
// it (lazy: applied at the next failure-triggered restart or when
// faultTolerance.hotUpdateWindowHours expire); the decision engine does the rest.
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_CONTROLLER_CODE_UPDATE_H_
#define PEREGRINE_CONTROLLER_CODE_UPDATE_H_

#include "controller/core/job_spec.h"
#include "proto/api/code_update_request.h"

namespace peregrine {

inline constexpr char kHotUpdateAnnotation[] = "peregrine.dev/hot-update";

// `job` with the update applied (spec.codeVersion and the hot-update annotation). The
// result is not validated here: callers pass it to ValidateTrainingJob / UpdateJob.
TrainingJob ApplyCodeUpdate(TrainingJob job, const CodeUpdateRequest& request);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CODE_UPDATE_H_
