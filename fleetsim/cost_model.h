// The job a simulation runs and what each action costs in simulated time.
//
// JobShape is the job (GPUs, machines, days, step time). CostModel gives the durations the
// simulated cluster charges for what the decision core asks (a pod scheduled, a process
// restarted, a checkpoint saved or restored, a standby warmed up) and the latencies of
// detection and diagnosis. Every field has a documented default and source in
// docs/simulation.md; ValidateCostModel names the first field out of range.
// Plain values. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_COST_MODEL_H_
#define PEREGRINE_FLEETSIM_COST_MODEL_H_

#include <cstdint>

#include "absl/status/status.h"

namespace peregrine::fleetsim {

struct JobShape {
  int gpus = 1024;
  int gpus_per_machine = 8;
  double days = 7;
  double step_time_s = 10;  // one training step of the healthy job
  uint64_t seed = 1;
  int machines() const { return (gpus + gpus_per_machine - 1) / gpus_per_machine; }
};

struct CostModel {
  // Detection: a fail-stop is seen after this long (process exit, heartbeat loss, Xid).
  double failstop_detection_s = 30;
  // Diagnosis of an unclear failure (stack capture, stop-time tests) before a verdict.
  double diagnosis_s = 120;
  // Training processes stopped and started again on the same pods (rendezvous included).
  double restart_s = 90;
  // A new pod on a free machine until its agent is ready (scheduling, image, init).
  double pod_start_s = 300;
  // A warm standby swapped into the job (already scheduled, image pulled, agent up).
  double standby_swap_s = 20;
  // Whole-job requeue: every pod deleted and the job admitted and scheduled again.
  double requeue_s = 1800;
  // Checkpoints: in-memory save blocks training this long; restore from memory or disk.
  double memory_checkpoint_save_s = 0.5;
  double memory_checkpoint_interval_s = 60;  // how often the in-memory checkpoint commits
  double disk_checkpoint_save_s = 60;
  double disk_checkpoint_interval_s = 1800;
  double memory_restore_s = 30;
  double disk_restore_s = 300;
  // A machine handed back by repair waits this long before it is schedulable again.
  double machine_return_s = 0;
};

absl::Status ValidateJobShape(const JobShape& shape);
absl::Status ValidateCostModel(const CostModel& costs);

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_COST_MODEL_H_
