// The decision engine: one pure function from (job, persisted status, observations, now)
// to a plan. It owns the job's lifecycle and recovery policy (docs/architecture.md; "What happens on
// each kind of trouble"):
//   - start: one pod per machine slot plus the warm-standby pool (binomial quantile);
//     when every slot's agent has registered, attempt 1 starts;
//   - machine-attributed fault (the pod or its machine is gone): evict that machine,
//     activate a ready standby in its slot, restart the others in place from the last
//     step every rank completed, replenish the pool;
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
//
// No clocks, I/O or randomness: deciding again on the applied result yields no actions.
// Thread-compatible.
#ifndef PEREGRINE_CONTROLLER_CORE_DECISION_ENGINE_H_
#define PEREGRINE_CONTROLLER_CORE_DECISION_ENGINE_H_

#include <cstdint>
#include <string>

#include "controller/core/failslow_policy.h"
#include "controller/core/failslow_validation.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

struct DecisionConfig {
  int64_t triage_window_ns = 1'000'000'000;    // gather corroborating signals for this long
  int64_t start_timeout_ns = 120'000'000'000;  // a started attempt that makes no step in this long fails
  size_t max_incidents = 50;
  size_t max_evictions = 100;
  size_t max_network_alarms = 100;
  size_t max_versions = 20;
  uint64_t healthy_version_steps = 5;  // a version that completed this many steps ran healthy
  // A standby that cannot start for this long counts as failed and is replaced (pod_health.h).
  int64_t standby_pending_timeout_ns = 600'000'000'000;
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
// step, rendezvous, code version).
AssignmentSpec DesiredAssignment(const JobStatus& status, int slot);
// What every pod's agent must converge to: the slots' assignments, standbys idle.
std::map<std::string, DesiredAgent> DesiredAgents(const JobStatus& status);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_DECISION_ENGINE_H_
