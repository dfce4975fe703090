#include "diagnosis/change_point_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

// The default BOCPD baseline. TCPDBench's default_bocpd runs R's ocp package on the
// series standardised to mean 0 and standard deviation 1 (sample standard deviation),
// with a Gaussian model, normal-gamma prior m = 0, k = 1, a = 1, b = 1 and a constant
// hazard 1/100, and reports the change points of the most probable run-length path.
// Here the same model is solved exactly: with the segment marginal likelihood
//   log p(x_s..x_{t-1}) = lgamma(a_n) - lgamma(a) + a log b - a_n log b_n
//                         + (log k - log k_n)/2 - (n/2) log(2 pi),
//   k_n = k + n, a_n = a + n/2, b_n = b + SS/2 + k n (mean - m)^2 / (2 k_n),
// and the hazard prior ((1-h)^(L-1) h for a segment of length L that ends, (1-h)^(L-1)
// for the last one), the maximum a posteriori segmentation comes from the recursion
//   best[t] = max_s best[s] + log p(x_s..x_{t-1}) + log prior(L = t - s, ends),
// O(n^2) for a series of n samples (a baseline for offline evaluation, not a detector).

namespace peregrine {
namespace {

constexpr double kLog2Pi = 1.8378770664093453;

// Finite samples and their original indexes.
void Finite(absl::Span<const double> samples, std::vector<double>& values,
            std::vector<int64_t>& index) {
  for (size_t i = 0; i < samples.size(); ++i) {
    if (!std::isfinite(samples[i])) continue;
    values.push_back(samples[i]);
    index.push_back(static_cast<int64_t>(i));
  }
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> GaussianBocpdChangePoints(absl::Span<const double> samples,
                                                               const GaussianBocpdOptions& o) {
  auto bad = [](const char* field, double value) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GaussianBocpdOptions.%s out of range: %g", field, value));
  };
  if (!(o.lambda > 1.0 && std::isfinite(o.lambda))) return bad("lambda", o.lambda);
  if (!std::isfinite(o.prior_m)) return bad("prior_m", o.prior_m);
  if (!(o.prior_k > 0.0 && std::isfinite(o.prior_k))) return bad("prior_k", o.prior_k);
  if (!(o.prior_a > 0.0 && std::isfinite(o.prior_a))) return bad("prior_a", o.prior_a);
  if (!(o.prior_b > 0.0 && std::isfinite(o.prior_b))) return bad("prior_b", o.prior_b);
  std::vector<double> x;
  std::vector<int64_t> index;
  Finite(samples, x, index);
  const size_t n = x.size();
  std::vector<int64_t> out;
  if (n < 2) return out;
  double mean = 0.0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (double v : x) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / static_cast<double>(n - 1));
  for (double& v : x) v = sd > 0.0 ? (v - mean) / sd : 0.0;

  const double h = 1.0 / o.lambda;
  const double log_h = std::log(h), log_1h = std::log1p(-h);
  const double base = -std::lgamma(o.prior_a) + o.prior_a * std::log(o.prior_b) + 0.5 * std::log(o.prior_k);
  std::vector<double> best(n + 1, -std::numeric_limits<double>::infinity());
  std::vector<size_t> from(n + 1, 0);
  best[0] = 0.0;
  for (size_t t = 1; t <= n; ++t) {
    // Segments [s, t) for s = t-1 down to 0, with running statistics.
    double m = 0.0, ss = 0.0;
    for (size_t s = t; s-- > 0;) {
      const double len = static_cast<double>(t - s);
      const double d = x[s] - m;
      m += d / len;
      ss += d * (x[s] - m);
      const double kn = o.prior_k + len, an = o.prior_a + 0.5 * len;
      const double dm = m - o.prior_m;
      const double bn = o.prior_b + 0.5 * ss + o.prior_k * len * dm * dm / (2.0 * kn);
      const double loglik = base + std::lgamma(an) - an * std::log(bn) - 0.5 * std::log(kn) - 0.5 * len * kLog2Pi;
      const double logprior = (len - 1.0) * log_1h + (t == n ? 0.0 : log_h);
      const double v = best[s] + loglik + logprior;
      if (v > best[t]) {
        best[t] = v;
        from[t] = s;
      }
    }
  }
  for (size_t t = n; t > 0;) {
    const size_t s = from[t];
    if (s > 0) out.push_back(index[s]);
    t = s;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::vector<int64_t>> PeregrineChangePoints(absl::Span<const double> samples,
                                                           const FailSlowDetectorOptions& options) {
  absl::StatusOr<FailSlowDetector> d = FailSlowDetector::Create(options);
  if (!d.ok()) return d.status();
  std::vector<double> x;
  std::vector<int64_t> index;
  Finite(samples, x, index);
  std::vector<int64_t> out;
  for (double v : x) {
    for (const FailSlowEvent& e : d->Update(v).events) {
      if (e.index >= 0 && e.index < static_cast<int64_t>(index.size())) {
        out.push_back(index[static_cast<size_t>(e.index)]);
      }
    }
  }
  return out;
}

absl::StatusOr<ChangePointScore> ScoreChangePoints(const ChangePointAnnotations& annotations,
                                                   absl::Span<const int64_t> predictions,
                                                   int64_t n_obs) {
  absl::StatusOr<ChangePointF1> f = ChangePointFMeasure(annotations, predictions, n_obs);
  if (!f.ok()) return f.status();
  absl::StatusOr<double> c = ChangePointCovering(annotations, predictions, n_obs);
  if (!c.ok()) return c.status();
  return ChangePointScore{f->f1, f->precision, f->recall, *c};
}

}  // namespace peregrine
