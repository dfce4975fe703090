// StandbyPoolSize: how many warm standby machines a TrainingJob keeps (ByteRobust
// section 6.2: "the number of warm standbys is the P99 of a binomial model of
// concurrent machine failures").
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
// meaning). The cost is
// O(sqrt(n p (1 - p)) + 1) terms: n = 100,000 with p = 0.5 takes about 4,000.
//
// Pure functions: no I/O, clocks or state; thread-safe. Depends on Abseil only.
#ifndef PEREGRINE_CONTROLLER_CORE_STANDBY_POOL_SIZE_H_
#define PEREGRINE_CONTROLLER_CORE_STANDBY_POOL_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace peregrine {

// The probability that one machine with daily failure rate `daily_failure_rate`
// (in [0, 1]) fails within `horizon_hours` (>= 0): 1 - (1 - r)^(h / 24).
// Fails with kInvalidArgument naming the argument when one is out of range or NaN.
absl::StatusOr<double> FailureProbabilityOverHorizon(double daily_failure_rate,
                                                     double horizon_hours);

// The smallest k in [0, trials] with P(X <= k) >= percentile for
// X ~ Binomial(trials, p). trials in [0, 2^31 - 1], p in [0, 1], percentile in
// [1e-12, 1 - 1e-12] (the range the tail truncation is exact for). Fails with
// kInvalidArgument naming the argument otherwise.
absl::StatusOr<int64_t> BinomialQuantile(int64_t trials, double p, double percentile);

struct StandbyPoolInputs {
  int64_t machines = 0;                  // active machines of the job, >= 0
  double daily_failure_rate = 0.01;      // per machine per day, [0, 1]
  double replenish_horizon_hours = 1.0;  // >= 0
  double percentile = 0.99;              // see BinomialQuantile
  int64_t min = 0;                       // >= 0
  int64_t max = 64;                      // >= min
};

// clamp(BinomialQuantile(machines, FailureProbabilityOverHorizon(...), percentile),
// min, max). Fails with kInvalidArgument naming the field (with the CRD's camelCase
// name: standby.dailyFailureRate, standby.replenishHorizonHours, standby.percentile,
// standby.min, standby.max, machines) when an input is out of range.
absl::StatusOr<int64_t> StandbyPoolSize(const StandbyPoolInputs& inputs);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_STANDBY_POOL_SIZE_H_
