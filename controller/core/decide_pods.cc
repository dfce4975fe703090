// DecideJob, pods and the warm-standby pool: pool size, replacement of failed standbys, one pod per slot, replenishing, tear-down, orphans.
#include <algorithm>
#include <limits>
#include <set>
#include <string_view>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/conditions.h"
#include "controller/core/hang_policy.h"
#include "controller/core/internal/decider.h"
#include "controller/core/loss_monitor.h"
#include "controller/core/pod_health.h"
#include "controller/core/recovery_policy.h"
#include "controller/core/standby_pool_size.h"
#include "controller/core/stop_time_diagnosis.h"

namespace peregrine::decision_internal {

void Decider::SizeStandbyPool() {
  StandbyPoolInputs in;
  in.machines = spec_.machines;
  in.daily_failure_rate = spec_.standby.daily_failure_rate;
  in.replenish_horizon_hours = spec_.standby.replenish_horizon_hours;
  in.percentile = spec_.standby.percentile;
  in.min = spec_.standby.min;
  in.max = spec_.standby.max;
  auto k = StandbyPoolSize(in);
  plan_.status.standby_desired = k.ok() ? static_cast<int>(*k) : spec_.standby.min;
}

void Decider::ReplaceFailedStandbys() {
  JobStatus& st = plan_.status;
  std::vector<StandbyStatus> kept;
  const FaultToleranceSpec& ft = spec_.fault_tolerance;
  for (StandbyStatus& sb : st.standbys) {
    std::string reason;
    const PodObservation* p = Pod(sb.pod);
    bool lost = PodLost(sb.pod, sb.observed, &reason);
    bool machine_fault = true;
    if (lost && (p == nullptr || p->not_machine_fault)) {
      // OOMKilled, evicted for memory pressure, preempted, deleted by someone else: the
      // standby is replaced, its machine is not to blame.
      machine_fault = false;
      if (p == nullptr) reason = "pod disappeared without Peregrine deleting it";
      absl::StrAppend(&reason, " (not the machine's fault: it is not quarantined)");
    } else if (!lost && p != nullptr) {
      // An unready node: lost when the standby's agent is silent or past the grace.
      NodeUnreadyInput in;
      in.node_unready = p->node_unready;
      in.node_reason = p->reason.empty() ? absl::StrCat("node ", p->machine_id, " not Ready") : p->reason;
      in.agent = Agent(sb.pod);
      in.since = sb.node_unready_since;
      in.grace_ns = static_cast<int64_t>(ft.node_unreachable_grace_seconds) * kNanosPerSecond;
      in.heartbeat_timeout_ns = static_cast<int64_t>(ft.heartbeat_timeout_seconds) * kNanosPerSecond;
      const NodeUnreadyJudgement j = JudgeNodeUnready(in, now_);
      if (j.verdict == NodeUnreadyVerdict::kTolerate && sb.node_unready_since == 0) {
        Event(JobEventType::kWarning, "NodeUnreachableTolerated",
              absl::StrFormat("standby %s (machine %s): %s", sb.pod, sb.machine_id, j.reason));
      }
      sb.node_unready_since = j.verdict == NodeUnreadyVerdict::kReady ? 0 : j.since;
      if (j.verdict == NodeUnreadyVerdict::kEvict) {
        lost = true;
        reason = j.reason;
      }
    }
    if (lost) {
      // The machine is evicted (and quarantined) only on the machine's evidence: the pod
      // disappeared or failed on it. A standby failed for being stuck Pending (an image or
      // scheduling problem, FailStuckStandbys) carries no machine in its observation, even
      // when an earlier pod of it ran on one: nothing is quarantined.
      const std::string machine = p == nullptr ? sb.machine_id : p->machine_id;
      Eviction eviction{machine, sb.pod, absl::StrCat("standby failed: ", reason), now_};
      eviction.machine_fault = machine_fault;
      st.evicted.push_back(std::move(eviction));
      plan_.delete_pods.push_back(PodToDelete{sb.pod, absl::StrCat("standby failed: ", reason)});
      Event(JobEventType::kWarning, "StandbyFailed", absl::StrCat("standby ", sb.pod, " failed: ", reason));
      continue;
    }
    kept.push_back(sb);
  }
  st.standbys = std::move(kept);
  TrimFront(st.evicted, config_.max_evictions);
}

// Before an attempt starts (the first, or the next after a suspension) no rank trains, so
// a slot whose pod is lost (failed, or gone without Peregrine deleting it: evicted,
// deleted by someone, or a pod from before a suspension that a lagging cache showed for a
// moment) has nothing to recover: its pod is created again, with no incident and no
// machine blamed. Without this the slot stayed observed with no pod and the job waited
// in Pending for ever.
void Decider::RecreateLostPendingSlots() {
  JobStatus& st = plan_.status;
  if (st.attempt != 0 && st.phase != JobPhase::kPending) return;
  for (SlotStatus& slot : st.slots) {
    std::string reason;
    if (!PodLost(slot.pod, slot.observed, &reason)) continue;
    if (Pod(slot.pod) != nullptr) {
      plan_.delete_pods.push_back(PodToDelete{slot.pod, absl::StrCat("lost before the attempt started: ", reason)});
    }
    Event(JobEventType::kWarning, "PodRecreated",
          absl::StrFormat("machine slot %d: pod %s (machine %s) was lost before the attempt started (%s); it is created "
                          "again",
                          slot.index, slot.pod, slot.machine_id.empty() ? "unknown" : slot.machine_id, reason));
    slot.observed = false;
    slot.machine_id.clear();
  }
}

void Decider::EnsurePods() {
  for (const SlotStatus& slot : plan_.status.slots) {
    if (!slot.observed && Pod(slot.pod) == nullptr) {
      plan_.create_pods.push_back(PodToCreate{slot.pod, PodRole::kActive, slot.index, ActiveImage()});
    }
  }
  for (const StandbyStatus& sb : plan_.status.standbys) {
    if (!sb.observed && Pod(sb.pod) == nullptr) {
      plan_.create_pods.push_back(PodToCreate{sb.pod, PodRole::kStandby, -1, StandbyImage()});
    }
  }
}

void Decider::ReplenishStandbys() {
  JobStatus& st = plan_.status;
  if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) return;
  while (static_cast<int>(st.standbys.size()) < st.standby_desired) {
    StandbyStatus sb{StandbyPodName(job_.metadata.name, st.next_pod_serial++), "", false};
    st.standbys.push_back(sb);
    plan_.create_pods.push_back(PodToCreate{sb.pod, PodRole::kStandby, -1, StandbyImage()});
  }
  while (static_cast<int>(st.standbys.size()) > st.standby_desired) {
    plan_.delete_pods.push_back(PodToDelete{st.standbys.back().pod, "standby pool larger than desired"});
    st.standbys.pop_back();
  }
  int ready = 0;
  for (const StandbyStatus& sb : st.standbys) {
    const AgentObservation* a = Agent(sb.pod);
    const PodObservation* p = Pod(sb.pod);
    if (a && a->connected && a->registered_as_standby && a->self_check_passed && p && p->running) ++ready;
  }
  st.standby_ready = ready;
}

void Decider::TearDownStandbys() {
  JobStatus& st = plan_.status;
  for (const StandbyStatus& sb : st.standbys) plan_.delete_pods.push_back(PodToDelete{sb.pod, "job finished"});
  st.standbys.clear();
  st.standby_ready = 0;
}

// Pods the cluster shows for the job that are neither a slot nor a standby (an evicted
// pod whose deletion failed, a leftover after a controller restart) are deleted.
void Decider::DeleteOrphans() {
  std::unordered_set<std::string_view> wanted;
  wanted.reserve(plan_.status.slots.size() + plan_.status.standbys.size());
  for (const SlotStatus& s : plan_.status.slots) wanted.insert(s.pod);
  for (const StandbyStatus& s : plan_.status.standbys) wanted.insert(s.pod);
  std::set<std::string> already;  // copies: delete_pods grows below
  for (const PodToDelete& d : plan_.delete_pods) already.insert(d.name);
  for (const PodObservation& p : obs_.pods) {
    if (!wanted.count(p.name) && !already.count(p.name) && (p.running || p.failed)) {
      plan_.delete_pods.push_back(PodToDelete{p.name, "not part of the job any more"});
    }
  }
}

}  // namespace peregrine::decision_internal
