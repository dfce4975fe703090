// DecideJob, the stop-time diagnosis: advancing its stages and finishing a recovery.
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
#include "controller/core/pod_health.h"
#include "controller/core/recovery_policy.h"
#include "controller/core/standby_pool_size.h"
#include "controller/core/stop_time_diagnosis.h"

namespace peregrine::decision_internal {

// One round of the stop-time diagnosis in progress; on its verdict, evict what failed or
// escalate: reattempt in place -> roll back the last code update -> dual-phase replay.
void Decider::AdvanceDiagnosis() {
  JobStatus& st = plan_.status;
  Incident* inc = nullptr;
  for (Incident& i : st.incidents) {
    if (i.id == st.diagnosis->incident_id) inc = &i;
  }
  if (inc == nullptr) {  // the incident fell out of the bounded history: start over cleanly
    st.diagnosis.reset();
    return;
  }
  // A machine lost meanwhile ends the diagnosis: it is the one to evict. Lost means its pod
  // failed or vanished, an inspection fault, or its node unready with the agent gone or past
  // the grace (pod_health.h JudgeNodeUnready; no progress is expected while stopped). An
  // agent link lost on a running pod of a Ready node is not a loss (its answers are
  // inconclusive, see stop_time_diagnosis.cc). A pod lost for a cause not its machine's
  // (OOMKilled, preempted, deleted by someone else) is replaced without a quarantine.
  const FaultToleranceSpec& ft = spec_.fault_tolerance;
  std::vector<int> lost;
  std::set<std::string> blameless_pods;
  for (SlotStatus& slot : st.slots) {
    std::string reason;
    const AgentObservation* a = Agent(slot.pod);
    std::optional<std::string> fault = a ? MachineAttributedFault(*a) : std::nullopt;
    bool is_lost = PodLost(slot.pod, slot.observed, &reason);
    if (is_lost) {
      const PodObservation* p = Pod(slot.pod);
      if (p == nullptr || p->not_machine_fault) {
        blameless_pods.insert(slot.pod);
        if (p == nullptr) reason = "pod disappeared without Peregrine deleting it";
        absl::StrAppend(&reason, " (not the machine's fault: it is not quarantined)");
      }
    } else if (fault) {
      is_lost = true;
      reason = absl::StrCat("inspection ", *fault);
    } else if (const PodObservation* p = Pod(slot.pod); p != nullptr) {
      NodeUnreadyInput in;
      in.node_unready = p->node_unready;
      in.node_reason = p->reason.empty() ? absl::StrCat("node ", p->machine_id, " not Ready") : p->reason;
      in.agent = a;
      in.training = false;
      in.since = slot.node_unready_since;
      in.since_step = slot.node_unready_step;
      in.progress_at = slot.node_unready_progress_at;
      in.grace_ns = static_cast<int64_t>(ft.node_unreachable_grace_seconds) * kNanosPerSecond;
      in.heartbeat_timeout_ns = static_cast<int64_t>(ft.heartbeat_timeout_seconds) * kNanosPerSecond;
      const NodeUnreadyJudgement j = JudgeNodeUnready(in, now_);
      if (j.verdict == NodeUnreadyVerdict::kTolerate && slot.node_unready_since == 0) {
        Event(JobEventType::kWarning, "NodeUnreachableTolerated",
              absl::StrFormat("machine %s (slot %d, pod %s): %s", slot.machine_id, slot.index, slot.pod, j.reason));
      }
      const bool keep = j.verdict != NodeUnreadyVerdict::kReady;
      slot.node_unready_since = keep ? j.since : 0;
      slot.node_unready_step = keep ? j.step : 0;
      slot.node_unready_progress_at = keep ? j.progress_at : 0;
      if (j.verdict == NodeUnreadyVerdict::kEvict) {
        is_lost = true;
        reason = j.reason;
      }
    }
    if (is_lost) {
      lost.push_back(slot.index);
      inc->signal = absl::StrCat(inc->signal, "; during diagnosis: machine ", slot.machine_id, " ", reason);
    }
  }
  if (!lost.empty()) {
    st.diagnosis.reset();
    inc->kind = IncidentKind::kMachineLost;
    inc->decision = "machine lost during stop-time diagnosis: evict it, activate a warm standby, restart the others in place";
    EvictAndActivate(lost, inc);
    // EvictAndActivate appended one eviction per lost slot (and may have trimmed the oldest).
    for (size_t i = st.evicted.size() - std::min(st.evicted.size(), lost.size()); i < st.evicted.size(); ++i) {
      Eviction& e = st.evicted[i];
      if (!blameless_pods.count(e.pod)) continue;
      e.machine_fault = false;
      inc->actions.push_back(absl::StrFormat("pod %s replaced; machine %s not quarantined (not its fault)", e.pod,
                                             e.machine_id));
    }
    FinishRecovery(inc, false);
    return;
  }
  DiagnosisContext ctx;
  ctx.id_prefix = absl::StrCat(job_.metadata.namespace_, "/", job_.metadata.name, "/incident-", inc->id);
  for (const SlotStatus& slot : st.slots) {
    ctx.machines.push_back(DiagnosisMachine{slot.index, slot.pod, slot.machine_id, PodAddress(slot.pod), Agent(slot.pod)});
  }
  ctx.gpus_per_machine = spec_.gpus_per_machine;
  ctx.parallelism = spec_.parallelism;
  ctx.stop_grace_ms = spec_.fault_tolerance.restart_grace_seconds * 1000;
  ctx.heartbeat_timeout_ns = static_cast<int64_t>(ft.heartbeat_timeout_seconds) * kNanosPerSecond;
  ctx.now = now_;
  const StopTimeStage stage_before = st.diagnosis->stage;
  DiagnosisAdvance step = AdvanceStopTimeDiagnosis(ctx, &*st.diagnosis, &inc->diagnosis);
  for (CommandToSend& c : step.commands) plan_.commands.push_back(std::move(c));
  if (!step.finished) {
    plan_.requeue_after_ns = step.requeue_after_ns;
    if (st.diagnosis->stage != stage_before) {
      Event(JobEventType::kNormal, "DiagnosisStage", absl::StrCat("incident ", inc->id, ": stage ", ToString(st.diagnosis->stage)));
    }
    return;
  }
  const bool was_replay = st.diagnosis->stage == StopTimeStage::kReplay;
  if (!step.failed_slots.empty()) {
    st.diagnosis.reset();
    const DiagnosisStageRecord& r = inc->diagnosis.back();
    inc->decision = absl::StrFormat("stop-time diagnosis: %s failed on %s: evict, activate a warm standby, restart the others in place",
                                    ToString(r.stage), absl::StrJoin(r.failed_machines, ", "));
    if (was_replay) inc->kind = IncidentKind::kSilentDataCorruption;
    EvictAndActivate(step.failed_slots, inc);
    FinishRecovery(inc, false);
    return;
  }
  // Every stage passed: no machine at fault by the diagnostics.
  const std::optional<CodeVersionSpec> target = RollbackTarget(st.version_history);
  const int max_reattempts = spec_.fault_tolerance.max_reattempts;
  if (was_replay) {
    st.diagnosis.reset();
    inc->decision = "stop-time diagnosis and dual-phase replay found no machine: reattempt in place";
    ++st.reattempts;
    FinishRecovery(inc, false);
    return;
  }
  if (st.reattempts < max_reattempts && st.rollbacks == 0) {
    st.diagnosis.reset();
    inc->decision = "stop-time diagnosis passed on every machine: reattempt in place";
    ++st.reattempts;
    FinishRecovery(inc, false);
    return;
  }
  if (target && st.rollbacks == 0) {
    st.diagnosis.reset();
    inc->decision = absl::StrFormat(
        "stop-time diagnosis passed; failed again after %d reattempt(s) without passing the failure step: roll back "
        "the last code update",
        st.reattempts);
    Rollback(*target, inc, "failed again after a reattempt in place");
    st.rollbacks += 1;
    FinishRecovery(inc, true);
    return;
  }
  StartReplayStage(&*st.diagnosis, now_);
  inc->actions.push_back(target ? "failed again after the rollback: dual-phase replay to locate the faulty machine"
                                : "failed again with no earlier version: dual-phase replay to locate the faulty machine");
  Event(JobEventType::kWarning, "DualPhaseReplay", absl::StrCat("incident ", inc->id, ": ", inc->actions.back()));
  AdvanceDiagnosis();
}

// Counts the recovery (or gives up past maxRecoveries), applies a pending lazy update and
// restarts every machine in place.
void Decider::FinishRecovery(Incident* inc, bool rolled_back, bool counted) {
  JobStatus& st = plan_.status;
  inc->decided_at = now_;
  if (counted) ++st.recoveries;
  if (counted && st.recoveries > spec_.fault_tolerance.max_recoveries) {
    st.phase = JobPhase::kFailed;
    st.finished_at = now_;
    inc->actions.push_back(absl::StrFormat("give up: %d recoveries exceed maxRecoveries", st.recoveries));
    SetCondition(st, "Failed", true, "MaxRecoveriesExceeded", inc->actions.back(), job_.metadata.generation, now_);
    Event(JobEventType::kWarning, "Failed", inc->actions.back());
    StopAll();
    return;
  }
  // A pending version with another image needs new pods; it waits while that would lose
  // every in-memory checkpoint (decide_images.cc).
  if (st.pending_code && !rolled_back && ImageSwitchBlocker(*st.pending_code).empty()) {
    const std::string from = st.code.revision;
    ApplyCode(*st.pending_code, "lazy hot update at the failure-triggered restart");
    inc->actions.push_back(absl::StrCat("apply the pending code update (revision ", st.code.revision, ")"));
    Event(JobEventType::kNormal, "HotUpdate",
          absl::StrFormat("code revision %s -> %s at the failure-triggered restart of incident %d (lazy update)",
                          from, st.code.revision, inc->id));
  }
  StartNewAttempt(inc);
}

}  // namespace peregrine::decision_internal
