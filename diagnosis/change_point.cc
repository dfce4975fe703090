#include "diagnosis/change_point.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "diagnosis/check.h"

// How the detectors work: Bayesian online change-point detection (BOCD, Adams & MacKay
// 2007) followed by Falcon's verification step (Falcon section 4.2 and appendix 9.1).
//
// BocdChangePointDetector is plain BOCD:
//  - run-length posterior with a constant hazard H (default 1/250): after each sample x_t,
//    P(run started at s | x_1..t) for every active start s; a new run (start = t) takes the
//    change-point branch with the prior predictive evaluated on x_t, so a jump is visible at
//    the sample where it happens;
//  - underlying model: Gaussian with unknown mean and variance, normal-gamma prior
//    (mu0, kappa0, alpha0, beta0) giving a Student-t predictive; each run keeps sufficient
//    statistics (n, mean, M2) so the posterior parameters are exact;
//  - outliers: a lone slow iteration (a checkpoint save) would otherwise end the long run
//    (its Student-t gives the spike ~0 density) and throw away the history. With
//    outlier_probability w (default 0.01) each run's predictive is the mixture
//    (1 - w) * Student-t + w * prior predictive, and a sample that a run attributes to the
//    outlier component does not update that run's statistics. A real level change still
//    wins within a few samples (the old run pays w per sample); w = 0 is plain BOCD;
//  - scale: the model runs on standardised samples z = (x - level) / scale, so the prior's
//    defaults (mu0 = 0, kappa0 = 0.01, alpha0 = 1, beta0 = 1: a new segment's mean may be
//    anywhere within tens of noise units, noise about one unit) fit any data. level and
//    scale are given, or estimated robustly from the first `calibration_samples` samples:
//    level = median, scale = 1.4826 * median |x_t - x_{t-1}| / sqrt(2) (a noise estimate
//    that ignores level shifts), floored at min_relative_scale * |level|; the calibration
//    samples are then replayed through the model;
//  - pruning: after each update, runs with posterior below prune_epsilon are dropped (the
//    newest run is always kept) and at most max_run_lengths runs are kept (the least
//    probable goes first), so an update costs O(active runs) and memory is bounded;
//  - report: with `last` the start of the previously reported change (initially the first
//    sample), the posterior that a change happened after `last` is the mass of runs that
//    started after it. When it reaches report_threshold (default 0.9, Falcon's) and the
//    most probable such run has at least min_run_length samples, the detector reports a
//    change point at that run's start.
//
// FailSlowDetector adds verification and the fail-slow state machine:
//  - each BOCD change point at index c is verified by comparing the samples before it (back
//    to the previous verified change, at most max_before of them) with the samples from c
//    on: it is verified when both the mean and the median differ by at least
//    verify_threshold (default 10%, Falcon's), in the same direction. The check runs on
//    every new sample once verify_after samples follow c, with the "after" window growing
//    up to verify_window samples (a slowdown that ramps in reaches its level after a few
//    iterations) but never past the next change point; the change point is rejected when
//    the window can grow no further.
//    Falcon compares means; also requiring the medians keeps a single slow iteration (a
//    checkpoint save) from carrying a short "after" window past the threshold;
//  - drift: a level check alone turns a steady trend (or a slow ramp) into a chain of level
//    shifts, each "after" window being 10% above the mean of a "before" window that lags
//    the trend. So when the "before" samples trend, the change must also leave the trend:
//    Tukey's resistant line is fitted to them (slope through the medians of the first and
//    last thirds, intercept the median residual; a step or bump inside the window barely
//    moves it, unlike least squares), and when its slope is significant (trend_min_t
//    standard errors, from the residuals' MAD) and moves the level by trend_min_rise over
//    the window, the "after" samples' mean and median deviation from the line's
//    extrapolation must reach verify_threshold of the level the line reaches at the change
//    point. On flat iteration times the line is flat and the check changes nothing. The
//    options were chosen on the tuning part of the real-series benchmark
//    (bench/failslow/changepoint_real_eval_main.cc) and the generated traces;
//  - a verified increase while healthy is a kSlowdownStart (severity = mean_after /
//    mean_before - 1); while slow, a verified decrease whose median_after is back within
//    verify_threshold of the healthy level (mean before the start) is kSlowdownEnd; any
//    other verified change is kLevelShift (a faster baseline while healthy, a new severity
//    while slow).

