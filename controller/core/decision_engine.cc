#include "controller/core/decision_engine.h"
#include "controller/core/pod_health.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/checkpoint_policy.h"
#include "controller/core/agent_reach.h"
#include "controller/core/conditions.h"
#include "controller/core/hang_policy.h"
#include "controller/core/internal/decider.h"
#include "controller/core/loss_monitor.h"
#include "controller/core/recovery_policy.h"
#include "controller/core/standby_pool_size.h"
#include "controller/core/stop_time_diagnosis.h"

// What the decision engine does on each kind of trouble (docs/architecture.md has the
// user-facing account):
//   - start: one pod per machine slot plus the warm-standby pool (binomial quantile);
//     when every slot's agent has registered, attempt 1 starts;
//   - machine-attributed fault (the pod or its machine is gone): evict that machine,
//     activate a ready standby in its slot, restart the others in place from the last
//     step every rank completed (with in-memory checkpoints: after the newest step
//     complete for the whole job, decide_checkpoint.cc), replenish the pool;
//   - a machine-attributed inspection fault (fatal Xid, GPU lost, ECC / row remap, disk):
//     the same as a lost machine (incident kind MachineFault);
//   - network alarms: tolerated until faultTolerance.networkAlarmsToEvict of them fall on
//     one machine within networkAlarmWindowSeconds, then evict (kind NetworkAlarms);
//   - a training process exited with no machine at fault: reattempt in place; failing
//     again before passing the failure step (maxReattempts), roll back the last code
//     update; a user-code error (Python traceback: TypeError, ...) rolls back at once when
//     an earlier version exists (recovery_policy.h); without one it is reattempted in
//     place once (no diagnosis, never a replay) and, failing again before passing the
//     failure step, the job fails (phase Failed, condition Failed/UserCodeError, the
//     version's outcome Failed);
//   - hot update: spec.codeVersion differs from the running code: urgent (annotation
//     peregrine.dev/hot-update: urgent) restarts in place now, otherwise at the next
//     failure-triggered restart or when hotUpdateWindowHours expire; rollback restores
//     the last version that ran healthy (healthy_version_steps completed steps);
//   - a lost agent stream alone is never acted on (needs the pod to fail too);
//   - every signal opens an incident that waits a short triage window for corroborating
//     signals, so one machine's death and its peers' resulting exits are one incident.
// Agents converge level-based: each pod has a desired role and assignment; an agent that
// runs another attempt gets a command whose id is deterministic (idempotent resends).

namespace peregrine {
namespace decision_internal {

std::string ExitText(const RankExit& e) {
  return e.signal != 0 ? absl::StrFormat("rank %d killed by signal %d", e.global_rank, e.signal)
                       : absl::StrFormat("rank %d exited with code %d", e.global_rank, e.exit_code);
}

JobPlan Decider::Run() {
  JobStatus& st = plan_.status;
  InitializeOnce();
  st.observed_generation = job_.metadata.generation;
  SetCondition(st, "Valid", true, "SpecValid", "the spec is valid", job_.metadata.generation, now_);
  ObserveMachines();
  ObserveCheckpoints();
  if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) {
    TearDownStandbys();
    DeleteOrphans();
    FillDesiredAgents();
    UpdateConditions();
    return std::move(plan_);
  }
  if (DecideSuspension()) {
    FillDesiredAgents();
    UpdateConditions();
    return std::move(plan_);
  }
  SizeStandbyPool();
  ReplaceFailedStandbys();
  RecreateLostPendingSlots();
  EnsurePods();
  // Pending: the first attempt, or the next one after a suspension, waits for every slot.
  if (st.attempt == 0 || st.phase == JobPhase::kPending) {
    MaybeStartFirstAttempt();
  } else {
    TrackProgress();
    if (HandleRestoreFailure()) {
      // restarted from an older checkpoint, or failed: nothing else to triage this round
    } else if (st.diagnosis) {
      AdvanceDiagnosis();
    } else {
      DetectAndTriage();
    }
  }
  if (st.attempt > 0 && st.triage_deadline == 0 && !st.diagnosis && st.phase != JobPhase::kFailed &&
      st.phase != JobPhase::kPending) {
    HotUpdate();
    RecreateStaleSlots();  // a version with another image runs on new pods (decide_images.cc)
    ConvergeAgents();
    DetectSuccess();
  }
  ReplaceStaleStandbys();
  ReplenishStandbys();
  if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) TearDownStandbys();
  DeleteOrphans();
  FillDesiredAgents();
  UpdateEttr();
  UpdateConditions();
  return std::move(plan_);
}

const AgentObservation* Decider::Agent(const std::string& pod) const {
  auto it = agents_.find(pod);
  return it == agents_.end() ? nullptr : it->second;
}

const PodObservation* Decider::Pod(const std::string& pod) const {
  auto it = pods_.find(pod);
  return it == pods_.end() ? nullptr : it->second;
}

bool Decider::PodLost(const std::string& pod, bool observed, std::string* reason) const {
  const PodObservation* p = Pod(pod);
  if (p == nullptr) {
    if (!observed) return false;  // not created yet, or not visible yet
    *reason = "pod disappeared";
    return true;
  }
  if (p->failed) {
    *reason = p->reason.empty() ? "pod failed" : p->reason;
    return true;
  }
  return false;
}

