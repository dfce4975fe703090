// DecideJob, suspension: spec.suspend, or a hold of the cluster's admission
// (JobObservation::hold: Kueue has not admitted the job's Workload, evicted it, or is not
// installed), stops the job keeping its persistent checkpoint and resumes it from there.
//
// The sequence, one decision per round:
//   1. Requested (status.suspension set, requested_at): when the job persists checkpoints
//      (spec.checkpoint.persistEverySteps > 0) and is training with a committed in-memory
//      step newer than the last persisted one, it keeps training until the agents persist
//      a step newer than the one persisted at the request (they write the newest backed-up
//      step every persistEverySteps steps), for at most
//      DecisionConfig::suspend_save_timeout_ns; condition Suspended=False SavingCheckpoint.
//   2. Suspended (suspended_at): an open incident is closed, every pod of the job (active
//      and standby) is deleted, the slots forget their machines and the resume point is
//      set: the last persisted step when the job persists checkpoints, step 0 when it keeps
//      in-memory checkpoints only (they went with the pods), the last step every rank
//      completed when checkpoints are off (the trainer's own saved state, if it has one).
//      Phase Suspended, condition Suspended=True with the reason and where training
//      resumes from; the agents' desired attempt is 0 (idle). A pod that shows up while
//      suspended is deleted.
//   3. Lifted: the pods are recreated (phase Pending); when every slot's agent is up the
//      next attempt starts from the resume point (MaybeStartFirstAttempt), with the
//      desired code version (a change made while suspended costs no extra restart).
// A lift during step 1 cancels the request. Finished jobs are never suspended.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "controller/core/conditions.h"
#include "controller/core/internal/decider.h"

