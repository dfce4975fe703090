#include "tests/testing/status_samples.h"

namespace peregrine::testing {
namespace {

constexpr int64_t kT0 = kSampleT0;
constexpr int64_t kSecond = kSampleSecond;

}  // namespace

CodeVersionSpec SampleCode(const std::string& revision) {
  CodeVersionSpec c;
  c.image = "registry.example/llm-train:" + revision;
  c.command = {"torchrun", "train.py", "--lr", "3e-4"};
  c.revision = revision;
  c.env = {{"NCCL_DEBUG", "WARN"}, {"OMP_NUM_THREADS", "8"}};
  return c;
}

// The status JSON writes every one of these fields; status_crd_test.cc checks that the CRD
// declares each.
JobStatus PopulatedStatus() {
  JobStatus s;
  s.phase = JobPhase::kRecovering;
  s.observed_generation = 4;
  s.conditions = {
      {"Valid", ConditionStatus::kTrue, "SpecValid", "the spec is valid", 4, kT0},
      {"Ready", ConditionStatus::kFalse, "Recovering", "phase Recovering, attempt 3, step 1200", 4, kT0 + 600 * kSecond},
      {"Degraded", ConditionStatus::kTrue, "MachineFault", "incident 2: Xid 79 on node-7", 4, kT0 + 600 * kSecond},
      {"StandbyReady", ConditionStatus::kFalse, "PoolFilling", "0 of 1 standbys ready", 4, kT0 + 601 * kSecond},
  };
  s.attempt = 3;
  s.resume_step = 1150;
  s.attempt_started_at = kT0 + 602 * kSecond;
  s.master_addr = "llm-0.llm-rdzv.team-a.svc";
  s.master_port = 29500;
  s.code = SampleCode("v2");
  s.version_history = {{SampleCode("v1"), kT0, "Created", VersionOutcome::kHealthy, 0},
                       {SampleCode("v2"), kT0 + 300 * kSecond, "HotUpdate", VersionOutcome::kRunning, 900}};
  s.slots = {{0, "llm-p0", "node-1", true}, {1, "llm-p5", "node-9", true}};
  s.standbys = {{"llm-p6", "", false}};
  s.standby_desired = 1;
  s.standby_ready = 0;
  s.last_completed_step = 1200;
  s.max_completed_step = 1203;
  s.mean_iteration_seconds = 1.75;
  s.started_at = kT0;
  s.finished_at = 0;
  s.training_time_lost_seconds = 84.5;
  s.ettr = 0.93;
  Incident closed;
  closed.id = 1;
  closed.kind = IncidentKind::kProcessCrash;
  closed.signal = "rank 3 exited with code 1";
  closed.detected_at = kT0 + 100 * kSecond;
  closed.decided_at = kT0 + 101 * kSecond;
  closed.resumed_at = kT0 + 130 * kSecond;
  closed.machines = {"node-2"};
  closed.decision = "reattempt";
  closed.actions = {"RestartInPlace"};
  closed.step_at_failure = 400;
  closed.resume_step = 350;
  closed.steps_redone = 50;
  closed.training_time_lost_seconds = 42;
  Incident open;
  open.id = 2;
  open.kind = IncidentKind::kMachineFault;
  open.signal = "Xid 79 on node-7";
  open.detected_at = kT0 + 600 * kSecond;
  open.decided_at = kT0 + 601 * kSecond;
  open.machines = {"node-7"};
  open.decision = "evict+standby";
  open.actions = {"Evict", "ActivateStandby", "RestartInPlace"};
  open.step_at_failure = 1203;
  open.resume_step = 1150;
  open.steps_redone = 53;
  open.training_time_lost_seconds = 42.5;
  DiagnosisStageRecord stage;
  stage.stage = StopTimeStage::kAllGather;
  stage.started_at = kT0 + 602 * kSecond;
  stage.finished_at = kT0 + 603 * kSecond;
  stage.verdict = StageVerdict::kFailed;
  stage.failed_machines = {"node-7"};
  stage.results = {"round 0: node-7: FAILED: contributions arrived wrong [algbw_gbps=1.2]"};
  stage.note = "majority digest ab12";
  open.diagnosis = {stage};
  s.incidents = {closed, open};
  s.checkpoint.last_complete_step = 1150;
  s.checkpoint.last_persisted_step = 1000;
  s.checkpoint.placement = {{0, {1}}, {1, {0}}};
  s.checkpoint.degraded_reason = "no peer outside slot 0's parallel groups: placed on the one sharing the fewest";
  s.checkpoint.failed_steps = {1200};
  s.checkpoint.events = {{kT0 + 600 * kSecond, "llm-p5", CheckpointEventKind::kRestoreFailed, 1200, 3,
                          "step 1200 of rank 3: no holder has it"}};
  s.checkpoint.events_seen = {{"llm-p5", kT0 + 600 * kSecond}};
  s.evicted = {{"node-7", "llm-p1", "Xid 79", kT0 + 601 * kSecond}};
  s.next_incident_id = 3;
  s.next_pod_serial = 7;
  s.recoveries = 2;
  s.reattempts = 1;
  s.triage_deadline = kT0 + 605 * kSecond;
  FailSlowFinding f;
  f.id = 1;
  f.state = FailSlowState::kLocalized;
  f.kind = FailSlowKind::kCommunication;
  f.ranks = {8, 9, 10, 11};
  f.group = "dp 1";
  f.machines = {"node-3"};
  f.severity = 0.6;
  f.tier = FailSlowTier::kMitigate;
  f.healthy_iteration_seconds = 1.7;
  f.slow_iteration_seconds = 2.72;
  f.onset = kT0 + 200 * kSecond;
  f.detected_at = kT0 + 210 * kSecond;
  f.localized_at = kT0 + 230 * kSecond;
  f.ended_at = kT0 + 290 * kSecond;
  f.detail = "dp 1 allreduce 1.6x slower than dp 0";
  f.validation.state = ValidationState::kDone;
  f.validation.pass = 2;
  f.validation.verdict = ValidationVerdict::kConfirmed;
  f.validation.started_at = kT0 + 231 * kSecond;
  f.validation.phase_started_at = kT0 + 233 * kSecond;
  f.validation.ended_at = kT0 + 234 * kSecond;
  f.validation.machines = {"node-2", "node-3"};
  f.validation.link_kinds = "dp";
  f.validation.master_addr = "llm-p0.llm";
  f.validation.master_port = 29600;
  f.validation.slow_gpus = {9};
  f.validation.slow_links = {"dp 8->10"};
  f.validation.detail = "dp links (16), median 9.8 GB/s: slow 8->10 1.1 GB/s = 8.9x the median time";
  s.fail_slows = {f};
  s.next_fail_slow_id = 2;
  s.network_alarms = {{"node-4", kT0 + 500 * kSecond, "eth0 link down"}};
  s.pending_code = SampleCode("v3");
  s.pending_code_since = kT0 + 550 * kSecond;
  s.rollbacks = 1;
  s.loss_reference.losses = {2.5, 2.25};
  s.loss_reference.grad_norms = {1.5, 1.25};
  s.loss_reference.step = 1203;
  StopTimeDiagnosis d;
  d.incident_id = 2;
  d.numeric = true;
  d.stage = StopTimeStage::kReplay;
  d.round = 1;
  d.stage_started_at = kT0 + 604 * kSecond;
  d.port_base = 41000;
  d.outcomes = {{"0/0", "ab12"}, {"0/1", "failed"}};
  s.diagnosis = d;
  StackDiagnosisStatus& stack = s.stack_diagnosis;
  stack.progress_attempt = 3;
  stack.progress_step = 1200;
  stack.progress_at = kT0;
  stack.healthy_iteration_seconds = 0.42;
  stack.degraded_since = kT0 + kSecond;
  stack.next_id = 3;
  StackInvestigation hang;
  hang.id = 1;
  hang.kind = InvestigationKind::kHang;
  hang.state = InvestigationState::kEvicted;
  hang.attempt = 2;
  hang.incident_id = 7;
  hang.signal = "the slowest rank completed no step for 61.0 s";
  hang.started_at = kT0 + 2 * kSecond;
  hang.ended_at = kT0 + 5 * kSecond;
  StackRound r;
  r.started_at = kT0 + 2 * kSecond;
  r.finished_at = kT0 + 3 * kSecond;
  r.groups = {"ranks 2,3,6,7 (healthy): poll <- Exchange", "ranks 0,1: ncclRecv", "ranks 4,5: nanosleep"};
  r.suspect_ranks = {0, 1, 4, 5};
  r.unanswered_slots = {};
  r.explanation = "pp 0 covers every suspect machine";
  hang.rounds.push_back(r);
  hang.chosen_group = "pp 0";
  hang.slots = {0, 2};
  hang.machines = {"node-a", "node-c"};
  hang.explanation = "pp 0";
  stack.investigations.push_back(hang);
  StackInvestigation mfu;
  mfu.id = 2;
  mfu.kind = InvestigationKind::kMfuDrop;
  mfu.state = InvestigationState::kWaiting;
  mfu.attempt = 3;
  mfu.signal = "iteration time 0.600 s is 2.4 x the healthy 0.250 s";
  mfu.started_at = kT0 + 10 * kSecond;
  mfu.rounds_planned = 5;
  mfu.next_round_at = kT0 + 20 * kSecond;
  StackRound m;
  m.started_at = kT0 + 10 * kSecond;
  m.finished_at = kT0 + 11 * kSecond;
  m.groups = {"ranks 0,1,4,5,6,7 (healthy): poll", "ranks 2,3: sgemm"};
  m.suspect_ranks = {2, 3};
  m.unanswered_slots = {3};
  m.flagged_kind = "tp";
  m.flagged_index = 1;
  m.explanation = "tp 1";
  mfu.rounds.push_back(m);
  mfu.rounds.push_back(StackRound{});  // capturing: finished_at unset, flaggedIndex -1
  mfu.rounds.back().started_at = kT0 + 20 * kSecond;
  stack.investigations.push_back(mfu);
  return s;
}

}  // namespace peregrine::testing