Incident* Decider::OpenIncident() {
  JobStatus& st = plan_.status;
  if (st.incidents.empty()) return nullptr;
  Incident& last = st.incidents.back();
  return last.resumed_at == 0 ? &last : nullptr;
}

void Decider::Event(JobEventType type, const std::string& reason, const std::string& message) {
  plan_.events.push_back(JobEvent{type, reason, message});
}

void Decider::InitializeOnce() {
  JobStatus& st = plan_.status;
  if (st.started_at == 0) st.started_at = now_;
  if (st.code.command.empty()) {
    st.code = spec_.code;
    st.version_history.push_back(VersionRecord{spec_.code, now_, "initial version", VersionOutcome::kRunning});
  }
  if (st.slots.empty()) {
    for (int i = 0; i < spec_.machines; ++i) st.slots.push_back(SlotStatus{i, ActivePodName(job_.metadata.name, i), "", false});
  }
}

void Decider::ObserveMachines() {
  JobStatus& st = plan_.status;
  for (SlotStatus& slot : st.slots) {
    if (const PodObservation* p = Pod(slot.pod); p != nullptr && p->running) {
      slot.observed = true;
      if (!p->machine_id.empty()) slot.machine_id = p->machine_id;
    }
  }
  for (StandbyStatus& sb : st.standbys) {
    if (const PodObservation* p = Pod(sb.pod); p != nullptr && p->running) {
      sb.observed = true;
      if (!p->machine_id.empty()) sb.machine_id = p->machine_id;
    }
  }
}

void Decider::DetectSuccess() {
  JobStatus& st = plan_.status;
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    if (a == nullptr || a->attempt != st.attempt || a->phase != AgentTrainingPhase::kSucceeded) return;
  }
  st.phase = JobPhase::kSucceeded;
  st.finished_at = now_;
  st.last_completed_step = std::max(st.last_completed_step, st.max_completed_step);
  Event(JobEventType::kNormal, "Succeeded", absl::StrFormat("training finished at step %d after %d recoveries",
                                               st.last_completed_step, st.recoveries));
}

void Decider::FillDesiredAgents() {
  plan_.desired_agents = DesiredAgents(spec_, plan_.status);
  // Every evicted machine goes to node health management once; the status remembers which
  // ones are still to do, so a controller restart after a failed quarantine retries it.
  std::set<std::string> asked;
  for (const Eviction& e : plan_.status.evicted) {
    if (e.quarantined || !e.machine_fault || e.machine_id.empty() || !asked.insert(e.machine_id).second) continue;
    plan_.quarantine.push_back(QuarantineRequest{e.machine_id, e.reason, e.incident_id});
  }
}

void Decider::UpdateEttr() {
  JobStatus& st = plan_.status;
  const int64_t end = st.finished_at != 0 ? st.finished_at : now_;
  const double elapsed = static_cast<double>(end - st.started_at) / kNanosPerSecond;
  double lost = st.training_time_lost_seconds;
  if (Incident* open = OpenIncident(); open != nullptr) lost += static_cast<double>(now_ - open->detected_at) / kNanosPerSecond;
  st.ettr = elapsed > 0 ? std::clamp(1.0 - lost / elapsed, 0.0, 1.0) : 1.0;
  // No step was ever trained and something went wrong (or the job ended): nothing of the
  // time was effective training.
  const bool never_trained = st.max_completed_step == 0 && st.last_completed_step == 0;
  if (never_trained && (st.phase == JobPhase::kFailed || !st.incidents.empty())) st.ettr = 0;
}

void Decider::UpdateConditions() {
  JobStatus& st = plan_.status;
  const int64_t gen = job_.metadata.generation;
  const bool running = st.phase == JobPhase::kRunning;
  SetCondition(st, "Ready", running, running ? "Training" : JobPhaseName(st.phase),
               absl::StrFormat("phase %s, attempt %d, step %d", JobPhaseName(st.phase), st.attempt, st.last_completed_step),
               gen, now_);
  const Incident* open = OpenIncident();
  SetCondition(st, "Degraded", open != nullptr, open ? ToString(open->kind) : "NoIncident",
               open ? absl::StrCat("incident ", open->id, ": ", open->signal) : "no open incident", gen, now_);
  const bool terminal = st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed;
  SetCondition(st, "StandbyReady", terminal || st.standby_ready >= st.standby_desired,
               terminal ? "JobFinished" : (st.standby_ready >= st.standby_desired ? "PoolReady" : "PoolFilling"),
               absl::StrFormat("%d of %d standbys ready", st.standby_ready, st.standby_desired), gen, now_);
  UpdatePodsStuckCondition(obs_.pods, gen, now_, st);
  UpdateSuspendedCondition();
  // Agents silent on running pods of Ready nodes (agent_reach.h): shown in every phase,
  // never a reason to evict.
  std::vector<UnreachableAgent> unreachable;
  const int64_t heartbeat_timeout =
      static_cast<int64_t>(spec_.fault_tolerance.heartbeat_timeout_seconds) * kNanosPerSecond;
  for (const SlotStatus& slot : st.slots) {
    if (terminal) break;
    const AgentReachJudgement j = JudgeAgentReach(Pod(slot.pod), Agent(slot.pod), heartbeat_timeout, now_);
    if (j.reach == AgentReach::kUnreachable) unreachable.push_back(UnreachableAgent{slot.pod, slot.machine_id, j.reason});
  }
  for (JobEvent& e : UpdateAgentUnreachableCondition(unreachable, gen, now_, st)) plan_.events.push_back(std::move(e));
}

}  // namespace decision_internal



