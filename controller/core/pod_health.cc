#include "controller/core/pod_health.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "controller/core/conditions.h"

namespace peregrine {

namespace {

// A standby of `standbys` waiting to start for at least `timeout_ns` (FailStuckStandbys).
bool StuckStandby(const PodObservation& p, const std::set<std::string>& standbys, int64_t now, int64_t timeout_ns) {
  if (p.running || p.failed || p.waiting_reason.empty() || p.created_at <= 0 || !standbys.count(p.name)) return false;
  return now - p.created_at >= timeout_ns;
}

std::set<std::string> StandbyPods(const JobStatus& status) {
  std::set<std::string> standbys;
  for (const StandbyStatus& s : status.standbys) standbys.insert(s.pod);
  return standbys;
}

}  // namespace

bool AnyStuckStandby(const JobStatus& status, int64_t now, int64_t timeout_ns, const std::vector<PodObservation>& pods) {
  const std::set<std::string> standbys = StandbyPods(status);
  for (const PodObservation& p : pods) {
    if (StuckStandby(p, standbys, now, timeout_ns)) return true;
  }
  return false;
}

void FailStuckStandbys(const JobStatus& status, int64_t now, int64_t timeout_ns, std::vector<PodObservation>& pods) {
  const std::set<std::string> standbys = StandbyPods(status);
  for (PodObservation& p : pods) {
    if (!StuckStandby(p, standbys, now, timeout_ns)) continue;
    const int64_t pending = now - p.created_at;
    p.failed = true;
    p.reason = absl::StrCat("stuck Pending for ",
                            absl::FormatDuration(absl::Trunc(absl::Nanoseconds(pending), absl::Seconds(1))), ": ",
                            p.waiting_reason);
    p.machine_id.clear();
  }
}

std::string StuckPodsMessage(const std::vector<PodObservation>& pods) {
  constexpr int kMaxListed = 5;
  std::vector<std::string> parts;
  int more = 0;
  for (const PodObservation& p : pods) {
    if (p.waiting_reason.empty()) continue;
    if (static_cast<int>(parts.size()) < kMaxListed) {
      parts.push_back(absl::StrCat(p.name, ": ", p.waiting_reason));
    } else {
      ++more;
    }
  }
  std::string out = absl::StrJoin(parts, "; ");
  if (more > 0) absl::StrAppend(&out, "; and ", more, " more");
  return out;
}

void UpdatePodsStuckCondition(const std::vector<PodObservation>& pods, int64_t generation, int64_t now,
                              JobStatus& status) {
  const std::string message = StuckPodsMessage(pods);
  if (message.empty()) {
    SetCondition(status, kPodsStuckCondition, false, "NoStuckPods", "no pod of the job is stuck", generation, now);
    return;
  }
  // The reason is the first stuck pod's ("<pod>: <Reason> ...").
  const size_t start = message.find(": ") + 2;
  const std::string reason = message.substr(start, message.find_first_of(" :;", start) - start);
  SetCondition(status, kPodsStuckCondition, true, reason, message, generation, now);
}

// A node's Ready condition is the kubelet's word, relayed through the API server: a
// kubelet restart, a partitioned control plane or an overloaded API server turn it
// Unknown while the machine trains on. The agent's own stream is a second, independent
// witness: while it heartbeats and its ranks complete steps, the machine works. The grace
// bounds how long the two may disagree; a silent agent ends the disagreement at once.
NodeUnreadyJudgement JudgeNodeUnready(const NodeUnreadyInput& in, int64_t now) {
  NodeUnreadyJudgement j;
  if (!in.node_unready) return j;
  j.since = in.since > 0 ? in.since : now;
  j.step = in.since_step;
  j.progress_at = in.progress_at > 0 ? in.progress_at : j.since;
  if (in.training && in.step > j.step) {
    j.step = in.step;
    j.progress_at = now;
  }
  auto seconds = [](int64_t ns) {
    return absl::FormatDuration(absl::Trunc(absl::Nanoseconds(ns), absl::Seconds(1)));
  };
  const AgentObservation* a = in.agent;
  j.verdict = NodeUnreadyVerdict::kEvict;
  if (a == nullptr) {
    j.reason = absl::StrCat(in.node_reason, " and its agent never registered");
  } else if (!a->connected) {
    j.reason = absl::StrCat(in.node_reason, " and its agent is disconnected");
  } else if (now - a->last_seen > in.heartbeat_timeout_ns) {
    j.reason = absl::StrCat(in.node_reason, " and its agent silent for ", seconds(now - a->last_seen));
  } else if (in.training && now - j.progress_at > in.stall_ns) {
    j.reason = absl::StrCat(in.node_reason, " and its ranks completed no step for ", seconds(now - j.progress_at));
  } else if (now - j.since > in.grace_ns || in.grace_ns == 0) {
    j.reason = absl::StrCat(in.node_reason, " for ", seconds(now - j.since), ", past the grace of ",
                            seconds(in.grace_ns), " (the agent still heartbeats)");
  } else {
    j.verdict = NodeUnreadyVerdict::kTolerate;
    j.reason = absl::StrCat(in.node_reason, " for ", seconds(now - j.since), ", but its agent heartbeats",
                            in.training ? " and its ranks make progress" : "", ": kept for up to ",
                            seconds(in.grace_ns));
  }
  return j;
}

}  // namespace peregrine
