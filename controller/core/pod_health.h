// Pods that cannot start, decided from the cluster's observations: a standby stuck for
// too long counts as failed (and is replaced), and condition PodsStuck lists what is
// stuck. Both clusters feed the same observations (PodObservation::waiting_reason and
// created_at), so the rule and the condition are the same for Kubernetes and local mode.
//
// Pure functions of (observations, status, now); thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_POD_HEALTH_H_
#define PEREGRINE_CONTROLLER_CORE_POD_HEALTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "controller/core/job_state.h"

namespace peregrine {

inline constexpr char kPodsStuckCondition[] = "PodsStuck";

// A standby pod of `status` that cannot start (waiting_reason set) for at least
// `timeout_ns` since the cluster created it becomes failed, with reason "stuck Pending for
// <age>: <waiting reason>" and no machine (an image or scheduling problem is not the
// node's fault, so nothing is quarantined). Pods with an unknown creation time, active
// pods and pods within the timeout are left as they are.
void FailStuckStandbys(const JobStatus& status, int64_t now, int64_t timeout_ns, std::vector<PodObservation>& pods);

// "<pod>: <waiting reason>; ..." of the pods that cannot start, at most five named then
// "and N more"; "" when none is stuck.
std::string StuckPodsMessage(const std::vector<PodObservation>& pods);

// Sets condition PodsStuck of `status` from the observed pods: True with the first stuck
// pod's reason and StuckPodsMessage, or False "NoStuckPods".
void UpdatePodsStuckCondition(const std::vector<PodObservation>& pods, int64_t generation, int64_t now,
                              JobStatus& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_POD_HEALTH_H_