const char* JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kPending: return "Pending";
    case JobPhase::kRunning: return "Running";
    case JobPhase::kRecovering: return "Recovering";
    case JobPhase::kSucceeded: return "Succeeded";
    case JobPhase::kFailed: return "Failed";
    case JobPhase::kSuspended: return "Suspended";
  }
  return "Unknown";
}

const char* CommandKindName(CommandKind kind) {
  switch (kind) {
    case CommandKind::kRestartInPlace: return "restart_in_place";
    case CommandKind::kActivate: return "activate";
    case CommandKind::kStop: return "stop";
    case CommandKind::kSetNcclMode: return "set_nccl_mode";
    case CommandKind::kPause: return "pause";
    case CommandKind::kResume: return "resume";
    case CommandKind::kCaptureStacks: return "capture_stacks";
    case CommandKind::kRunDiagnostic: return "run_diagnostic";
    case CommandKind::kSetMicroBatchPlan: return "set_microbatch_plan";
  }
  return "unknown";
}

std::string ActivePodName(const std::string& job, int slot) { return absl::StrCat(job, "-m", slot); }
std::string StandbyPodName(const std::string& job, uint64_t serial) { return absl::StrCat(job, "-s", serial); }

JobPlan DecideJob(const TrainingJob& job, const JobStatus& status, const JobObservation& obs, int64_t now,
                  const DecisionConfig& config) {
  // The observation is copied only when a stuck standby is to be marked failed in it.
  std::optional<JobObservation> adjusted;
  if (AnyStuckStandby(status, now, config.standby_pending_timeout_ns, obs.pods)) {
    adjusted = obs;
    FailStuckStandbys(status, now, config.standby_pending_timeout_ns, adjusted->pods);
  }
  const JobObservation& observed = adjusted ? *adjusted : obs;
  JobPlan plan = decision_internal::Decider(job, status, observed, now, config).Run();
  ApplyFailSlowPolicy(job, obs, now, &plan, config.failslow, config.failslow_validation);
  return plan;
}

namespace {

AssignmentSpec AssignmentWithPlan(const JobStatus& st, int slot, CheckpointPlanSpec checkpoint) {
  AssignmentSpec a;
  a.slot = slot;
  // Waiting for the machines (first start, resume) or suspended: the agents stay idle.
  a.attempt = st.phase == JobPhase::kPending || st.phase == JobPhase::kSuspended ? 0 : st.attempt;
  a.resume_step = st.resume_step;
  a.master_addr = st.master_addr;
  a.master_port = st.master_port;
  a.code = st.code;
  a.checkpoint = std::move(checkpoint);
  return a;
}

}  // namespace

AssignmentSpec DesiredAssignment(const TrainingJobSpec& spec, const JobStatus& st, int slot) {
  return AssignmentWithPlan(st, slot, CheckpointPlanFor(spec, st, slot));
}

std::map<int, AssignmentSpec> DesiredAssignments(const TrainingJobSpec& spec, const JobStatus& st) {
  std::map<int, CheckpointPlanSpec> plans = CheckpointPlansBySlot(spec, st);
  std::map<int, AssignmentSpec> out;
  for (const SlotStatus& slot : st.slots) {
    auto plan = plans.find(slot.index);
    out[slot.index] = AssignmentWithPlan(st, slot.index, plan == plans.end() ? CheckpointPlanFor(spec, st, slot.index)
                                                                             : std::move(plan->second));
  }
  return out;
}

std::map<std::string, DesiredAgent> DesiredAgents(const TrainingJobSpec& spec, const JobStatus& st) {
  std::map<std::string, DesiredAgent> desired;
  std::map<int, AssignmentSpec> assignments = DesiredAssignments(spec, st);
  // Each slot's assignment is moved into place when no other slot has its index (as the
  // engine numbers them: slot i at position i), else copied.
  bool unique = true;
  for (size_t i = 0; i < st.slots.size() && unique; ++i) unique = st.slots[i].index == static_cast<int>(i);
  for (const SlotStatus& slot : st.slots) {
    AssignmentSpec& a = assignments[slot.index];
    if (unique) {
      desired[slot.pod] = DesiredAgent{false, std::move(a)};
    } else {
      desired[slot.pod] = DesiredAgent{false, a};
    }
  }
  for (const StandbyStatus& sb : st.standbys) desired[sb.pod] = DesiredAgent{true, {}};
  return desired;
}

}  // namespace peregrine
