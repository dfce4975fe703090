// The sliding-window fail-slow baseline from Falcon's evaluation (section 7.2): a sample
// more than `threshold` (10%) above the median of the previous `window` samples is
// anomalous. It exists to be compared against BOCD + verification (failslow_trace.h,
// bench/failslow); it is not used for decisions.
//
// Reporting: while healthy, the first anomalous sample (or the first of
// `min_consecutive` consecutive ones) starts a slowdown; the baseline median is frozen at
// that point, and the slowdown ends at the first sample back within `threshold` of the
// frozen median. Samples below the median are never anomalous (fail-slow only slows).
// Each update costs O(log window + window) (a sorted copy of the window is maintained).
//
// Pure computation; thread-compatible.
#ifndef PEREGRINE_DIAGNOSIS_SLIDING_WINDOW_H_
#define PEREGRINE_DIAGNOSIS_SLIDING_WINDOW_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace peregrine {

struct SlidingWindowOptions {
  int window = 20;
  double threshold = 0.10;
  int min_consecutive = 1;
};

struct SlidingWindowEvent {
  bool start = true;  // false: the slowdown ended
  int64_t index = 0;  // sample that started (or ended) the slowdown
  double median = 0.0;  // the window median it was compared with
  double value = 0.0;
};

class SlidingWindowDetector {
 public:
  // Fails with kInvalidArgument naming the option out of range.
  static absl::StatusOr<SlidingWindowDetector> Create(const SlidingWindowOptions& options = {});

  // Feeds the next sample; returns the event it causes, if any. Non-finite samples are
  // ignored and get no index.
  std::optional<SlidingWindowEvent> Update(double x);

  bool in_slowdown() const { return in_slowdown_; }

 private:
  explicit SlidingWindowDetector(const SlidingWindowOptions& options) : options_(options) {}
  double WindowMedian() const;

  SlidingWindowOptions options_;
  std::deque<double> window_;   // arrival order
  std::vector<double> sorted_;  // the same samples, sorted
  int64_t index_ = 0;
  int consecutive_ = 0;
  int64_t run_start_ = 0;
  bool in_slowdown_ = false;
  double frozen_median_ = 0.0;
};

// Batch helper: the start events over `samples`.
absl::StatusOr<std::vector<SlidingWindowEvent>> DetectSlidingWindow(
    absl::Span<const double> samples, const SlidingWindowOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_SLIDING_WINDOW_H_
