// The decision engine: one pure function from (job, persisted status, observations, now)
// to a plan. It owns the job's lifecycle and recovery policy (DESIGN.md "What happens on
// each kind of trouble"):
//   - start: one pod per machine slot plus the warm-standby pool (binomial quantile);
//     when every slot's agent has registered, attempt 1 starts;
//   - machine-attributed fault (the pod or its machine is gone): evict that machine,
//     activate a ready standby in its slot, restart the others in place from the last
//     step every rank completed, replenish the pool;
//   - a training process exited with no machine at fault: reattempt in place;
//   - a lost agent stream alone is never acted on (needs the pod to fail too);
//   - every signal opens an incident that waits a short triage window for corroborating
//     signals, so one machine's death and its peers' resulting exits are one incident.
// Agents converge level-based: each pod has a desired role and assignment; an agent that
// runs another attempt gets a command whose id is deterministic (idempotent resends).
//
// No clocks, I/O or randomness: deciding again on the applied result yields no actions.
// Thread-compatible.
#ifndef PEREGRINE_CONTROLLER_DECISION_ENGINE_H_
#define PEREGRINE_CONTROLLER_DECISION_ENGINE_H_

#include <cstdint>
#include <string>

#include "controller/job_spec.h"
#include "controller/job_state.h"

namespace peregrine {

struct DecisionConfig {
  int64_t triage_window_ns = 1'000'000'000;    // gather corroborating signals for this long
  int64_t start_timeout_ns = 120'000'000'000;  // a started attempt that makes no step in this long fails
  size_t max_incidents = 50;
  size_t max_evictions = 100;
};

// Deterministic pod names.
std::string ActivePodName(const std::string& job, int slot);
std::string StandbyPodName(const std::string& job, uint64_t serial);

JobPlan DecideJob(const TrainingJob& job, const JobStatus& status, const JobObservation& obs, int64_t now,
                  const DecisionConfig& config = {});

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_DECISION_ENGINE_H_
