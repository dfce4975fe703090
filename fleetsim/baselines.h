// Policies that are not Peregrine, replayed on the same faults so the report can put them
// beside it: the common practice (requeue the whole job from a disk checkpoint) and an
// oracle that handles every fault at zero cost.
//
// The cluster: machines 0..shape.machines()-1 start in the job, machines
// shape.machines()..shape.machines()+spare_machines-1 start free. A fail-stop (any kind,
// software included) takes its machine out from start_ns until end_ns +
// costs.machine_return_s; one with end_ns <= start_ns (a software fault with no repair)
// crashes the training processes and leaves the machine up; a fail-slow
// slows its machine by `severity` over [start_ns, end_ns) (overlapping episodes on one
// machine: the largest applies). Events on machines outside the cluster, or starting
// outside [0, shape.days), are ignored. The run lasts shape.days of wall time.
//
// Both are exact event replays, O((faults + checkpoints) log faults), pure (no clock,
// threads or I/O), deterministic. The algorithms and every counting rule are in the .cc and
// docs/simulation.md. Thread-compatible; no ownership.
#ifndef PEREGRINE_FLEETSIM_BASELINES_H_
#define PEREGRINE_FLEETSIM_BASELINES_H_

#include <vector>

#include "fleetsim/cost_model.h"
#include "fleetsim/fault_model.h"
#include "fleetsim/sim_result.h"

namespace peregrine::fleetsim {

inline constexpr char kRequeuePolicyName[] = "requeue-disk-30min";
inline constexpr char kOraclePolicyName[] = "oracle";

// The job without Peregrine: disk checkpoints every costs.disk_checkpoint_interval_s of
// training (each blocks disk_checkpoint_save_s), no standbys, no fail-slow mitigation. A
// fail-stop is seen after failstop_detection_s; the broken machines are replaced by free
// healthy ones (waiting while none is free); the whole job is requeued (requeue_s), restored
// from disk (disk_restore_s) and redoes the work since the last completed save.
// standby_exhaustions counts recoveries that found no free healthy machine and had to wait.
SimResult RunRequeueBaseline(const std::vector<FaultEvent>& faults, const JobShape& shape,
                             const CostModel& costs, int spare_machines);

// The upper bound: no checkpoints, every fault handled at once and for free. At every
// instant the job holds the best machines the cluster has (up, then least slowed); it
// loses time only when fewer than shape.machines() machines are up (waiting_s) or when
// every machine it could hold is slowed (slowdown_s).
SimResult RunOracle(const std::vector<FaultEvent>& faults, const JobShape& shape,
                    const CostModel& costs, int spare_machines);

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_BASELINES_H_
