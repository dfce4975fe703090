// Fail-slow onset and recovery from one rank's iteration times.
//
// BocdChangePointDetector is Bayesian online change-point detection (BOCD): Update() feeds
// one sample and returns the change points it reports once the posterior that a change
// happened since the last report reaches the threshold. FailSlowDetector verifies each
// change (means and medians before and after must differ) and turns verified changes into
// FailSlowEvents (slowdown start, end, level shift). DetectChangePoints / DetectFailSlows
// run a whole series. Create() and the batch helpers fail with kInvalidArgument naming an
// option out of range. The model, its defaults and the verification rule are described
// in change_point.cc.
//
// Pure computation: no clocks, no I/O, no randomness. Thread-compatible value types.
#ifndef PEREGRINE_DIAGNOSIS_CHANGE_POINT_H_
#define PEREGRINE_DIAGNOSIS_CHANGE_POINT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace peregrine {

struct BocdOptions {
  double hazard = 1.0 / 250.0;  // P(change) per sample, in (0, 1)
  // Normal-gamma prior, in standardised units.
  double mu0 = 0.0;
  double kappa0 = 0.01;
  double alpha0 = 1.0;
  double beta0 = 1.0;
  // Standardisation. When scale > 0, z = (x - level) / scale is used from the first
  // sample; otherwise both are estimated from the first calibration_samples samples.
  double level = 0.0;
  double scale = 0.0;
  int calibration_samples = 20;
  double min_relative_scale = 0.005;
  // Outlier-robust model: with this probability a sample comes from the broad prior
  // predictive instead of the run's model (0: plain Adams & MacKay).
  double outlier_probability = 0.01;
  // Pruning.
  double prune_epsilon = 3e-4;
  int max_run_lengths = 256;
  // Reporting.
  double report_threshold = 0.9;
  int min_run_length = 3;
};

// A change point reported by BOCD.
struct ChangePointCandidate {
  int64_t index = 0;         // first sample of the new segment (0-based)
  int64_t confirmed_at = 0;  // sample index at which it was reported
  double posterior = 0.0;    // P(change after the previous report | data) when reported
};

class BocdChangePointDetector {
 public:
  // Fails with kInvalidArgument naming the option out of range.
  static absl::StatusOr<BocdChangePointDetector> Create(const BocdOptions& options = {});

  // Feeds the next sample; returns the change points reported by it (at most one, except
  // when the calibration samples are replayed). Non-finite samples are ignored (counted).
  std::vector<ChangePointCandidate> Update(double x);

  int64_t samples() const { return next_index_; }
  int64_t ignored_samples() const { return ignored_; }
  size_t active_run_lengths() const { return start_.size(); }
  size_t max_active_run_lengths_seen() const { return max_active_; }
  bool calibrated() const { return scale_ > 0.0; }
  double level() const { return level_; }
  double scale() const { return scale_; }
  // Posterior mass by run start, for inspection (same order as internal storage).
  std::vector<std::pair<int64_t, double>> RunStartPosterior() const;

 private:
  explicit BocdChangePointDetector(const BocdOptions& options);
  void Calibrate();
  std::optional<ChangePointCandidate> Step(int64_t index, double z);
  void RefreshPredictive(size_t i);
  double GammaRatio(double n);  // lgamma((nu+1)/2) - lgamma(nu/2) as exp(), nu = 2 a0 + n

  BocdOptions options_;
  double level_ = 0.0;
  double scale_ = 0.0;
  std::vector<double> calibration_;
  int64_t next_index_ = 0;
  int64_t ignored_ = 0;
  int64_t last_reported_ = 0;
  size_t max_active_ = 0;

  // One entry per active run (structure of arrays), oldest first.
  std::vector<int64_t> start_;
  std::vector<double> prob_;
  std::vector<double> n_;
  std::vector<double> mean_;
  std::vector<double> m2_;
  // Student-t predictive of each run: pdf(x) = norm * (1 + (x-loc)^2 * inv_nu_s2)^-half_nu1.
  std::vector<double> loc_;
  std::vector<double> inv_nu_s2_;
  std::vector<double> norm_;
  std::vector<double> half_nu1_;
  std::vector<double> scratch_;
  std::vector<char> inlier_;
  std::vector<double> gamma_ratio_;  // GammaRatio cache by n
  // The prior predictive (a run with no data).
  double prior_loc_ = 0.0, prior_inv_nu_s2_ = 0.0, prior_norm_ = 0.0, prior_half_nu1_ = 0.0;
};

