#include "controller/core/agent_reach.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "controller/core/conditions.h"

namespace peregrine {
namespace {

constexpr char kListPrefix[] = "pod ";

// The pods a condition message of UpdateAgentUnreachableCondition names.
std::set<std::string> PodsNamed(const std::string& message) {
  std::set<std::string> pods;
  for (absl::string_view part : absl::StrSplit(message, "; ", absl::SkipEmpty())) {
    if (!absl::ConsumePrefix(&part, kListPrefix)) continue;
    const size_t end = part.find(' ');
    pods.insert(std::string(part.substr(0, end)));
  }
  return pods;
}

}  // namespace

// A partition is the opposite of an unready node: the cluster (kubelet, or the local
// process session) says the machine is there, and only the agent's own stream is silent.
// The stream is the weaker witness of the two: a network partition, an overloaded
// controller or a half-open TCP connection silence it while training goes on, and the
// agent keeps its ranks running without the controller. So the silence alone decides
// nothing; the reason names the time of the last message (not a running duration) so
// that the condition changes only when the set of unreachable agents does.
AgentReachJudgement JudgeAgentReach(const PodObservation* pod, const AgentObservation* agent,
                                    int64_t heartbeat_timeout_ns, int64_t now) {
  AgentReachJudgement j;
  if (pod == nullptr || !pod->running || pod->failed || pod->node_unready || agent == nullptr) return j;
  const bool silent = now - agent->last_seen > heartbeat_timeout_ns;
  if (agent->connected && !silent) {
    j.reach = AgentReach::kReachable;
    return j;
  }
  j.reach = AgentReach::kUnreachable;
  const std::string last =
      agent->last_seen > 0
          ? absl::StrCat("last message at ",
                         absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixNanos(agent->last_seen),
                                          absl::UTCTimeZone()))
          : "no message yet";
  const std::string how =
      agent->connected
          ? absl::StrCat("agent silent past the heartbeat timeout of ",
                         absl::FormatDuration(absl::Nanoseconds(heartbeat_timeout_ns)), " (stream open)")
          : "agent disconnected (stream closed)";
  j.reason = absl::StrCat(how, ", ", last, "; its pod runs and its node is Ready: kept, nothing evicted");
  return j;
}

std::vector<JobEvent> UpdateAgentUnreachableCondition(const std::vector<UnreachableAgent>& unreachable,
                                                      int64_t generation, int64_t now, JobStatus& status) {
  std::set<std::string> before;
  if (const Condition* c = FindCondition(status, kAgentUnreachableCondition);
      c != nullptr && c->status == ConditionStatus::kTrue) {
    before = PodsNamed(c->message);
  }
  std::vector<JobEvent> events;
  std::set<std::string> after;
  std::vector<std::string> parts;
  for (const UnreachableAgent& u : unreachable) {
    const std::string entry = absl::StrCat(kListPrefix, u.pod, " (machine ", u.machine_id, "): ", u.reason);
    parts.push_back(entry);
    after.insert(u.pod);
    if (!before.count(u.pod)) events.push_back(JobEvent{JobEventType::kWarning, "AgentUnreachable", entry});
  }
  for (const std::string& pod : before) {
    if (!after.count(pod)) {
      events.push_back(JobEvent{JobEventType::kNormal, "AgentReachable",
                                absl::StrCat(kListPrefix, pod, ": its agent is heard from again, or its pod left")});
    }
  }
  if (parts.empty()) {
    SetCondition(status, kAgentUnreachableCondition, false, "AgentsReachable",
                 "every running pod's agent is heard from", generation, now);
  } else {
    SetCondition(status, kAgentUnreachableCondition, true, "AgentLinkLost", absl::StrJoin(parts, "; "), generation,
                 now);
  }
  return events;
}

}  // namespace peregrine
