// StandbyPoolSize: how many warm standby machines a TrainingJob keeps (the P99 of a
// binomial model of concurrent machine failures).
//
// Machines fail independently; one with daily failure rate r fails within the replenish
// horizon h with p = 1 - (1 - r)^(h / 24). The pool size is the smallest k with
// P(X <= k) >= percentile for X ~ Binomial(machines, p), clamped to [min, max]. Every
// function fails with kInvalidArgument naming the argument out of range. The numerics
// (exact for tiny rates and percentiles near 1) are described in standby_pool_size.cc.
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