enum class FailSlowEventKind { kSlowdownStart, kSlowdownEnd, kLevelShift };
const char* FailSlowEventKindName(FailSlowEventKind kind);

// A verified change in iteration time.
struct FailSlowEvent {
  FailSlowEventKind kind = FailSlowEventKind::kSlowdownStart;
  int64_t index = 0;         // first sample at the new level
  int64_t confirmed_at = 0;  // sample index at which it was verified
  double posterior = 0.0;    // BOCD posterior when the change point was reported
  double mean_before = 0.0;
  double mean_after = 0.0;
  double median_before = 0.0;
  double median_after = 0.0;
  // mean_after / mean_before - 1 (positive: slower).
  double relative_change = 0.0;
  // How much slower than the healthy level the job is after the change (mean_after /
  // healthy - 1); for kSlowdownEnd, how much slower it was before (mean_before / healthy - 1).
  double severity = 0.0;
};

struct FailSlowDetectorOptions {
  BocdOptions bocd;
  double verify_threshold = 0.10;  // Falcon: 10%
  int verify_after = 8;    // samples after the change point needed for verification
  int verify_window = 32;  // ... and at most this many, while the check keeps failing
  int min_before = 3;              // fewer samples before: the change cannot be verified
  int max_before = 1024;           // at most this many samples before are compared
  int max_pending = 8;             // change points awaiting their verify_after samples
  // Drift: when the samples before a change point (the last trend_window of them, at least
  // trend_min_samples) follow a line (Tukey's resistant line) whose slope is at least
  // trend_min_t standard errors from zero and moves the level by at least trend_min_rise
  // across them, the "after" samples are also compared with the line's extrapolation, and
  // the change is verified only when they depart from it by verify_threshold too (mean and
  // median): a steady trend is not a chain of level shifts. trend_min_samples: 0 (off) or >= 6.
  int trend_min_samples = 6;
  int trend_window = 1024;  // the line is fitted to at most this many samples before
  double trend_min_t = 2.0;
  double trend_min_rise = 0.05;  // relative level change along the line over the window
};

struct FailSlowUpdate {
  std::vector<ChangePointCandidate> change_points;  // raw BOCD reports (unverified)
  std::vector<FailSlowEvent> events;                // verified changes
};

struct FailSlowDetectorStats {
  int64_t change_points = 0;
  int64_t verified = 0;
  int64_t rejected = 0;  // failed verification, or not enough samples before
};

class FailSlowDetector {
 public:
  static absl::StatusOr<FailSlowDetector> Create(const FailSlowDetectorOptions& options = {});

  // Feeds the next iteration time (any unit; the same unit throughout).
  FailSlowUpdate Update(double x);

  bool in_slowdown() const { return in_slowdown_; }
  double healthy_level() const { return healthy_level_; }
  const FailSlowDetectorStats& stats() const { return stats_; }
  const BocdChangePointDetector& bocd() const { return bocd_; }

 private:
  FailSlowDetector(const FailSlowDetectorOptions& options, BocdChangePointDetector bocd);
  // The raw sample at index i, which must still be in the history.
  double At(int64_t i) const;
  // Compares [before, c.index) with [c.index, after_end); appends the event and returns
  // true when verified.
  bool Verify(const ChangePointCandidate& candidate, int64_t after_end,
              std::vector<FailSlowEvent>& events);
  // False when the "before" samples follow a significant trend whose extrapolation the
  // "after" samples do not leave by verify_threshold (see trend_min_samples).
  bool DepartsFromTrend(const std::vector<double>& before, const std::vector<double>& after) const;

  FailSlowDetectorOptions options_;
  BocdChangePointDetector bocd_;
  std::vector<double> history_;  // ring buffer of raw samples
  int64_t count_ = 0;            // samples seen (finite ones)
  int64_t segment_start_ = 0;    // first sample after the last verified change
  std::vector<ChangePointCandidate> pending_;
  bool in_slowdown_ = false;
  double healthy_level_ = 0.0;
  FailSlowDetectorStats stats_;
};

// Batch helpers: run a fresh detector over `samples`.
absl::StatusOr<std::vector<ChangePointCandidate>> DetectChangePoints(
    absl::Span<const double> samples, const BocdOptions& options = {});
absl::StatusOr<std::vector<FailSlowEvent>> DetectFailSlows(
    absl::Span<const double> samples, const FailSlowDetectorOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_CHANGE_POINT_H_
