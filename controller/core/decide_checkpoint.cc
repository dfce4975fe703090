// DecideJob, in-memory checkpoints: the placement, the complete and persisted steps from
// the agents' store reports, their store events as job events, the resume point of a new
// attempt and the fallback when a restore fails (checkpoint_policy.h has the pure parts).
#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/core/checkpoint_policy.h"
#include "controller/core/conditions.h"
#include "controller/core/internal/decider.h"

namespace peregrine::decision_internal {
namespace {

constexpr size_t kMaxCheckpointEvents = 32;
constexpr size_t kMaxFailedSteps = 16;

bool IsWarning(CheckpointEventKind kind) { return kind != CheckpointEventKind::kRestored; }

}  // namespace

std::vector<const CheckpointReportObservation*> Decider::SlotReports() const {
  std::vector<const CheckpointReportObservation*> reports;
  for (const SlotStatus& slot : plan_.status.slots) {
    const AgentObservation* a = Agent(slot.pod);
    reports.push_back(a != nullptr && a->checkpoint ? &*a->checkpoint : nullptr);
  }
  return reports;
}

void Decider::ObserveCheckpoints() {
  JobStatus& st = plan_.status;
  CheckpointStatus& cp = st.checkpoint;
  if (!spec_.checkpoint.enabled()) return;
  SlotPlacement placement = PlaceCheckpointBackups(spec_);
  if (placement.slots != cp.placement || placement.degraded_reason != cp.degraded_reason) {
    cp.placement = std::move(placement.slots);
    cp.degraded_reason = std::move(placement.degraded_reason);
    if (!cp.degraded_reason.empty()) Event(JobEventType::kWarning, "CheckpointPlacementDegraded", cp.degraded_reason);
  }
  const std::vector<const CheckpointReportObservation*> reports = SlotReports();
  if (std::optional<uint64_t> complete = CompleteStep(reports, spec_.checkpoint.backup_copies, cp.failed_steps)) {
    cp.last_complete_step = std::max(cp.last_complete_step, *complete);
  }
  if (std::optional<uint64_t> persisted = PersistedStep(reports)) {
    cp.last_persisted_step = std::max(cp.last_persisted_step, *persisted);
  }
  // The store's events, once each (per pod, newer than the newest already seen).
  std::map<std::string, int64_t> seen;
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    int64_t& mark = seen[slot.pod];
    if (auto it = cp.events_seen.find(slot.pod); it != cp.events_seen.end()) mark = it->second;
    if (a == nullptr) continue;
    for (const CheckpointEventObservation& e : a->checkpoint_events) {
      if (e.at <= mark) continue;
      mark = e.at;
      cp.events.push_back(CheckpointEventRecord{e.at, slot.pod, e.kind, e.step, e.global_rank, e.detail});
      const std::string who = e.global_rank >= 0 ? absl::StrFormat("rank %d", e.global_rank) : "every rank";
      Event(IsWarning(e.kind) ? JobEventType::kWarning : JobEventType::kNormal, absl::StrCat("Checkpoint", ToString(e.kind)),
            absl::StrFormat("pod %s (slot %d), %s, step %d: %s", slot.pod, slot.index, who, e.step, e.detail));
    }
  }
  cp.events_seen = std::move(seen);
  TrimFront(cp.events, kMaxCheckpointEvents);
}

uint64_t Decider::NewestRestorableStep() const {
  // Own copies count only from agents that are still there (a lost machine's memory is
  // gone); copies held for a slot count from any connected agent, standbys included.
  std::vector<const CheckpointReportObservation*> slots, holders;
  for (const SlotStatus& slot : plan_.status.slots) {
    const AgentObservation* a = Agent(slot.pod);
    slots.push_back(a != nullptr && a->connected && a->checkpoint ? &*a->checkpoint : nullptr);
  }
  for (const AgentObservation& a : obs_.agents) {
    if (a.connected && a.checkpoint) holders.push_back(&*a.checkpoint);
  }
  const std::optional<RestoreFallback> newest =
      FallbackStep(slots, holders, std::numeric_limits<uint64_t>::max(), plan_.status.checkpoint.failed_steps,
                   /*persisted_step=*/0, spec_.checkpoint.persist_path);
  return newest ? newest->step : 0;
}

void Decider::SetResumePoint(Incident* inc, bool newest_restorable) {
  JobStatus& st = plan_.status;
  if (!spec_.checkpoint.enabled()) {
    st.resume_step = st.last_completed_step;
    return;
  }
  // Training goes back to the newest complete checkpoint: progress of this attempt
  // starts there, whatever was printed before. The committed step (every slot stored and
  // backed up) lags what the stores hold by a report or two, and a fast trainer's store
  // may already have pruned it: a step every slot can restore right now (own copies of
  // the machines that stay, held copies of the lost ones) is at least as good and newer.
  if (inc != nullptr && FallBackFromBadRestore(inc)) {
    newest_restorable = false;
  }
  st.resume_step = st.checkpoint.last_complete_step;
  if (newest_restorable) st.resume_step = std::max(st.resume_step, NewestRestorableStep());
  // A code version applied in this decision (hot update, rollback) runs from here.
  if (!st.version_history.empty() && st.version_history.back().applied_at == now_) {
    st.version_history.back().applied_at_step = st.resume_step;
  }
  st.last_completed_step = st.resume_step;
  st.max_completed_step = st.resume_step;
  if (inc != nullptr) {
    inc->resume_step = st.resume_step;
    inc->steps_redone = inc->step_at_failure - std::min(inc->step_at_failure, st.resume_step);
  }
}

