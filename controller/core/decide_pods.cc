// DecideJob, pods and the warm-standby pool: pool size, replacement of failed standbys, one pod per slot, replenishing, tear-down, orphans.
#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/conditions.h"
#include "controller/core/hang_policy.h"
#include "controller/core/internal/decider.h"
#include "controller/core/loss_monitor.h"
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
  for (const StandbyStatus& sb : st.standbys) {
    std::string reason;
    if (PodLost(sb.pod, sb.observed, &reason)) {
      // The machine is evicted (and quarantined) only on the machine's evidence: the pod
      // disappeared or failed on it. A standby failed for being stuck Pending (an image or
      // scheduling problem, FailStuckStandbys) carries no machine in its observation, even
      // when an earlier pod of it ran on one: nothing is quarantined.
      const PodObservation* p = Pod(sb.pod);
      const std::string machine = p == nullptr ? sb.machine_id : p->machine_id;
      st.evicted.push_back(Eviction{machine, sb.pod, absl::StrCat("standby failed: ", reason), now_});
      plan_.delete_pods.push_back(PodToDelete{sb.pod, absl::StrCat("standby failed: ", reason)});
      Event(JobEventType::kWarning, "StandbyFailed", absl::StrCat("standby ", sb.pod, " failed: ", reason));
      continue;
    }
    kept.push_back(sb);
  }
  st.standbys = std::move(kept);
  TrimFront(st.evicted, config_.max_evictions);
}

void Decider::EnsurePods() {
  for (const SlotStatus& slot : plan_.status.slots) {
    if (!slot.observed && Pod(slot.pod) == nullptr) {
      plan_.create_pods.push_back(PodToCreate{slot.pod, PodRole::kActive, slot.index});
    }
  }
  for (const StandbyStatus& sb : plan_.status.standbys) {
    if (!sb.observed && Pod(sb.pod) == nullptr) {
      plan_.create_pods.push_back(PodToCreate{sb.pod, PodRole::kStandby, -1});
    }
  }
}

void Decider::ReplenishStandbys() {
  JobStatus& st = plan_.status;
  if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) return;
  while (static_cast<int>(st.standbys.size()) < st.standby_desired) {
    StandbyStatus sb{StandbyPodName(job_.metadata.name, st.next_pod_serial++), "", false};
    st.standbys.push_back(sb);
    plan_.create_pods.push_back(PodToCreate{sb.pod, PodRole::kStandby, -1});
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
  std::set<std::string> wanted;
  for (const SlotStatus& s : plan_.status.slots) wanted.insert(s.pod);
  for (const StandbyStatus& s : plan_.status.standbys) wanted.insert(s.pod);
  std::set<std::string> already;
  for (const PodToDelete& d : plan_.delete_pods) already.insert(d.name);
  for (const PodObservation& p : obs_.pods) {
    if (!wanted.count(p.name) && !already.count(p.name) && (p.running || p.failed)) {
      plan_.delete_pods.push_back(PodToDelete{p.name, "not part of the job any more"});
    }
  }
}

}  // namespace peregrine::decision_internal