namespace peregrine::decision_internal {
namespace {

bool PersistsCheckpoints(const TrainingJobSpec& spec) {
  return spec.checkpoint.enabled() && spec.checkpoint.persist_every_steps > 0;
}

}  // namespace

std::string Decider::ResumeText() const {
  const JobStatus& st = plan_.status;
  if (PersistsCheckpoints(spec_)) {
    if (st.resume_step == 0) {
      return absl::StrCat("no step was persisted to ", spec_.checkpoint.persist_path,
                          " yet: training resumes from scratch");
    }
    return absl::StrCat("training resumes from step ", st.resume_step, ", persisted in ",
                        spec_.checkpoint.persist_path);
  }
  if (spec_.checkpoint.enabled()) {
    return "no persistent checkpoint storage (spec.checkpoint.persistEverySteps is 0): the in-memory "
           "checkpoints went with the pods and training resumes from scratch";
  }
  return absl::StrCat("in-memory checkpoints are off: training resumes after step ", st.resume_step,
                      " (PEREGRINE_RESUME_STEP) from the trainer's own saved state, or from scratch if it has none");
}

bool Decider::DecideSuspension() {
  JobStatus& st = plan_.status;
  std::string reason, message;
  if (spec_.suspend) {
    reason = "SuspendedBySpec";
    message = "spec.suspend is true";
  } else if (obs_.hold) {
    reason = obs_.hold->reason;
    message = obs_.hold->message;
  }
  if (reason.empty()) {
    if (st.suspension) Resume();
    return false;
  }
  if (!st.suspension) {
    st.suspension = SuspensionStatus{reason, message, now_, st.checkpoint.last_persisted_step, 0};
  }
  SuspensionStatus& s = *st.suspension;
  s.reason = reason;
  if (s.suspended_at == 0) {
    if (SavingBeforeSuspend()) {
      s.message = absl::StrFormat(
          "%s: saving first: training continues until a step newer than %d is persisted to %s (at most %d s)",
          message, s.persisted_before, spec_.checkpoint.persist_path, config_.suspend_save_timeout_ns / kNanosPerSecond);
      return false;
    }
    SuspendNow(reason, message);
  }
  s.message = absl::StrCat(message, "; ", ResumeText());
  // Anything of the job still running or created meanwhile goes (a pod being deleted is
  // not listed).
  for (const PodObservation& p : obs_.pods) {
    const bool asked = std::any_of(plan_.delete_pods.begin(), plan_.delete_pods.end(),
                                   [&](const PodToDelete& d) { return d.name == p.name; });
    if (!asked) plan_.delete_pods.push_back(PodToDelete{p.name, absl::StrCat("job suspended: ", reason)});
  }
  return true;
}

bool Decider::SavingBeforeSuspend() {
  JobStatus& st = plan_.status;
  const SuspensionStatus& s = *st.suspension;
  if (!PersistsCheckpoints(spec_) || st.attempt == 0 || st.phase != JobPhase::kRunning) return false;
  if (st.checkpoint.last_complete_step <= s.persisted_before) return false;  // nothing newer to save
  if (st.checkpoint.last_persisted_step > s.persisted_before) return false;   // saved
  const int64_t deadline = s.requested_at + config_.suspend_save_timeout_ns;
  if (now_ >= deadline) {
    Event(JobEventType::kWarning, "SuspendSaveTimedOut",
          absl::StrFormat("no step newer than %d was persisted to %s within %d s of the suspend request: "
                          "suspending now, steps after it will be trained again",
                          s.persisted_before, spec_.checkpoint.persist_path,
                          config_.suspend_save_timeout_ns / kNanosPerSecond));
    return false;
  }
  if (plan_.requeue_after_ns == 0 || deadline - now_ < plan_.requeue_after_ns) plan_.requeue_after_ns = deadline - now_;
  return true;
}

void Decider::SuspendNow(const std::string& reason, const std::string& message) {
  JobStatus& st = plan_.status;
  if (Incident* inc = OpenIncident(); inc != nullptr) {
    inc->resumed_at = now_;
    if (inc->decided_at == 0) inc->decided_at = now_;
    inc->actions.push_back(absl::StrCat("closed: the job was suspended (", reason, ")"));
  }
  st.triage_deadline = 0;
  st.diagnosis.reset();
  if (spec_.checkpoint.enabled()) {
    st.resume_step = PersistsCheckpoints(spec_) ? st.checkpoint.last_persisted_step : 0;
    st.checkpoint.last_complete_step = std::min(st.checkpoint.last_complete_step, st.resume_step);
    st.last_completed_step = st.resume_step;
    st.max_completed_step = st.resume_step;
  } else {
    st.resume_step = st.last_completed_step;
  }
  for (SlotStatus& slot : st.slots) {
    slot.observed = false;
    slot.machine_id.clear();
    slot.node_unready_since = 0;
    slot.node_unready_step = 0;
    slot.node_unready_progress_at = 0;
  }
  for (const PodObservation& p : obs_.pods) {
    plan_.delete_pods.push_back(PodToDelete{p.name, absl::StrCat("job suspended: ", reason)});
  }
  st.standbys.clear();
  st.standby_ready = 0;
  st.phase = JobPhase::kSuspended;
  st.suspension->suspended_at = now_;
  Event(JobEventType::kNormal, "Suspended",
        absl::StrCat(message, ": every pod of the job is deleted; ", ResumeText()));
}

void Decider::Resume() {
  JobStatus& st = plan_.status;
  const bool was_suspended = st.suspension->suspended_at != 0;
  st.suspension.reset();
  if (!was_suspended) {
    Event(JobEventType::kNormal, "SuspendCancelled", "the suspension was lifted before the pods were deleted");
    return;
  }
  if (!(st.code == spec_.code)) ApplyCode(spec_.code, "applied on resume from suspension");
  st.phase = JobPhase::kPending;
  Event(JobEventType::kNormal, "Resumed",
        absl::StrFormat("the job's pods are recreated; the next attempt starts from step %d when every machine is up",
                        st.resume_step));
}

void Decider::UpdateSuspendedCondition() {
  JobStatus& st = plan_.status;
  if (!st.suspension && FindCondition(st, "Suspended") == nullptr) return;  // never suspended
  const int64_t gen = job_.metadata.generation;
  if (!st.suspension) {
    SetCondition(st, "Suspended", false, "Resumed", "the job is not suspended", gen, now_);
  } else if (st.suspension->suspended_at == 0) {
    SetCondition(st, "Suspended", false, "SavingCheckpoint", st.suspension->message, gen, now_);
  } else {
    SetCondition(st, "Suspended", true, st.suspension->reason, st.suspension->message, gen, now_);
  }
}

}  // namespace peregrine::decision_internal
