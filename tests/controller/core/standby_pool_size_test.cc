// Tests for controller/standby_pool_size.h.
//
// Expected values come from three independent sources:
//  1. an exact integer enumerator in this file (dyadic p, so every pmf term is an
//     integer over 2^(b n); the percentile's double value is compared exactly too);
//  2. a table computed with exact rational arithmetic in Python (fractions.Fraction of
//     the exact double p and percentile, summing C(n, k) a^k (B - a)^(n - k) until the
//     sum reaches percentile * B^n); the script is quoted next to the table;
//  3. a direct long-double log-space summation from k = 0 (lgamma pmf), used on a
//     seeded grid where the exact methods would be too slow.
#include "controller/core/standby_pool_size.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace peregrine {
namespace {

using u128 = unsigned __int128;

// Exact quantile for p = a / 2^b: the smallest k with
//   sum_{j <= k} C(n, j) a^j (2^b - a)^(n - j) >= percentile * 2^(b n),
// where percentile = m / 2^s exactly (its double value). Needs b*n + s <= 127.
int64_t ExactDyadicQuantile(int n, uint64_t a, int b, double percentile) {
  int exponent = 0;
  const double mantissa = std::frexp(percentile, &exponent);  // percentile = mantissa * 2^exponent
  const uint64_t m = static_cast<uint64_t>(std::ldexp(mantissa, 53));  // exact
  const int s = 53 - exponent;  // percentile = m / 2^s
  REQUIRE(b * n + s <= 127);
  const uint64_t c = (uint64_t{1} << b) - a;
  const u128 rhs = static_cast<u128>(m) << (b * n);
  u128 sum = 0;
  uint64_t binom = 1;  // C(n, j), exact for n <= 62
  for (int j = 0; j <= n; ++j) {
    u128 term = binom;
    for (int i = 0; i < j; ++i) term *= a;
    for (int i = 0; i < n - j; ++i) term *= c;
    sum += term;
    if ((sum << s) >= rhs) return j;
    binom = binom * static_cast<uint64_t>(n - j) / static_cast<uint64_t>(j + 1);
  }
  return n;
}

// P(X <= k) for X ~ Binomial(n, p), summed directly from 0 in long double.
std::vector<long double> DirectCdf(int64_t n, double p) {
  std::vector<long double> cdf(static_cast<size_t>(n) + 1);
  const long double lp = std::log(static_cast<long double>(p));
  const long double lq = std::log1p(-static_cast<long double>(p));
  const long double lnf = std::lgamma(static_cast<long double>(n) + 1);
  long double sum = 0;
  for (int64_t k = 0; k <= n; ++k) {
    const long double lpmf = lnf - std::lgamma(static_cast<long double>(k) + 1) -
                             std::lgamma(static_cast<long double>(n - k) + 1) + k * lp + (n - k) * lq;
    sum += std::exp(lpmf);
    cdf[static_cast<size_t>(k)] = sum;
  }
  return cdf;
}

const std::vector<double> kPercentiles = {1e-4, 0.01, 0.1,  0.25, 0.3,   0.5,   0.7,
                                          0.75, 0.9,  0.95, 0.99, 0.999, 0.9999};

TEST_CASE("BinomialQuantile matches exact integer arithmetic on small dyadic cases", "[unit]") {
  struct Family {
    int b;
    std::vector<uint64_t> numerators;
    int max_n;
  };
  // b * n + s <= 127 with s <= 67 (percentile >= 1e-4): b * n <= 60.
  const std::vector<Family> families = {
      {1, {1}, 60}, {2, {1, 3}, 30}, {3, {1, 3, 5, 7}, 20}, {5, {1, 3, 31}, 12}, {10, {1, 1023}, 6}};
  int checked = 0;
  for (const Family& f : families) {
    for (uint64_t a : f.numerators) {
      const double p = std::ldexp(static_cast<double>(a), -f.b);
      for (int n = 0; n <= f.max_n; ++n) {
        for (double q : kPercentiles) {
          INFO("n=" << n << " p=" << a << "/2^" << f.b << " percentile=" << q);
          absl::StatusOr<int64_t> k = BinomialQuantile(n, p, q);
          REQUIRE(k.ok());
          CHECK(*k == ExactDyadicQuantile(n, a, f.b, q));
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 3000);
}

TEST_CASE("BinomialQuantile matches exact rational reference values", "[unit]") {
  // Computed with exact rational arithmetic (Python 3, fractions.Fraction of the exact
  // double values of p and the percentile):
  //   P, Q = Fraction(p), Fraction(q); a, B = P.numerator, P.denominator; c = B - a
  //   s, binom, apow, cpow = 0, 1, 1, c**n
  //   for k in range(n + 1):
  //     s += binom * apow * cpow
  //     if s >= Q * B**n: return k
  //     apow *= a; cpow //= c; binom = binom * (n - k) // (k + 1)
  // These agree with scipy.stats.binom.ppf(q, n, p), which defines the same quantile
  // (smallest k with cdf >= q). The n = 100,000, p = 0.5 rows also match the normal
  // approximation with continuity correction, e.g. 50000 + 2.3263 * 158.11 - 0.5 -> 50368.
  struct Row {
    int64_t n;
    double p;
    double q;
    int64_t k;
  };
  const std::vector<Row> rows = {
      {100000, 1e-6, 0.5, 0},      {100000, 1e-6, 0.9, 0},      {100000, 1e-6, 0.99, 1},
      {100000, 1e-6, 0.999, 2},    {100000, 1e-6, 0.9999, 3},
      {100000, 0.5, 0.5, 50000},   {100000, 0.5, 0.9, 50203},   {100000, 0.5, 0.99, 50368},
      {100000, 0.5, 0.999, 50489}, {100000, 0.5, 0.9999, 50588},
      {12500, 1e-3, 0.5, 12},      {12500, 1e-3, 0.9, 17},      {12500, 1e-3, 0.99, 21},
      {12500, 1e-3, 0.999, 25},    {12500, 1e-3, 0.9999, 28},
      {1000, 0.01, 0.5, 10},       {1000, 0.01, 0.9, 14},       {1000, 0.01, 0.99, 18},
      {1000, 0.01, 0.999, 21},     {1000, 0.01, 0.9999, 24},
      {100, 0.1, 0.5, 10},         {100, 0.1, 0.9, 14},         {100, 0.1, 0.99, 18},
      {100, 0.1, 0.999, 20},       {100, 0.1, 0.9999, 23},
      {4, 8.4e-4, 0.99, 0},        {4, 8.4e-4, 0.999, 1},       {4, 8.4e-4, 0.9999, 1},
  };
  for (const Row& r : rows) {
    INFO("n=" << r.n << " p=" << r.p << " percentile=" << r.q);
    absl::StatusOr<int64_t> k = BinomialQuantile(r.n, r.p, r.q);
    REQUIRE(k.ok());
    CHECK(*k == r.k);
  }
}

TEST_CASE("BinomialQuantile agrees with direct log-space summation on a seeded grid", "[unit]") {
  std::mt19937_64 rng(20240611);
  std::uniform_int_distribution<int64_t> n_dist(1, 3000);
  std::uniform_real_distribution<double> log_p_dist(std::log(1e-7), std::log(0.999));
  std::uniform_int_distribution<size_t> q_index(0, kPercentiles.size() - 1);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = n_dist(rng);
    const double p = std::exp(log_p_dist(rng));
    const std::vector<long double> cdf = DirectCdf(n, p);
    for (int rep = 0; rep < 4; ++rep) {
      const double q = kPercentiles[q_index(rng)];
      INFO("n=" << n << " p=" << p << " percentile=" << q);
      absl::StatusOr<int64_t> k = BinomialQuantile(n, p, q);
      REQUIRE(k.ok());
      REQUIRE(*k >= 0);
      REQUIRE(*k <= n);
      // k is the quantile: its cdf reaches q and the one before does not (up to the
      // reference's own rounding, far below any gap that matters here).
      CHECK(cdf[static_cast<size_t>(*k)] >= q - 1e-12L);
      if (*k > 0) CHECK(cdf[static_cast<size_t>(*k - 1)] < q + 1e-12L);
    }
  }
}

TEST_CASE("BinomialQuantile is monotone in machines, p and percentile", "[unit]") {
  const std::vector<double> ps = {1e-9, 1e-6, 1e-4, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.9};
  const std::vector<int64_t> ns = {1, 2, 5, 10, 100, 1000, 12500, 100000};
  for (double q : kPercentiles) {
    for (double p : ps) {
      int64_t prev = 0;
      for (int64_t n : ns) {
        const int64_t k = BinomialQuantile(n, p, q).value();
        INFO("n=" << n << " p=" << p << " percentile=" << q);
        CHECK(k >= prev);
        prev = k;
      }
    }
    for (int64_t n : ns) {
      int64_t prev = 0;
      for (double p : ps) {
        const int64_t k = BinomialQuantile(n, p, q).value();
        INFO("n=" << n << " p=" << p << " percentile=" << q);
        CHECK(k >= prev);
        prev = k;
      }
    }
  }
  for (int64_t n : ns) {
    for (double p : ps) {
      int64_t prev = 0;
      for (double q : kPercentiles) {
        const int64_t k = BinomialQuantile(n, p, q).value();
        INFO("n=" << n << " p=" << p << " percentile=" << q);
        CHECK(k >= prev);
        prev = k;
      }
    }
  }
}

TEST_CASE("BinomialQuantile handles the extremes", "[unit]") {
  CHECK(BinomialQuantile(0, 0.5, 0.99).value() == 0);
  CHECK(BinomialQuantile(100000, 0.0, 0.9999).value() == 0);
  CHECK(BinomialQuantile(100000, 1.0, 0.5).value() == 100000);
  CHECK(BinomialQuantile(1, 0.5, 0.5).value() == 0);  // P(X <= 0) = 0.5 exactly
  CHECK(BinomialQuantile(2, 0.5, 0.75).value() == 1);  // P(X <= 1) = 0.75 exactly
  // p so small that every term but the first is negligible.
  CHECK(BinomialQuantile(2147483647, 1e-300, 0.9999).value() == 0);
  // p so close to 1 that X == n except with probability ~1e-9.
  CHECK(BinomialQuantile(1000, 1.0 - 1e-12, 0.99).value() == 1000);
  // The largest n: normal approximation is exact to O(1) here.
  // z(0.99) = 2.3263478740408408 (standard normal quantile).
  const int64_t n = 2147483647;
  const int64_t k = BinomialQuantile(n, 0.5, 0.99).value();
  const double approx = n * 0.5 + 2.3263478740408408 * std::sqrt(n * 0.25);
  CHECK(std::abs(static_cast<double>(k) - approx) <= 2.0);
}

TEST_CASE("BinomialQuantile rejects out-of-range arguments with the field named", "[unit]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto message = [](const absl::StatusOr<int64_t>& s) { return std::string(s.status().message()); };
  CHECK_THAT(message(BinomialQuantile(-1, 0.5, 0.99)), Catch::Contains("machines"));
  CHECK_THAT(message(BinomialQuantile(int64_t{1} << 31, 0.5, 0.99)), Catch::Contains("machines"));
  CHECK_THAT(message(BinomialQuantile(10, -0.1, 0.99)), Catch::Contains("p must be"));
  CHECK_THAT(message(BinomialQuantile(10, nan, 0.99)), Catch::Contains("p must be"));
  CHECK_THAT(message(BinomialQuantile(10, 0.1, 0.0)), Catch::Contains("standby.percentile"));
  CHECK_THAT(message(BinomialQuantile(10, 0.1, 1.0)), Catch::Contains("standby.percentile"));
  CHECK_THAT(message(BinomialQuantile(10, 0.1, nan)), Catch::Contains("standby.percentile"));
  CHECK(BinomialQuantile(10, 0.1, 0.0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("FailureProbabilityOverHorizon converts a daily rate to the horizon", "[unit]") {
  CHECK(FailureProbabilityOverHorizon(0.02, 24).value() == Approx(0.02).epsilon(1e-15));
  CHECK(FailureProbabilityOverHorizon(0.02, 48).value() == Approx(1 - 0.98 * 0.98).epsilon(1e-14));
  // 1 - 0.98 ** (1 / 24) = 8.414252746e-4 (Python, direct power).
  CHECK(FailureProbabilityOverHorizon(0.02, 1).value() == Approx(8.414252746e-4).epsilon(1e-9));
  // Tiny rates keep full relative precision: p ~= r * h / 24 (next term is r^2-small).
  CHECK(FailureProbabilityOverHorizon(1e-12, 1).value() == Approx(1e-12 / 24).epsilon(1e-10));
  CHECK(FailureProbabilityOverHorizon(1e-300, 24).value() == Approx(1e-300).epsilon(1e-12));
  CHECK(FailureProbabilityOverHorizon(0.0, 5).value() == 0.0);
  CHECK(FailureProbabilityOverHorizon(1.0, 5).value() == 1.0);
  CHECK(FailureProbabilityOverHorizon(1.0, 0).value() == 0.0);
  CHECK(FailureProbabilityOverHorizon(0.5, 0).value() == 0.0);
  // Longer horizons never lower p.
  double prev = 0;
  for (double h : {0.1, 0.5, 1.0, 6.0, 24.0, 240.0}) {
    const double p = FailureProbabilityOverHorizon(0.01, h).value();
    CHECK(p > prev);
    prev = p;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad_rate : {-0.01, 1.01, nan}) {
    absl::StatusOr<double> p = FailureProbabilityOverHorizon(bad_rate, 1);
    CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(p.status().message()), Catch::Contains("standby.dailyFailureRate"));
  }
  for (double bad_hours : {-1.0, inf, nan}) {
    absl::StatusOr<double> p = FailureProbabilityOverHorizon(0.01, bad_hours);
    CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(p.status().message()), Catch::Contains("standby.replenishHorizonHours"));
  }
}

TEST_CASE("StandbyPoolSize clamps the binomial quantile to [min, max]", "[unit]") {
  // examples/local-demo.yaml: 4 machines at 2%/day, 1 h horizon: p = 8.4e-4,
  // P(X = 0) = (1 - p)^4 = 0.99664 >= 0.99 so k = 0, raised to min = 1.
  StandbyPoolInputs demo{.machines = 4, .daily_failure_rate = 0.02, .replenish_horizon_hours = 1,
                         .percentile = 0.99, .min = 1, .max = 4};
  CHECK(StandbyPoolSize(demo).value() == 1);
  demo.min = 0;
  CHECK(StandbyPoolSize(demo).value() == 0);

  // 12,500 machines (100,000 GPUs) at 1%/day, 1 h horizon: p = 4.1867632449262514e-4;
  // 1,250 machines at 5%/day, 6 h horizon: p = 0.012741455098566194. Quantiles by the
  // exact rational method above: 11 (P99), 16 (P99.99) and 26 (P99).
  StandbyPoolInputs large{.machines = 12500, .daily_failure_rate = 0.01,
                          .replenish_horizon_hours = 1, .percentile = 0.99, .min = 0, .max = 64};
  CHECK(StandbyPoolSize(large).value() == 11);
  large.percentile = 0.9999;
  CHECK(StandbyPoolSize(large).value() == 16);
  large.max = 12;
  CHECK(StandbyPoolSize(large).value() == 12);
  StandbyPoolInputs medium{.machines = 1250, .daily_failure_rate = 0.05,
                           .replenish_horizon_hours = 6, .percentile = 0.99, .min = 0, .max = 64};
  CHECK(StandbyPoolSize(medium).value() == 26);

  StandbyPoolInputs capped{.machines = 100000, .daily_failure_rate = 0.5,
                           .replenish_horizon_hours = 24, .percentile = 0.99, .min = 0, .max = 64};
  CHECK(StandbyPoolSize(capped).value() == 64);

  StandbyPoolInputs bad = demo;
  bad.min = 5;
  bad.max = 4;
  CHECK_THAT(std::string(StandbyPoolSize(bad).status().message()), Catch::Contains("standby.max"));
  bad = demo;
  bad.min = -1;
  CHECK_THAT(std::string(StandbyPoolSize(bad).status().message()), Catch::Contains("standby.min"));
  bad = demo;
  bad.machines = -3;
  CHECK_THAT(std::string(StandbyPoolSize(bad).status().message()), Catch::Contains("machines"));
  bad = demo;
  bad.percentile = 1.0;
  CHECK_THAT(std::string(StandbyPoolSize(bad).status().message()), Catch::Contains("standby.percentile"));
  bad = demo;
  bad.daily_failure_rate = 2;
  CHECK_THAT(std::string(StandbyPoolSize(bad).status().message()),
             Catch::Contains("standby.dailyFailureRate"));
}

}  // namespace
}  // namespace peregrine
