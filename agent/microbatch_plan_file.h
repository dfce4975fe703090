// The micro-batch plan file on the agent's side: where it lives, writing it when a
// SetMicroBatchPlan command is accepted and removing it when the plan is cleared, when
// training (re)starts and when the agent starts. The training ranks read it through the
// client library (pg_microbatches), named by PEREGRINE_MICROBATCH_PLAN; its text is
// client/microbatch_plan_format.h.
//
// A plan holds for the training run during which it was set: every launch removes it
// first, so a restarted or activated run never follows a plan made for another one (the
// controller sends a new plan if it still wants one).
//
// Functions do file I/O on the calling thread (the agent's loop; the file is a few hundred
// bytes). Errors: InvalidArgument naming the field for a plan that is not valid, Internal
// naming the step and path for a file system error.
#ifndef PEREGRINE_AGENT_MICROBATCH_PLAN_FILE_H_
#define PEREGRINE_AGENT_MICROBATCH_PLAN_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "client/microbatch_plan_format.h"

namespace peregrine {

// <log_dir>/microbatch-plan, or /tmp/peregrine-microbatch-<pod>/microbatch-plan without a
// log directory: a path every rank of the pod can read (the ranks are the agent's children).
std::string MicroBatchPlanPathFor(const std::string& log_dir, const std::string& pod_name);

// Replaces the file at `path` with `plan` atomically (temporary file, fsync, rename; the
// directory is created when missing), or removes it when `plan` is empty. A reader sees
// the old plan or the new one, never a part.
absl::Status WriteMicroBatchPlan(const std::string& path, const MicroBatchPlan& plan);

// Removes the file at `path`; OK when there is none.
absl::Status ClearMicroBatchPlan(const std::string& path);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_MICROBATCH_PLAN_FILE_H_
