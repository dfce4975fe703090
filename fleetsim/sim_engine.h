// The discrete-event simulation of a training job on the real decision core: the job of
// JobShape runs for JobShape::days of simulated time on a SimCluster; faults come from the
// given list; at every time the observation changes (a fault seen, a pod ready, an agent
// converged, a command answered, the first step of an attempt), when the plan asks to look
// again (JobPlan::requeue_after_ns) and at the controller's periodic resync, the engine
// builds the JobObservation, calls DecideJob(job, status, observation, now, config) and
// applies the plan. Training progress, kept time and the time lost by cause are kept in a
// TimeLedger (sim_ledger.h).
//
// Variants (the baselines that are Peregrine with a feature off):
//   kFull                        "peregrine": warm standbys, in-memory checkpoints every
//                                memory_checkpoint_interval_s, the fail-slow ladder on;
//   kStandbyNoMemoryCheckpoint   "standby-no-memory-ckpt": the same without in-memory
//                                checkpoints: the job's checkpoints are the disk ones
//                                (disk_checkpoint_interval_s, blocking disk_checkpoint_save_s,
//                                restored in disk_restore_s);
//   kNoFailSlowMitigation        "no-failslow-mitigation": spec.failSlow.mitigation
//                                MonitorOnly.
//
// SimulatePeregrine is deterministic (same inputs, same result) and pure: no clocks, no
// I/O. Errors: InvalidArgumentError naming the bad field or fault. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_SIM_ENGINE_H_
#define PEREGRINE_FLEETSIM_SIM_ENGINE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"
#include "fleetsim/cost_model.h"
#include "fleetsim/fault_model.h"
#include "fleetsim/sim_result.h"

namespace peregrine::fleetsim {

enum class PeregrineVariant { kFull, kStandbyNoMemoryCheckpoint, kNoFailSlowMitigation };
std::string_view VariantPolicyName(PeregrineVariant variant);

struct SimOptions {
  PeregrineVariant variant = PeregrineVariant::kFull;
  // Machines of the fleet beside the job's: where standbys and replacements are scheduled.
  // -1: max(16, 5% of the job's machines).
  int spare_machines = -1;
  // The spec's standby.dailyFailureRate (per machine per day) the pool is sized with.
  double standby_daily_failure_rate = 0.01;
  int standby_min = 0;  // the spec's standby.min
  // The controller's periodic look without a new observation (seconds; controller-runtime's
  // default SyncPeriod is 10 hours); 0: none.
  double resync_s = 36000;
  // When set, every event of every plan is appended as "<sim seconds> <reason>: <message>".
  std::vector<std::string>* event_log = nullptr;
};

// Machines of the fleet the job runs on (job machines + spares); faults name 0..this-1.
int FleetMachines(const JobShape& shape, const SimOptions& options);

// The TrainingJob the simulation decides for: the shape's machines and GPUs (tensor
// parallel within a machine, data parallel across), checkpoints and fail-slow mitigation
// per the variant, maxRecoveries unbounded (a long job must not give up).
TrainingJob SimulatedJob(const JobShape& shape, const CostModel& costs, const SimOptions& options);

absl::StatusOr<SimResult> SimulatePeregrine(const JobShape& shape, const CostModel& costs,
                                            const std::vector<FaultEvent>& faults, const SimOptions& options = {});

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_SIM_ENGINE_H_
