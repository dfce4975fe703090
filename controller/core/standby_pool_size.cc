#include "controller/core/standby_pool_size.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

// The model and its numerics (ByteRobust section 6.2: "the number of warm standbys is the
// P99 of a binomial model of concurrent machine failures").
//
// Model. Machines fail independently. A machine that fails at daily rate r survives
// h hours with probability (1 - r)^(h / 24), so it fails within the replenish horizon
// h (the time to bring a fresh standby up) with probability
//
//     p = 1 - (1 - r)^(h / 24) = -expm1((h / 24) * log1p(-r)),
//
// computed with log1p/expm1 so tiny rates keep full precision. The number of machines
// that fail before the pool can be replenished is X ~ Binomial(machines, p), and the
// pool size is k = the smallest k with P(X <= k) >= percentile, clamped to [min, max].
//
// Numerics. BinomialQuantile never forms a binomial coefficient or a tiny power: it
// starts at the mode, where the pmf is largest, and walks outwards with the pmf
// ratio recurrence, in units of the mode's pmf (so no term overflows or underflows
// before it is negligible), stopping where the rest of the tail is below 1e-30 of the
// mass. The tail on the side of the answer is summed from the far end inwards, so
// percentiles near 1 are decided without cancellation. Sums are in long double;
// P(X <= k) within 1e-15 of the percentile counts as reaching it (exact ties such as
// P(X <= 6) = 1/2 for Binomial(13, 1/2) then resolve to the smaller k, as exact
// arithmetic does; the percentile is a double, so finer distinctions carry no
// meaning). The cost is O(sqrt(n p (1 - p)) + 1) terms: n = 100,000 with p = 0.5 takes
// about 4,000.

namespace peregrine {
namespace {

// Terms are dropped once everything beyond them is below this fraction of the mass
// summed so far; far below the smallest tail (1e-12) a percentile may ask for.
constexpr double kNegligibleTail = 1e-30;
constexpr double kMinPercentile = 1e-12;
// P(X <= k) within this fraction of the total mass of the percentile counts as
// reaching it. The terms carry ~1e-16 relative rounding error (long double, a few
// thousand recurrence steps), so without it an exact tie such as P(X <= 6) = 0.5 for
// Binomial(13, 1/2) could land on either side. The percentile itself is a double
// (0.99 is 0.99 only to 1.1e-16), so nothing meaningful is decided below this.
constexpr long double kTieTolerance = 1e-15L;
constexpr double kMaxPercentile = 1.0 - 1e-12;

bool InClosedRange(double x, double lo, double hi) { return x >= lo && x <= hi; }  // false for NaN

}  // namespace

absl::StatusOr<double> FailureProbabilityOverHorizon(double daily_failure_rate,
                                                     double horizon_hours) {
  if (!InClosedRange(daily_failure_rate, 0.0, 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "standby.dailyFailureRate must be in [0, 1], got %g", daily_failure_rate));
  }
  if (!(horizon_hours >= 0.0) || std::isinf(horizon_hours)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "standby.replenishHorizonHours must be a finite number >= 0, got %g", horizon_hours));
  }
  // Zero time or a zero rate: no failure (this also avoids 0 * log(0) = NaN for r = 1).
  if (horizon_hours == 0.0 || daily_failure_rate == 0.0) return 0.0;
  if (daily_failure_rate == 1.0) return 1.0;
  // 1 - (1 - r)^(h/24), without cancellation for small r or small h.
  return -std::expm1((horizon_hours / 24.0) * std::log1p(-daily_failure_rate));
}

