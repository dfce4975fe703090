// TimeLedger: where the simulated job's wall time went. While the job trains it advances
// the job's progress (a continuous step count) at the current step time (the healthy step
// time, grown by an unmitigated fail-slow, plus the per-step share of blocking checkpoint
// saves); while it does not, it charges the time to the cause the engine names (detection,
// diagnosis, restart, waiting). A restore to an older step moves the time spent on the
// steps above it to "redo". At the end, kept time is the kept steps at the healthy step
// time, and the causes partition wall - kept (sim_result.h).
// Pure arithmetic on simulated time. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_SIM_LEDGER_H_
#define PEREGRINE_FLEETSIM_SIM_LEDGER_H_

#include <cstdint>
#include <vector>

#include "fleetsim/sim_result.h"

namespace peregrine::fleetsim {

enum class LedgerState { kTraining, kDetection, kDiagnosis, kRestart, kWaiting };

class TimeLedger {
 public:
  explicit TimeLedger(double healthy_step_s) : base_s_(healthy_step_s) {}

  // Accounts [last, now) to the current state. `now` never goes back.
  void AdvanceTo(int64_t now);
  // From the last AdvanceTo on, time goes to `state`. Entering kTraining uses the rate of
  // the last SetRate.
  void SetState(LedgerState state);
  LedgerState state() const { return state_; }
  // The step time from the last AdvanceTo on: `slow` the fractional growth of the step
  // (0: healthy), `checkpoint_s` the blocking checkpoint time per step.
  void SetRate(double slow, double checkpoint_s);
  // Progress goes back to `step` (a restore): the time spent above it is redone work.
  void Rewind(uint64_t step);
  // Progress as of the last AdvanceTo (whole steps completed) and at `now` (no change).
  uint64_t CompletedSteps() const;
  double ProgressAt(int64_t now) const;
  // When `step` completes if training continues at the current rate from the last AdvanceTo.
  int64_t TimeOfStep(uint64_t step) const;
  double StepSeconds() const { return base_s_ * (1 + slow_) + checkpoint_s_; }
  int64_t last_ns() const { return last_ns_; }

  // Kept time and the time lost by cause, as of the last AdvanceTo (a partial step at the
  // end counts as redone work).
  void Fill(SimResult* result) const;

 private:
  struct Segment {
    double from = 0, to = 0;  // progress
    double slow = 0, checkpoint_s = 0;
  };
  double base_s_;
  double slow_ = 0, checkpoint_s_ = 0;
  LedgerState state_ = LedgerState::kRestart;
  int64_t last_ns_ = 0;
  double progress_ = 0;
  std::vector<Segment> segments_;
  TimeLost lost_;
};

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_SIM_LEDGER_H_