bool Decider::FallBackFromBadRestore(Incident* inc) {
  JobStatus& st = plan_.status;
  CheckpointStatus& cp = st.checkpoint;
  const uint64_t restored = st.resume_step;  // what the failed attempt restored
  if (!IsNumeric(inc->kind) || restored == 0 || cp.last_complete_step > restored ||
      inc->step_at_failure > restored + static_cast<uint64_t>(spec_.checkpoint.interval_steps)) {
    return false;
  }
  cp.failed_steps.push_back(restored);
  TrimFront(cp.failed_steps, kMaxFailedSteps);
  std::vector<const CheckpointReportObservation*> holders;
  for (const AgentObservation& a : obs_.agents) {
    if (a.connected && a.checkpoint) holders.push_back(&*a.checkpoint);
  }
  const std::optional<RestoreFallback> fallback = FallbackStep(
      SlotReports(), holders, restored, cp.failed_steps, cp.last_persisted_step, spec_.checkpoint.persist_path);
  cp.last_complete_step = fallback ? fallback->step : 0;
  const std::string where =
      fallback ? absl::StrFormat("%s step %d, %s", fallback->persisted ? "the persisted" : "the older in-memory",
                                 fallback->step, fallback->why)
               : std::string("scratch (no older checkpoint is left)");
  inc->actions.push_back(absl::StrFormat(
      "the state restored from checkpoint step %d went bad at once (%s at step %d): resume from %s", restored,
      ToString(inc->kind), inc->step_at_failure, where));
  Event(JobEventType::kWarning, "CheckpointRestoreFallback", inc->actions.back());
  return true;
}

bool Decider::HandleRestoreFailure() {
  JobStatus& st = plan_.status;
  CheckpointStatus& cp = st.checkpoint;
  if (!spec_.checkpoint.enabled() || st.resume_step == 0) return false;
  if (std::find(cp.failed_steps.begin(), cp.failed_steps.end(), st.resume_step) != cp.failed_steps.end()) return false;
  const CheckpointEventObservation* failed = nullptr;
  const SlotStatus* failed_slot = nullptr;
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    if (a == nullptr) continue;
    for (const CheckpointEventObservation& e : a->checkpoint_events) {
      if (e.kind == CheckpointEventKind::kRestoreFailed && e.step == st.resume_step && failed == nullptr) {
        failed = &e;
        failed_slot = &slot;
      }
    }
  }
  if (failed == nullptr) return false;
  const uint64_t step = st.resume_step;
  cp.failed_steps.push_back(step);
  TrimFront(cp.failed_steps, kMaxFailedSteps);
  const std::string why = absl::StrFormat("rank %d (pod %s, slot %d) could not restore checkpoint step %d: %s",
                                          failed->global_rank, failed_slot->pod, failed_slot->index, step,
                                          failed->detail);
  Incident* inc = OpenIncident();
  if (inc == nullptr) {
    Incident opened;
    opened.id = st.next_incident_id++;
    opened.kind = IncidentKind::kProcessCrash;
    opened.signal = why;
    opened.detected_at = now_;
    opened.step_at_failure = st.max_completed_step;
    st.incidents.push_back(opened);
    TrimFront(st.incidents, config_.max_incidents);
    inc = &st.incidents.back();
  }
  inc->decided_at = now_;
  std::vector<const CheckpointReportObservation*> holders;
  for (const AgentObservation& a : obs_.agents) {
    if (a.checkpoint) holders.push_back(&*a.checkpoint);
  }
  // Slots whose restore met a corrupt shard of the step: their holders' copies are suspect.
  std::set<int> corrupt_copy_slots;
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    if (a == nullptr) continue;
    for (const CheckpointEventObservation& e : a->checkpoint_events) {
      if (e.kind == CheckpointEventKind::kCorruptShard && e.step == step) corrupt_copy_slots.insert(slot.index);
    }
  }
  const std::optional<RestoreFallback> fallback =
      FallbackStep(SlotReports(), holders, step, cp.failed_steps, cp.last_persisted_step,
                   spec_.checkpoint.persist_path, corrupt_copy_slots);
  if (!fallback) {
    FailJob(inc, "CheckpointRestoreFailed",
            absl::StrCat(why, "; no older complete checkpoint is left in memory or persisted"));
    return true;
  }
  cp.last_complete_step = fallback->step;
  inc->actions.push_back(absl::StrFormat("restore fell back from step %d to %s step %d, %s", step,
                                         fallback->persisted ? "the persisted" : "the older in-memory", fallback->step,
                                         fallback->why));
  Event(JobEventType::kWarning, "CheckpointRestoreFallback", absl::StrCat(why, "; ", inc->actions.back()));
  st.phase = JobPhase::kRecovering;
  st.attempt += 1;
  SetResumePoint(inc, /*newest_restorable=*/false);  // the fallback's step, nothing newer
  st.attempt_started_at = now_;
  st.master_addr = MasterAddr();
  st.master_port = obs_.candidate_master_port;
  inc->actions.push_back(absl::StrFormat("restart %d machines in place from step %d (attempt %d)", st.slots.size(),
                                         st.resume_step, st.attempt));
  Event(JobEventType::kNormal, "Restarting", absl::StrCat("incident ", inc->id, ": ", inc->actions.back()));
  return true;
}

}  // namespace peregrine::decision_internal