namespace peregrine {
namespace {

constexpr double kLn2 = 0.6931471805599453;
constexpr double kLn2Hi = 0.6931471803691238;
constexpr double kLn2Lo = 1.9082149292705877e-10;
constexpr double kPi = 3.141592653589793;
constexpr size_t kGammaCache = 1 << 16;

// log(x) for finite x >= 1, relative error below 1e-9. Branch-free so the per-run loop
// stays cheap; std::log would dominate an update.
inline double FastLog(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  double e = static_cast<double>(static_cast<int64_t>((bits >> 52) & 0x7ff) - 1023);
  bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
  double m;
  std::memcpy(&m, &bits, sizeof m);  // [1, 2)
  const bool high = m > 1.4142135623730951;
  m = high ? m * 0.5 : m;
  e = high ? e + 1.0 : e;
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double s2 = s * s;
  const double poly =
      s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 * (1.0 / 11)))));
  return e * kLn2 + 2.0 * s * (1.0 + poly);
}

// exp(y) for y <= 0, relative error below 1e-10; 0 below -708.
inline double FastExp(double y) {
  if (y < -708.0) return 0.0;
  const double k = std::floor(y * (1.0 / kLn2) + 0.5);
  const double r = (y - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const uint64_t bits = static_cast<uint64_t>(static_cast<int64_t>(k) + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

double Median(std::vector<double> v) {
  PEREGRINE_CHECK(!v.empty()) << "median of nothing";
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = 0.5 * (m + *std::max_element(v.begin(), v.begin() + static_cast<long>(mid)));
  }
  return m;
}

double Mean(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

absl::StatusOr<BocdChangePointDetector> BocdChangePointDetector::Create(
    const BocdOptions& o) {
  auto bad = [](const char* field, double value) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BocdOptions.%s out of range: %g", field, value));
  };
  if (!(o.hazard > 0.0 && o.hazard < 1.0)) return bad("hazard", o.hazard);
  if (!std::isfinite(o.mu0)) return bad("mu0", o.mu0);
  if (!(o.kappa0 > 0.0 && std::isfinite(o.kappa0))) return bad("kappa0", o.kappa0);
  if (!(o.alpha0 > 0.0 && std::isfinite(o.alpha0))) return bad("alpha0", o.alpha0);
  if (!(o.beta0 > 0.0 && std::isfinite(o.beta0))) return bad("beta0", o.beta0);
  if (!std::isfinite(o.level)) return bad("level", o.level);
  if (!(o.scale >= 0.0 && std::isfinite(o.scale))) return bad("scale", o.scale);
  if (o.scale == 0.0 && o.calibration_samples < 2) {
    return bad("calibration_samples", o.calibration_samples);
  }
  if (!(o.min_relative_scale >= 0.0)) return bad("min_relative_scale", o.min_relative_scale);
  if (!(o.outlier_probability >= 0.0 && o.outlier_probability < 0.5)) {
    return bad("outlier_probability", o.outlier_probability);
  }
  if (!(o.prune_epsilon >= 0.0 && o.prune_epsilon < 1.0)) {
    return bad("prune_epsilon", o.prune_epsilon);
  }
  if (o.max_run_lengths < 2) return bad("max_run_lengths", o.max_run_lengths);
  if (!(o.report_threshold > 0.0 && o.report_threshold <= 1.0)) {
    return bad("report_threshold", o.report_threshold);
  }
  if (o.min_run_length < 1) return bad("min_run_length", o.min_run_length);
  return BocdChangePointDetector(o);
}

BocdChangePointDetector::BocdChangePointDetector(const BocdOptions& options)
    : options_(options) {
  if (options_.scale > 0.0) {
    level_ = options_.level;
    scale_ = options_.scale;
  }
  const size_t reserve = static_cast<size_t>(options_.max_run_lengths) + 1;
  for (auto* v : {&prob_, &n_, &mean_, &m2_, &loc_, &inv_nu_s2_, &norm_, &half_nu1_, &scratch_}) {
    v->reserve(reserve);
  }
  start_.reserve(reserve);
  // The prior predictive: Student-t with nu = 2 a0, loc mu0, s^2 = b0 (k0 + 1) / (a0 k0).
  const double nu = 2.0 * options_.alpha0;
  const double s2 = options_.beta0 * (options_.kappa0 + 1.0) / (options_.alpha0 * options_.kappa0);
  prior_loc_ = options_.mu0;
  prior_inv_nu_s2_ = 1.0 / (nu * s2);
  prior_half_nu1_ = 0.5 * (nu + 1.0);
  prior_norm_ = std::exp(std::lgamma(0.5 * (nu + 1.0)) - std::lgamma(0.5 * nu)) /
                std::sqrt(nu * kPi * s2);
}

double BocdChangePointDetector::GammaRatio(double n) {
  const size_t key = static_cast<size_t>(n);
  if (key < kGammaCache) {
    if (gamma_ratio_.size() <= key) {
      size_t from = gamma_ratio_.size();
      gamma_ratio_.resize(std::min(kGammaCache, std::max<size_t>(key + 1, 2 * from + 64)));
      for (size_t i = from; i < gamma_ratio_.size(); ++i) {
        const double nu = 2.0 * options_.alpha0 + static_cast<double>(i);
        gamma_ratio_[i] = std::exp(std::lgamma(0.5 * (nu + 1.0)) - std::lgamma(0.5 * nu));
      }
    }
    return gamma_ratio_[key];
  }
  const double nu = 2.0 * options_.alpha0 + n;
  return std::exp(std::lgamma(0.5 * (nu + 1.0)) - std::lgamma(0.5 * nu));
}

void BocdChangePointDetector::RefreshPredictive(size_t i) {
  // Posterior (kn, mun, an, bn); the Student-t has nu = 2 an and
  // s^2 = bn (kn + 1) / (an kn), so nu s^2 = 2q with q = bn (kn + 1) / kn.
  const BocdOptions& o = options_;
  const double n = n_[i];
  const double kn = o.kappa0 + n;
  const double inv_kn = 1.0 / kn;
  const double d = mean_[i] - o.mu0;
  const double bn = o.beta0 + 0.5 * m2_[i] + 0.5 * o.kappa0 * n * d * d * inv_kn;
  const double q = bn * (kn + 1.0) * inv_kn;
  const double inv_sqrt = 1.0 / std::sqrt(2.0 * kPi * q);  // 1 / sqrt(nu pi s^2)
  loc_[i] = (o.kappa0 * o.mu0 + n * mean_[i]) * inv_kn;
  inv_nu_s2_[i] = kPi * inv_sqrt * inv_sqrt;  // 1 / (2q)
  half_nu1_[i] = o.alpha0 + 0.5 * n + 0.5;
  norm_[i] = GammaRatio(n) * inv_sqrt;
}

void BocdChangePointDetector::Calibrate() {
  std::vector<double> diffs;
  for (size_t i = 1; i < calibration_.size(); ++i) {
    diffs.push_back(std::fabs(calibration_[i] - calibration_[i - 1]));
  }
  level_ = Median(calibration_);
  double scale = 1.4826 * Median(diffs) / std::sqrt(2.0);
  scale = std::max(scale, options_.min_relative_scale * std::fabs(level_));
  if (!(scale > 0.0)) scale = 1.0;  // a constant series at zero
  scale_ = scale;
}

std::vector<ChangePointCandidate> BocdChangePointDetector::Update(double x) {
  std::vector<ChangePointCandidate> out;
  if (!std::isfinite(x)) {
    ++ignored_;
    return out;
  }
  if (scale_ <= 0.0) {
    calibration_.push_back(x);
    ++next_index_;
    if (calibration_.size() < static_cast<size_t>(options_.calibration_samples)) return out;
    Calibrate();
    for (size_t i = 0; i < calibration_.size(); ++i) {
      std::optional<ChangePointCandidate> c =
          Step(static_cast<int64_t>(i), (calibration_[i] - level_) / scale_);
      if (c.has_value()) out.push_back(*c);
    }
    calibration_.clear();
    calibration_.shrink_to_fit();
    return out;
  }
  std::optional<ChangePointCandidate> c = Step(next_index_++, (x - level_) / scale_);
  if (c.has_value()) out.push_back(*c);
  return out;
}

std::optional<ChangePointCandidate> BocdChangePointDetector::Step(int64_t index, double z) {
  const double hazard = options_.hazard;
  const size_t runs = start_.size();
  // Change-point branch density: the new run's first sample is z, under the prior
  // predictive. The same broad density is the outlier component of the runs' model.
  const double dz0 = z - prior_loc_;
  const double prior_pdf =
      prior_norm_ * std::pow(1.0 + dz0 * dz0 * prior_inv_nu_s2_, -prior_half_nu1_);
  const double outlier_w = options_.outlier_probability;
  const double outlier_pdf = outlier_w * prior_pdf;
  // Growth: each run's mass times its predictive of z (a mixture of the run's Student-t
  // and, with probability w, the outlier component).
  double evidence_growth = 0.0;
  scratch_.resize(runs);
  inlier_.resize(runs);
  for (size_t i = 0; i < runs; ++i) {
    const double dz = z - loc_[i];
    const double u = std::min(dz * dz * inv_nu_s2_[i], 1e300);
    const double pdf = (1.0 - outlier_w) * norm_[i] * FastExp(-half_nu1_[i] * FastLog(1.0 + u));
    inlier_[i] = pdf >= outlier_pdf;
    const double joint = prob_[i] * (pdf + outlier_pdf);
    scratch_[i] = joint;
    evidence_growth += joint;
  }
  const double new_mass = (runs == 0 ? 1.0 : hazard) * prior_pdf;
  const double total = (1.0 - hazard) * evidence_growth + new_mass;
  if (!(total > 0.0) || !std::isfinite(total)) {
    // Nothing explains z (numerical underflow everywhere): start afresh.
    start_.clear();
    for (auto* v : {&prob_, &n_, &mean_, &m2_, &loc_, &inv_nu_s2_, &norm_, &half_nu1_}) {
      v->clear();
    }
  } else {
    const double inv_total = 1.0 / total;
    for (size_t i = 0; i < runs; ++i) {
      prob_[i] = (1.0 - hazard) * scratch_[i] * inv_total;
      // A sample the run attributes to the outlier component leaves its statistics alone.
      if (!inlier_[i]) continue;
      // Welford update of the run's statistics with z, then its next predictive.
      n_[i] += 1.0;
      const double delta = z - mean_[i];
      mean_[i] += delta / n_[i];
      m2_[i] += delta * (z - mean_[i]);
      RefreshPredictive(i);
    }
  }
  const double new_prob = start_.empty() ? 1.0 : new_mass / total;
  start_.push_back(index);
  prob_.push_back(new_prob);
  n_.push_back(1.0);
  mean_.push_back(z);
  m2_.push_back(0.0);
  loc_.push_back(0.0);
  inv_nu_s2_.push_back(0.0);
  norm_.push_back(0.0);
  half_nu1_.push_back(0.0);
  RefreshPredictive(start_.size() - 1);

  // Prune: drop improbable runs (never the newest), then cap the count.
  const size_t newest = start_.size() - 1;
  size_t w = 0;
  for (size_t i = 0; i < start_.size(); ++i) {
    if (i != newest && prob_[i] < options_.prune_epsilon) continue;
    if (w != i) {
      start_[w] = start_[i];
      prob_[w] = prob_[i];
      n_[w] = n_[i];
      mean_[w] = mean_[i];
      m2_[w] = m2_[i];
      loc_[w] = loc_[i];
      inv_nu_s2_[w] = inv_nu_s2_[i];
      norm_[w] = norm_[i];
      half_nu1_[w] = half_nu1_[i];
    }
    ++w;
  }
  auto resize_all = [&](size_t size) {
    start_.resize(size);
    for (auto* v : {&prob_, &n_, &mean_, &m2_, &loc_, &inv_nu_s2_, &norm_, &half_nu1_}) {
      v->resize(size);
    }
  };
  resize_all(w);
  while (start_.size() > static_cast<size_t>(options_.max_run_lengths)) {
    size_t victim = 0;
    for (size_t i = 1; i + 1 < start_.size(); ++i) {
      if (prob_[i] < prob_[victim]) victim = i;
    }
    const long v = static_cast<long>(victim);
    start_.erase(start_.begin() + v);
    for (auto* vec : {&prob_, &n_, &mean_, &m2_, &loc_, &inv_nu_s2_, &norm_, &half_nu1_}) {
      vec->erase(vec->begin() + v);
    }
  }
  double sum = 0.0;
  for (double p : prob_) sum += p;
  const double inv_sum = 1.0 / sum;
  for (double& p : prob_) p *= inv_sum;
  max_active_ = std::max(max_active_, start_.size());

  // Report: posterior that the current run started after the last reported change.
  double mass = 0.0;
  long best = -1;
  for (size_t i = 0; i < start_.size(); ++i) {
    if (start_[i] <= last_reported_) continue;
    mass += prob_[i];
    if (best < 0 || prob_[i] > prob_[static_cast<size_t>(best)]) best = static_cast<long>(i);
  }
  if (best >= 0 && mass >= options_.report_threshold) {
    const int64_t s = start_[static_cast<size_t>(best)];
    if (index - s + 1 >= options_.min_run_length) {
      last_reported_ = s;
      return ChangePointCandidate{s, index, mass};
    }
  }
  return std::nullopt;
}

std::vector<std::pair<int64_t, double>> BocdChangePointDetector::RunStartPosterior() const {
  std::vector<std::pair<int64_t, double>> out;
  out.reserve(start_.size());
  for (size_t i = 0; i < start_.size(); ++i) out.emplace_back(start_[i], prob_[i]);
  return out;
}

const char* FailSlowEventKindName(FailSlowEventKind kind) {
  switch (kind) {
    case FailSlowEventKind::kSlowdownStart:
      return "slowdown_start";
    case FailSlowEventKind::kSlowdownEnd:
      return "slowdown_end";
    case FailSlowEventKind::kLevelShift:
      return "level_shift";
  }
  return "unknown";
}

absl::StatusOr<FailSlowDetector> FailSlowDetector::Create(const FailSlowDetectorOptions& o) {
  auto bad = [](const char* field, double value) {
    return absl::InvalidArgumentError(
        absl::StrFormat("FailSlowDetectorOptions.%s out of range: %g", field, value));
  };
  if (!(o.verify_threshold > 0.0 && o.verify_threshold < 10.0)) {
    return bad("verify_threshold", o.verify_threshold);
  }
  if (o.verify_after < 1) return bad("verify_after", o.verify_after);
  if (o.verify_window < o.verify_after) return bad("verify_window", o.verify_window);
  if (o.min_before < 1) return bad("min_before", o.min_before);
  if (o.max_before < o.min_before) return bad("max_before", o.max_before);
  if (o.max_pending < 1) return bad("max_pending", o.max_pending);
  if (o.trend_min_samples != 0 && o.trend_min_samples < 6) {
    return bad("trend_min_samples", o.trend_min_samples);
  }
  if (o.trend_window < std::max(3, o.trend_min_samples)) return bad("trend_window", o.trend_window);
  if (!(o.trend_min_t >= 0.0 && std::isfinite(o.trend_min_t))) return bad("trend_min_t", o.trend_min_t);
  if (!(o.trend_min_rise >= 0.0 && std::isfinite(o.trend_min_rise))) {
    return bad("trend_min_rise", o.trend_min_rise);
  }
  absl::StatusOr<BocdChangePointDetector> bocd = BocdChangePointDetector::Create(o.bocd);
  if (!bocd.ok()) return bocd.status();
  return FailSlowDetector(o, *std::move(bocd));
}

FailSlowDetector::FailSlowDetector(const FailSlowDetectorOptions& options,
                                   BocdChangePointDetector bocd)
    : options_(options), bocd_(std::move(bocd)) {
  // Room for the verification windows plus the lag between a change and its report.
  history_.assign(static_cast<size_t>(options_.max_before + options_.verify_window) + 1024, 0.0);
}

double FailSlowDetector::At(int64_t i) const {
  PEREGRINE_CHECK(i >= 0 && i < count_ && count_ - i <= static_cast<int64_t>(history_.size()))
      << "sample " << i << " not in history";
  return history_[static_cast<size_t>(i) % history_.size()];
}

bool FailSlowDetector::DepartsFromTrend(const std::vector<double>& all_before,
                                        const std::vector<double>& after) const {
  const absl::Span<const double> before = absl::MakeConstSpan(all_before).last(
      std::min(all_before.size(), static_cast<size_t>(options_.trend_window)));
  const size_t nb = before.size();
  if (options_.trend_min_samples == 0 || nb < static_cast<size_t>(options_.trend_min_samples)) {
    return true;
  }
  // Tukey's resistant line through the "before" samples (indexed 0..nb-1): the slope joins
  // the medians of the first and last thirds, so a step or a bump inside the window moves
  // it far less than least squares would; the intercept is the median residual.
  const size_t third = nb / 3;
  std::vector<double> left(before.begin(), before.begin() + static_cast<long>(third));
  std::vector<double> right(before.end() - static_cast<long>(third), before.end());
  const double span = static_cast<double>(nb - third);  // distance between the thirds' centres
  const double slope = (Median(right) - Median(left)) / span;
  std::vector<double> resid;
  resid.reserve(nb);
  for (size_t i = 0; i < nb; ++i) resid.push_back(before[i] - slope * static_cast<double>(i));
  const double intercept = Median(resid);
  for (double& r : resid) r = std::fabs(r - intercept);
  // Significance: the medians of the thirds (n = nb/3 each) have sd ~1.2533 sigma/sqrt(n),
  // with sigma the residuals' MAD-based scale.
  const double sigma = 1.4826 * Median(resid);
  const double se = std::sqrt(2.0) * 1.2533 * sigma / std::sqrt(static_cast<double>(third)) / span;
  const bool trending = se > 0.0 ? std::fabs(slope) >= options_.trend_min_t * se : slope != 0.0;
  if (!trending) return true;
  // The change must also stand out from the line's extrapolation, relative to the level
  // the line reaches at the change point. A drift that moves the level by less than
  // trend_min_rise across the window is left to the level check alone.
  const double level = std::fabs(intercept + slope * static_cast<double>(nb));
  if (!(level > 0.0)) return true;
  if (std::fabs(slope) * static_cast<double>(nb) < options_.trend_min_rise * level) return true;
  std::vector<double> dev;
  dev.reserve(after.size());
  for (size_t j = 0; j < after.size(); ++j) {
    dev.push_back(after[j] - (intercept + slope * static_cast<double>(nb + j)));
  }
  const double rel_mean = Mean(dev) / level;
  const double rel_median = Median(dev) / level;
  const double th = options_.verify_threshold;
  return std::fabs(rel_mean) >= th && std::fabs(rel_median) >= th &&
         (rel_mean > 0) == (rel_median > 0);
}

bool FailSlowDetector::Verify(const ChangePointCandidate& c, int64_t after_end,
                              std::vector<FailSlowEvent>& events) {
  const int64_t oldest = std::max<int64_t>(0, count_ - static_cast<int64_t>(history_.size()));
  const int64_t begin =
      std::max({segment_start_, c.index - static_cast<int64_t>(options_.max_before), oldest});
  if (c.index - begin < options_.min_before || c.index < oldest) return false;
  std::vector<double> before, after;
  for (int64_t i = begin; i < c.index; ++i) before.push_back(At(i));
  for (int64_t i = c.index; i < after_end; ++i) after.push_back(At(i));
  const double mean_before = Mean(before);
  const double mean_after = Mean(after);
  const double median_before = Median(before);
  const double median_after = Median(after);
  if (!(mean_before > 0.0 && median_before > 0.0)) return false;
  const double rel_mean = mean_after / mean_before - 1.0;
  const double rel_median = median_after / median_before - 1.0;
  const double th = options_.verify_threshold;
  const bool verified = std::fabs(rel_mean) >= th && std::fabs(rel_median) >= th &&
                        (rel_mean > 0) == (rel_median > 0);
  if (!verified || !DepartsFromTrend(before, after)) return false;
  ++stats_.verified;
  segment_start_ = c.index;
  FailSlowEvent e;
  e.index = c.index;
  e.confirmed_at = count_ - 1;
  e.posterior = c.posterior;
  e.mean_before = mean_before;
  e.mean_after = mean_after;
  e.median_before = median_before;
  e.median_after = median_after;
  e.relative_change = rel_mean;
  if (!in_slowdown_) {
    if (rel_mean > 0) {
      e.kind = FailSlowEventKind::kSlowdownStart;
      healthy_level_ = mean_before;
      in_slowdown_ = true;
    } else {
      e.kind = FailSlowEventKind::kLevelShift;
    }
    e.severity = mean_after / (in_slowdown_ ? healthy_level_ : mean_after) - 1.0;
  } else if (median_after <= healthy_level_ * (1.0 + th)) {
    e.kind = FailSlowEventKind::kSlowdownEnd;
    e.severity = mean_before / healthy_level_ - 1.0;
    in_slowdown_ = false;
  } else {
    e.kind = FailSlowEventKind::kLevelShift;
    e.severity = mean_after / healthy_level_ - 1.0;
  }
  events.push_back(e);
  return true;
}

FailSlowUpdate FailSlowDetector::Update(double x) {
  FailSlowUpdate out;
  if (!std::isfinite(x)) return out;
  history_[static_cast<size_t>(count_) % history_.size()] = x;
  ++count_;
  out.change_points = bocd_.Update(x);
  for (const ChangePointCandidate& c : out.change_points) {
    ++stats_.change_points;
    if (pending_.size() >= static_cast<size_t>(options_.max_pending)) {
      pending_.erase(pending_.begin());
      ++stats_.rejected;
    }
    pending_.push_back(c);
  }
  // Each pending change point is checked on every new sample, with the "after" window
  // growing from verify_after to verify_window samples (a slowdown that ramps in needs a
  // few samples to reach its level), and never reaching into the next change point.
  size_t i = 0;
  while (i < pending_.size()) {
    const ChangePointCandidate c = pending_[i];
    const bool has_next = i + 1 < pending_.size();
    const int64_t limit = std::min(has_next ? pending_[i + 1].index : count_,
                                   c.index + static_cast<int64_t>(options_.verify_window));
    const bool final = has_next || count_ >= c.index + options_.verify_window;
    if (c.index <= segment_start_ && segment_start_ > 0) {
      ++stats_.rejected;  // superseded by a later verified change
      pending_.erase(pending_.begin() + static_cast<long>(i));
      continue;
    }
    if (limit - c.index >= options_.verify_after && Verify(c, limit, out.events)) {
      pending_.erase(pending_.begin() + static_cast<long>(i));
      continue;
    }
    if (final) {
      ++stats_.rejected;
      pending_.erase(pending_.begin() + static_cast<long>(i));
      continue;
    }
    ++i;
  }
  return out;
}

absl::StatusOr<std::vector<ChangePointCandidate>> DetectChangePoints(
    absl::Span<const double> samples, const BocdOptions& options) {
  absl::StatusOr<BocdChangePointDetector> d = BocdChangePointDetector::Create(options);
  if (!d.ok()) return d.status();
  std::vector<ChangePointCandidate> out;
  for (double x : samples) {
    for (const ChangePointCandidate& c : d->Update(x)) out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::vector<FailSlowEvent>> DetectFailSlows(
    absl::Span<const double> samples, const FailSlowDetectorOptions& options) {
  absl::StatusOr<FailSlowDetector> d = FailSlowDetector::Create(options);
  if (!d.ok()) return d.status();
  std::vector<FailSlowEvent> out;
  for (double x : samples) {
    FailSlowUpdate u = d->Update(x);
    out.insert(out.end(), u.events.begin(), u.events.end());
  }
  return out;
}

}  // namespace peregrine
