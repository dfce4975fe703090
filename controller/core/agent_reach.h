// Whether the controller can reach a pod's agent, decided from the cluster's view of the
// pod and the agent's stream: an agent silent (no message for heartbeatTimeoutSeconds) or
// disconnected while its pod runs and its node is Ready is "unreachable", a network
// partition between the agent and the controller, not a machine failure. It is shown
// (condition AgentUnreachable, events AgentUnreachable / AgentReachable) and evicts
// nothing, for as long as the pod and the node say the machine is there; a pod that fails
// or a node that stays unready past its grace is judged by the pod's own rules
// (PodLost, pod_health.h JudgeNodeUnready) and evicts as before.
//
// Pure functions of (observations, status, now); thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_AGENT_REACH_H_
#define PEREGRINE_CONTROLLER_CORE_AGENT_REACH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "controller/core/job_state.h"

namespace peregrine {

// True while at least one pod's agent is unreachable; the message lists them.
inline constexpr char kAgentUnreachableCondition[] = "AgentUnreachable";

enum class AgentReach {
  kNotJudged,    // the pod is not running, failed, its node is unready, or no agent ever
                 // registered: the pod's own rules decide
  kReachable,    // connected and heard from within the heartbeat timeout
  kUnreachable,  // silent or disconnected while the pod runs on a Ready node
};

struct AgentReachJudgement {
  AgentReach reach = AgentReach::kNotJudged;
  std::string reason;  // kUnreachable: "agent silent for 5m0s (stream open)"
};

// Judges the link to `agent` (nullptr: never registered) of `pod` (nullptr: not observed)
// at `now`. Pure.
AgentReachJudgement JudgeAgentReach(const PodObservation* pod, const AgentObservation* agent,
                                    int64_t heartbeat_timeout_ns, int64_t now);

struct UnreachableAgent {
  std::string pod;
  std::string machine_id;
  std::string reason;  // JudgeAgentReach's
};

// Sets condition AgentUnreachable of `status` from this round's unreachable agents (True,
// reason "AgentLinkLost", message "pod <pod> (machine <m>): <reason>; ..."; or False
// "AgentsReachable") and returns the events of the change: AgentUnreachable (Warning) for
// each pod not listed in the condition before, AgentReachable (Normal) for each pod listed
// before and not now. The condition is the memory between rounds, so a controller restart
// neither repeats nor loses an event.
std::vector<JobEvent> UpdateAgentUnreachableCondition(const std::vector<UnreachableAgent>& unreachable,
                                                      int64_t generation, int64_t now, JobStatus& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_AGENT_REACH_H_
