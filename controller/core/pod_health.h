// Pods that cannot start, decided from the cluster's observations: a standby stuck for
// too long counts as failed (and is replaced), and condition PodsStuck lists what is
// stuck. Pods on an unready node: whether the machine is lost or its agent vouches for it
// (JudgeNodeUnready). Both clusters feed the same observations (PodObservation::waiting_reason and
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
// True while a pod's node is unready but its agent vouches for the machine
// (JudgeNodeUnready kTolerate): the message lists them.
inline constexpr char kNodeUnreachableCondition[] = "NodeUnreachable";

// A standby pod of `status` that cannot start (waiting_reason set) for at least
// `timeout_ns` since the cluster created it becomes failed, with reason "stuck Pending for
// <age>: <waiting reason>" and no machine (an image or scheduling problem is not the
// node's fault, so nothing is quarantined). Pods with an unknown creation time, active
// pods and pods within the timeout are left as they are.
void FailStuckStandbys(const JobStatus& status, int64_t now, int64_t timeout_ns, std::vector<PodObservation>& pods);

// True when FailStuckStandbys would mark at least one of `pods` failed (so a caller copies
// the observation only then).
bool AnyStuckStandby(const JobStatus& status, int64_t now, int64_t timeout_ns, const std::vector<PodObservation>& pods);

// "<pod>: <waiting reason>; ..." of the pods that cannot start, at most five named then
// "and N more"; "" when none is stuck.
std::string StuckPodsMessage(const std::vector<PodObservation>& pods);

// Sets condition PodsStuck of `status` from the observed pods: True with the first stuck
// pod's reason and StuckPodsMessage, or False "NoStuckPods".
void UpdatePodsStuckCondition(const std::vector<PodObservation>& pods, int64_t generation, int64_t now,
                              JobStatus& status);

// A pod whose node reports Ready=False/Unknown (PodObservation::node_unready) keeps its
// machine while the machine's own agent vouches for it: the kubelet or its link to the
// API server may be what failed, not the machine the job runs on.
enum class NodeUnreadyVerdict {
  kReady,     // the node is Ready (or its pod is not observed): nothing to judge
  kTolerate,  // within the grace, the agent heartbeats and (when training) makes progress
  kEvict,     // the machine is lost: evict it (and quarantine it: its node is at fault)
};

struct NodeUnreadyInput {
  bool node_unready = false;
  std::string node_reason;        // "node n1 Ready=Unknown"
  const AgentObservation* agent = nullptr;  // the pod's agent; nullptr: never registered
  bool training = false;          // the agent runs the job's current attempt (progress expected)
  uint64_t step = 0;              // the most advanced step its ranks completed now
  int64_t since = 0;              // when the controller first saw the node unready (0: now)
  uint64_t since_step = 0;        // the step recorded then, or at the last advance
  int64_t progress_at = 0;        // when the step last advanced (0: since)
  int64_t grace_ns = 0;           // nodeUnreachableGraceSeconds
  int64_t heartbeat_timeout_ns = 0;  // heartbeatTimeoutSeconds: silence that means the agent is gone
  int64_t stall_ns = 0;           // no step for this long while training: no progress
};

struct NodeUnreadyJudgement {
  NodeUnreadyVerdict verdict = NodeUnreadyVerdict::kReady;
  std::string reason;      // why evicted, or what is tolerated (for the event and condition)
  int64_t since = 0;       // the suspicion's start to keep (0 when Ready)
  uint64_t step = 0;       // the step to keep
  int64_t progress_at = 0; // when it last advanced
};

// Judges one pod's unready node at `now`: kEvict when the agent is gone (never registered,
// disconnected, or silent for longer than heartbeat_timeout_ns), when the ranks it trains
// completed no step for longer than stall_ns, or when the node has been unready for longer
// than grace_ns; kTolerate otherwise (the suspicion's start and progress are returned to be
// persisted). Pure.
NodeUnreadyJudgement JudgeNodeUnready(const NodeUnreadyInput& in, int64_t now);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_POD_HEALTH_H_
