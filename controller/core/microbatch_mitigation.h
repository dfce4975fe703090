// MicroBatchMitigation: fail-slow mitigation S2 (micro-batch redistribution across the
// data-parallel replicas) from the agents' observations to the plan and its commands.
//
// MeasureReplicaSpeeds turns the agents' iteration summaries (per rank: iteration time,
// micro-batches run, "mb=") and communication profiles into each replica's time per
// micro-batch; RedistributionAvailability tells the mitigation ladder
// (failslow_mitigation.h) whether S2 can be delivered to the job and what it costs;
// DecideMicroBatchPlan keeps the plan of one finding: solves it (PlanMicroBatches),
// re-solves it when the measured speeds change (at most once per verification window),
// sends it to every active agent (SetMicroBatchPlan, deterministic ids) and withdraws it
// (the empty plan) when the job restarts or the measured speeds no longer justify it.
// What is measured, how, and why, is described in microbatch_mitigation.cc.
//
// Pure: no clocks, no I/O; `now` is an input. Deciding again on the applied record with
// the same observations changes nothing. Thread-safe (no shared state).
#ifndef PEREGRINE_CONTROLLER_CORE_MICROBATCH_MITIGATION_H_
#define PEREGRINE_CONTROLLER_CORE_MICROBATCH_MITIGATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "controller/core/failslow_mitigation.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {

struct MicroBatchMitigationOptions {
  // How long, at most, between a rank completing a step and the plan reaching every
  // agent: the observation's age (one heartbeat, 1 s by default) plus the controller's
  // round and the delivery. from_step is chosen so that no rank has started it by then.
  double delivery_seconds = 2.0;
  // The verification window: a plan is re-solved only on measurements taken at least this
  // many steps after its from_step, and so at most once per window. 20 is the agents'
  // fail-slow detector warm-up (agent/failslow_monitor.h WarmupOptions::min_iterations):
  // the detector, too, judges a new level only after that many iterations.
  int verify_window_steps = 20;
  // Data-parallel collectives per rank over which its waiting share is measured (the
  // newest ones of its profile).
  int wait_collectives = 8;
};

// Each replica's measured time per micro-batch (see microbatch_mitigation.cc).
struct ReplicaSpeeds {
  bool follows_plans = false;  // every rank of the layout reported mb= > 0
  bool ok = false;             // speeds measured (follows_plans and usable profiles)
  std::string why;             // why not ok
  std::vector<double> seconds_per_micro_batch;  // per DP replica
  std::vector<int64_t> micro_batches;           // per DP replica, as the ranks ran them
  int64_t global_micro_batches = 0;             // M: their sum
  double iteration_seconds = 0;  // the job's iteration time (slowest rank's mean)
  uint64_t min_step = 0;         // completed steps over the ranks
  uint64_t max_step = 0;
  std::string detail;            // the figures per replica
};

ReplicaSpeeds MeasureReplicaSpeeds(const ParallelLayout& layout, uint64_t attempt,
                                   const std::vector<AgentObservation>& agents,
                                   const MicroBatchMitigationOptions& options = {});

// The first step a plan decided now may start at: max_step + max(2, 1 + ceil(
// delivery_seconds / iteration_seconds)).
uint64_t PlanFromStep(const ReplicaSpeeds& speeds, const MicroBatchMitigationOptions& options = {});

// S2 for the ladder: available when the job has DP >= 2, the trainer follows plans (every
// rank's latest summary has micro_batches > 0) and either the speeds are not measured yet
// (S2 then waits for them) or the exact plan shortens the predicted step by more than
// spec.verify_threshold (measured and no gain: unavailable). Its cost: the steps
// until from_step at the current (slow) iteration time, or, when `measured_switch_seconds`
// > 0 (an earlier plan's decision -> in force), that measurement.
StrategyAvailability RedistributionAvailability(const FailSlowSpec& spec, const ParallelLayout& layout,
                                                const ReplicaSpeeds& speeds, double measured_switch_seconds = 0,
                                                const MicroBatchMitigationOptions& options = {});

struct MicroBatchPlanInput {
  std::string job_name;  // command ids: "<job>-mbplan-<plan id>-<pod>", "...-clear-<pod>"
  FailSlowSpec spec;
  uint64_t finding_id = 0;
  uint64_t attempt = 0;
  // The ladder is on S2 for this finding with mitigation Auto and the finding is open:
  // a plan is solved and kept. False: an existing plan is kept only while the measured
  // speeds still favour it over the even split, then withdrawn.
  bool wanted = false;
  MicroBatchPlanRecord record;  // the finding's, as persisted
  uint64_t next_plan_id = 1;    // above every plan id the job used
  ReplicaSpeeds speeds;
  std::vector<AgentObservation> agents;  // pods of the current attempt get the commands
};

struct MicroBatchPlanDecision {
  MicroBatchPlanRecord record;
  std::vector<CommandToSend> commands;
  std::vector<JobEvent> events;
  bool planned = false;  // a new plan was decided in this call
};

// Never fails: unusable measurements leave the record as is (and say why, once). A
// withdrawn plan's empty plan goes to every active pod that has not had it (by command id),
// so call it with a withdrawn record only when that record holds the job's newest plan id
// (an older record must never clear a newer plan).
MicroBatchPlanDecision DecideMicroBatchPlan(const MicroBatchPlanInput& input, int64_t now,
                                            const MicroBatchMitigationOptions& options = {});

// A plan in force: sent and not withdrawn.
inline bool PlanInForce(const MicroBatchPlanRecord& r) { return r.plan_id != 0 && r.cleared_at == 0; }

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_MICROBATCH_MITIGATION_H_
