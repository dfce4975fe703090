// The decision engine: one pure function from (job, persisted status, observations, now)
// to a plan. It owns the job's lifecycle and recovery policy (docs/architecture.md, "What
// happens on each kind of trouble").
//
// DecideJob returns a JobPlan (the new status, pods to create or delete, commands, events,
// machines to quarantine, when to look again); it is deterministic and has no error path:
// problems of the job are reported in the status. Deciding again on the applied result
// yields no actions. DesiredAgents / DesiredAssignment give the level every pod's agent
// converges to; pod names and command ids are deterministic, so resends are idempotent.
// What the engine does on each kind of trouble is summarised in decision_engine.cc.
//
// No clocks, I/O or randomness. Thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_DECISION_ENGINE_H_
#define PEREGRINE_CONTROLLER_CORE_DECISION_ENGINE_H_

#include <cstdint>
#include <map>
#include <string>

#include "controller/core/failslow_policy.h"
#include "controller/core/failslow_validation.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

struct DecisionConfig {
  int64_t triage_window_ns = 1'000'000'000;    // gather corroborating signals for this long
  size_t max_incidents = 50;
  size_t max_evictions = 100;
  size_t max_network_alarms = 100;
  size_t max_versions = 20;
  uint64_t healthy_version_steps = 5;  // a version that completed this many steps ran healthy
  // A standby that cannot start for this long counts as failed and is replaced (pod_health.h).
  int64_t standby_pending_timeout_ns = 600'000'000'000;
  // A suspended job that persists checkpoints keeps training at most this long for a newer
  // step to be persisted before its pods are deleted (decide_suspend.cc).
  int64_t suspend_save_timeout_ns = 600'000'000'000;
  FailSlowPolicyOptions failslow;                  // detection, profiling, localization
  FailSlowValidationOptions failslow_validation;  // pause, GEMM and link rounds
};

// Deterministic pod names.
std::string ActivePodName(const std::string& job, int slot);
std::string StandbyPodName(const std::string& job, uint64_t serial);

// The one decision entry point: the job's lifecycle and recovery (failures, diagnosis,
// standbys, code versions, convergence), then the fail-slow policy (failslow_policy.h) on
// the new status. Deterministic: the same inputs give the same plan.
JobPlan DecideJob(const TrainingJob& job, const JobStatus& status, const JobObservation& obs, int64_t now,
                  const DecisionConfig& config = {});

// The assignment the agent of `slot` must converge to under `status` (attempt, resume
// step, rendezvous, code version, checkpoint plan).
AssignmentSpec DesiredAssignment(const TrainingJobSpec& spec, const JobStatus& status, int slot);
// Every slot's DesiredAssignment, by slot, in one pass over the checkpoint placement.
std::map<int, AssignmentSpec> DesiredAssignments(const TrainingJobSpec& spec, const JobStatus& status);
// What every pod's agent must converge to: the slots' assignments, standbys idle.
std::map<std::string, DesiredAgent> DesiredAgents(const TrainingJobSpec& spec, const JobStatus& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_DECISION_ENGINE_H_
