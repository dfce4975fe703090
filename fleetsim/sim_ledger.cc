#include "fleetsim/sim_ledger.h"

#include <algorithm>
#include <cmath>

#include "fleetsim/sim_event.h"

// Progress is a continuous step count so that a change of the step time in the middle of
// a step keeps the fraction already done. Each stretch of training at one rate is a
// segment [from, to) of progress; a segment's time is (to - from) x its step time, split
// into the healthy share (kept, unless rewound), the slowdown share and the checkpoint
// share. Rewinding drops the segments' parts above the restored step and charges their
// whole time to redo.

namespace peregrine::fleetsim {
namespace {

// Whole steps in `progress`, tolerant of rounding just below an integer.
uint64_t Whole(double progress) { return static_cast<uint64_t>(std::floor(progress + 1e-9)); }

}  // namespace

void TimeLedger::AdvanceTo(int64_t now) {
  if (now <= last_ns_) return;
  const double dt = NsToSeconds(now - last_ns_);
  last_ns_ = now;
  switch (state_) {
    case LedgerState::kTraining: {
      const double steps = dt / StepSeconds();
      if (!segments_.empty() && segments_.back().to == progress_ && segments_.back().slow == slow_ &&
          segments_.back().checkpoint_s == checkpoint_s_) {
        segments_.back().to += steps;
      } else {
        segments_.push_back(Segment{progress_, progress_ + steps, slow_, checkpoint_s_});
      }
      progress_ += steps;
      break;
    }
    case LedgerState::kDetection: lost_.detection_s += dt; break;
    case LedgerState::kDiagnosis: lost_.diagnosis_s += dt; break;
    case LedgerState::kRestart: lost_.restart_s += dt; break;
    case LedgerState::kWaiting: lost_.waiting_s += dt; break;
  }
}

void TimeLedger::SetState(LedgerState state) { state_ = state; }

void TimeLedger::SetRate(double slow, double checkpoint_s) {
  slow_ = slow;
  checkpoint_s_ = checkpoint_s;
}

void TimeLedger::Rewind(uint64_t step) {
  const double target = static_cast<double>(step);
  if (progress_ <= target) return;
  while (!segments_.empty() && segments_.back().to > target) {
    Segment& s = segments_.back();
    const double from = std::max(s.from, target);
    lost_.redo_s += (s.to - from) * (base_s_ * (1 + s.slow) + s.checkpoint_s);
    if (s.from >= target) {
      segments_.pop_back();
    } else {
      s.to = target;
    }
  }
  progress_ = target;
}

uint64_t TimeLedger::CompletedSteps() const { return Whole(progress_); }

double TimeLedger::ProgressAt(int64_t now) const {
  if (state_ != LedgerState::kTraining || now <= last_ns_) return progress_;
  return progress_ + NsToSeconds(now - last_ns_) / StepSeconds();
}

int64_t TimeLedger::TimeOfStep(uint64_t step) const {
  const double left = std::max(0.0, static_cast<double>(step) - progress_);
  return last_ns_ + static_cast<int64_t>(std::ceil(left * StepSeconds() * 1e9));
}

void TimeLedger::Fill(SimResult* result) const {
  TimeLost lost = lost_;
  const double kept_steps = static_cast<double>(Whole(progress_));
  double kept = 0;
  for (const Segment& s : segments_) {
    const double to = std::min(s.to, kept_steps);
    const double from = s.from;
    if (to > from) {
      kept += (to - from) * base_s_;
      lost.slowdown_s += (to - from) * base_s_ * s.slow;
      lost.checkpoint_s += (to - from) * s.checkpoint_s;
    }
    if (s.to > kept_steps) {  // the partial step at the end
      lost.redo_s += (s.to - std::max(from, kept_steps)) * (base_s_ * (1 + s.slow) + s.checkpoint_s);
    }
  }
  result->wall_s = NsToSeconds(last_ns_);
  result->kept_s = kept;
  result->lost = lost;
  result->ettr = result->wall_s > 0 ? kept / result->wall_s : 0;
}

}  // namespace peregrine::fleetsim
