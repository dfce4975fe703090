// Status conditions of a TrainingJob, with Kubernetes' semantics: one condition per type,
// lastTransitionTime moves only when the status flips, observedGeneration is the
// generation the condition was computed from. Every condition of the job is set through
// SetCondition, by the decision core (and, for a spec that cannot even be decided on, by
// the Kubernetes reconciler through the same function).
//
// Pure functions; thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_CONDITIONS_H_
#define PEREGRINE_CONTROLLER_CORE_CONDITIONS_H_

#include <cstdint>
#include <string>

#include "controller/core/job_state.h"

namespace peregrine {

// Sets condition `type` of `status` to `value` ("True"/"False") with the reason and
// message, adding it when absent. Returns true when anything changed.
bool SetCondition(JobStatus& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, int64_t generation, int64_t now);

// The condition of that type, or nullptr.
const Condition* FindCondition(const JobStatus& status, const std::string& type);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_CONDITIONS_H_
