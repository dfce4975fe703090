// What one simulated run measured: effective training time, goodput and the time lost by
// cause, with counts of what the policy did. Every policy (Peregrine on the real decision
// core, and each baseline) fills the same struct so the report can put them side by side.
//
// Definitions (docs/simulation.md): wall_s is the simulated wall time of the job; kept_s
// the training time whose progress is kept at the end (work redone after a restore is not
// kept); ETTR = kept_s / wall_s. Goodput = kept GPU-seconds / GPU-seconds held (standby
// machines count as held). The lost_* fields partition wall_s - kept_s.
// Plain values. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_SIM_RESULT_H_
#define PEREGRINE_FLEETSIM_SIM_RESULT_H_

#include <cstdint>
#include <string>

namespace peregrine::fleetsim {

struct TimeLost {
  double detection_s = 0;   // a fault happened and nobody acted yet
  double diagnosis_s = 0;   // deciding what failed
  double restart_s = 0;     // pods replaced, processes restarted, checkpoint restored
  double redo_s = 0;        // training since the last checkpoint, done again
  double slowdown_s = 0;    // a fail-slow's lost throughput, as whole-job time
  double checkpoint_s = 0;  // training blocked by checkpoint saves
  double waiting_s = 0;     // no machines to run on (pool exhausted, requeue)
  double total() const {
    return detection_s + diagnosis_s + restart_s + redo_s + slowdown_s + checkpoint_s + waiting_s;
  }
};

struct SimResult {
  std::string policy;  // "peregrine", "requeue-disk-30min", "standby-no-memory-ckpt", ...
  double wall_s = 0;
  double kept_s = 0;
  double ettr = 0;
  double goodput = 0;
  TimeLost lost;
  int64_t faults = 0;      // fault events that hit the job's machines while in use
  int64_t fail_stops = 0;
  int64_t fail_slows = 0;
  int64_t evictions = 0;        // machines taken out of the job
  int64_t false_evictions = 0;  // ... of which were healthy
  int64_t restarts = 0;         // job-wide process restarts
  int64_t standby_exhaustions = 0;  // a replacement was needed and no standby was ready
  // Recoveries from fail-stops: how many, and the summed time from each fault to training
  // running again (mean recovery = recovery_s / recoveries; ByteRobust compares policies
  // on this).
  int64_t recoveries = 0;
  double recovery_s = 0;
  // Fail-slow findings of the decision core (Peregrine only): opened, localized (by kind;
  // compute+communication counts in both), validation confirmed, S2 micro-batch plans
  // sent, S4 replacements decided (their evictions are in `evictions`).
  int64_t failslow_findings = 0;
  int64_t failslow_localized = 0;
  int64_t failslow_compute = 0;
  int64_t failslow_communication = 0;
  int64_t failslow_confirmed = 0;
  int64_t failslow_s2_plans = 0;
  int64_t failslow_s4 = 0;
  int64_t decisions = 0;        // DecideJob calls (Peregrine only)
  double sim_cpu_s = 0;         // CPU time the simulation took (filled by the runner)
};

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_SIM_RESULT_H_