absl::StatusOr<int64_t> BinomialQuantile(int64_t trials, double p, double percentile) {
  if (trials < 0 || trials > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("machines must be in [0, 2147483647], got %d", trials));
  }
  if (!InClosedRange(p, 0.0, 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("failure probability p must be in [0, 1], got %g", p));
  }
  if (!InClosedRange(percentile, kMinPercentile, kMaxPercentile)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "standby.percentile must be in [1e-12, 1 - 1e-12], got %.17g", percentile));
  }
  const int64_t n = trials;
  if (n == 0 || p == 0.0) return 0;  // X == 0 surely
  const double q = 1.0 - p;
  if (q == 0.0) return n;  // X == n surely

  // pmf(k + 1) / pmf(k) = (n - k) / (k + 1) * p / q, decreasing in k; the mode is
  // floor((n + 1) p). Terms are in units of pmf(mode), so all lie in (0, 1].
  const long double odds = static_cast<long double>(p) / static_cast<long double>(q);
  const int64_t mode =
      std::clamp<int64_t>(static_cast<int64_t>(std::floor(static_cast<double>(n + 1) * p)), 0, n);
  auto up_ratio = [&](int64_t k) {  // pmf(k + 1) / pmf(k)
    return static_cast<long double>(n - k) / static_cast<long double>(k + 1) * odds;
  };
  auto down_ratio = [&](int64_t k) {  // pmf(k - 1) / pmf(k)
    return static_cast<long double>(k) / static_cast<long double>(n - k + 1) / odds;
  };

  // Right of the mode (mode included).
  std::vector<long double> right = {1.0L};
  long double sum = 1.0L;
  for (int64_t k = mode; k < n; ++k) {
    const long double next = right.back() * up_ratio(k);  // pmf(k + 1)
    // Beyond k + 1 the ratios only shrink, so the tail from k + 1 on is at most
    // next / (1 - r) with r = pmf(k + 2) / pmf(k + 1).
    const long double r = k + 1 < n ? up_ratio(k + 1) : 0.0L;
    if (r < 1.0L && next <= kNegligibleTail * sum * (1.0L - r)) break;
    right.push_back(next);
    sum += next;
  }
  // Left of the mode, stored outward (left[0] = pmf(mode - 1)).
  std::vector<long double> left;
  long double prev = 1.0L;
  for (int64_t k = mode; k > 0; --k) {
    const long double next = prev * down_ratio(k);  // pmf(k - 1)
    const long double r = k - 1 > 0 ? down_ratio(k - 1) : 0.0L;
    if (r < 1.0L && next <= kNegligibleTail * sum * (1.0L - r)) break;
    left.push_back(next);
    sum += next;
    prev = next;
  }
  const int64_t lowest = mode - static_cast<int64_t>(left.size());
  const int64_t highest = mode + static_cast<int64_t>(right.size()) - 1;
  auto term = [&](int64_t k) {
    return k >= mode ? right[static_cast<size_t>(k - mode)]
                     : left[static_cast<size_t>(mode - 1 - k)];
  };

  if (percentile <= 0.5) {
    // Smallest k with P(X <= k) >= percentile, summing the lower tail upward.
    const long double target = percentile * sum - kTieTolerance * sum;
    long double cdf = 0.0L;
    for (int64_t k = lowest; k <= highest; ++k) {
      cdf += term(k);
      if (cdf >= target) return k;
    }
    return highest;
  }
  // P(X <= k) >= percentile  <=>  P(X > k) <= 1 - percentile. P(X > k) shrinks as k
  // grows; sum the upper tail from the far end inward (no cancellation near 1).
  const long double allowed = (1.0L - percentile) * sum + kTieTolerance * sum;
  long double upper = 0.0L;  // P(X > k), in units of pmf(mode)
  int64_t k = highest;
  while (k > lowest) {
    const long double upper_prev = upper + term(k);  // P(X > k - 1)
    if (upper_prev > allowed) break;
    upper = upper_prev;
    --k;
  }
  return k;
}

absl::StatusOr<int64_t> StandbyPoolSize(const StandbyPoolInputs& in) {
  if (in.machines < 0 || in.machines > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("machines must be in [0, 2147483647], got %d", in.machines));
  }
  if (in.min < 0) {
    return absl::InvalidArgumentError(absl::StrFormat("standby.min must be >= 0, got %d", in.min));
  }
  if (in.max < in.min) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "standby.max (%d) must be >= standby.min (%d)", in.max, in.min));
  }
  absl::StatusOr<double> p =
      FailureProbabilityOverHorizon(in.daily_failure_rate, in.replenish_horizon_hours);
  if (!p.ok()) return p.status();
  absl::StatusOr<int64_t> k = BinomialQuantile(in.machines, *p, in.percentile);
  if (!k.ok()) return k.status();
  return std::clamp(*k, in.min, in.max);
}

}  // namespace peregrine
