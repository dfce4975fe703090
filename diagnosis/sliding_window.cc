#include "diagnosis/sliding_window.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace peregrine {

absl::StatusOr<SlidingWindowDetector> SlidingWindowDetector::Create(
    const SlidingWindowOptions& options) {
  if (options.window < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SlidingWindowOptions.window must be >= 1, got %d", options.window));
  }
  if (!(options.threshold > 0.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SlidingWindowOptions.threshold must be > 0, got %g", options.threshold));
  }
  if (options.min_consecutive < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SlidingWindowOptions.min_consecutive must be >= 1, got %d", options.min_consecutive));
  }
  return SlidingWindowDetector(options);
}

double SlidingWindowDetector::WindowMedian() const {
  const size_t n = sorted_.size();
  return n % 2 == 1 ? sorted_[n / 2] : 0.5 * (sorted_[n / 2 - 1] + sorted_[n / 2]);
}

std::optional<SlidingWindowEvent> SlidingWindowDetector::Update(double x) {
  if (!std::isfinite(x)) return std::nullopt;
  const int64_t index = index_++;
  std::optional<SlidingWindowEvent> event;
  if (sorted_.size() == static_cast<size_t>(options_.window)) {
    const double median = WindowMedian();
    if (!in_slowdown_) {
      const bool anomalous = x > median * (1.0 + options_.threshold);
      if (anomalous) {
        if (consecutive_++ == 0) run_start_ = index;
      } else {
        consecutive_ = 0;
      }
      if (consecutive_ >= options_.min_consecutive) {
        in_slowdown_ = true;
        frozen_median_ = median;
        consecutive_ = 0;
        event = SlidingWindowEvent{true, run_start_, median, x};
      }
    } else if (x <= frozen_median_ * (1.0 + options_.threshold)) {
      in_slowdown_ = false;
      event = SlidingWindowEvent{false, index, frozen_median_, x};
    }
  }
  window_.push_back(x);
  sorted_.insert(std::upper_bound(sorted_.begin(), sorted_.end(), x), x);
  if (window_.size() > static_cast<size_t>(options_.window)) {
    const double old = window_.front();
    window_.pop_front();
    sorted_.erase(std::lower_bound(sorted_.begin(), sorted_.end(), old));
  }
  return event;
}

absl::StatusOr<std::vector<SlidingWindowEvent>> DetectSlidingWindow(
    absl::Span<const double> samples, const SlidingWindowOptions& options) {
  absl::StatusOr<SlidingWindowDetector> d = SlidingWindowDetector::Create(options);
  if (!d.ok()) return d.status();
  std::vector<SlidingWindowEvent> out;
  for (double x : samples) {
    std::optional<SlidingWindowEvent> e = d->Update(x);
    if (e.has_value() && e->start) out.push_back(*e);
  }
  return out;
}

}  // namespace peregrine
