#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "diagnosis/change_point.h"
#include "diagnosis/change_point_eval.h"

namespace peregrine {
namespace {

// base * (1 + slope * i) * factor on [from, n), with Gaussian relative noise.
std::vector<double> Trend(int n, double base, double slope, double noise, int from, double factor,
                          uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0.0, noise);
  std::vector<double> x;
  for (int i = 0; i < n; ++i) {
    const double level = base * (1.0 + slope * i) * (i >= from ? factor : 1.0);
    x.push_back(level * (1.0 + g(rng)));
  }
  return x;
}

TEST_CASE("A steady trend is not a chain of level shifts", "[unit]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    // +1% per sample for 200 samples: the level triples.
    const std::vector<double> x = Trend(200, 100.0, 0.01, 0.01, 200, 1.0, seed);
    absl::StatusOr<std::vector<FailSlowEvent>> events = DetectFailSlows(x);
    REQUIRE(events.ok());
    CHECK(events->empty());
    // Without the drift check, the level check alone reports a chain.
    FailSlowDetectorOptions level_only;
    level_only.trend_min_samples = 0;
    events = DetectFailSlows(x, level_only);
    REQUIRE(events.ok());
    CHECK(events->size() >= 3);
  }
}

TEST_CASE("A level shift on top of a trend is still reported where it happens", "[unit]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    const std::vector<double> x = Trend(300, 100.0, 0.002, 0.01, 150, 1.3, seed);
    absl::StatusOr<std::vector<FailSlowEvent>> events = DetectFailSlows(x);
    REQUIRE(events.ok());
    REQUIRE(events->size() == 1);
    CHECK(std::llabs((*events)[0].index - 150) <= 2);
    CHECK((*events)[0].kind == FailSlowEventKind::kSlowdownStart);
  }
}

TEST_CASE("A bump inside the before window does not pass for a trend", "[unit]") {
  // Flat at 100, a sub-threshold 8% bump on [300, 450), flat again, then a 13% slowdown at
  // 600: the resistant line ignores the bump, so the slowdown is verified.
  std::mt19937 rng(5);
  std::normal_distribution<double> g(0.0, 0.005);
  std::vector<double> x;
  for (int i = 0; i < 800; ++i) {
    const double level = i >= 600 ? 113.0 : (i >= 300 && i < 450 ? 108.0 : 100.0);
    x.push_back(level * (1.0 + g(rng)));
  }
  FailSlowDetectorOptions options;
  absl::StatusOr<std::vector<FailSlowEvent>> events = DetectFailSlows(x, options);
  REQUIRE(events.ok());
  bool found = false;
  for (const FailSlowEvent& e : *events) found |= std::llabs(e.index - 600) <= 2;
  CHECK(found);
}

TEST_CASE("Drift options out of range are refused by name", "[unit]") {
  FailSlowDetectorOptions o;
  o.trend_min_samples = 4;
  absl::StatusOr<FailSlowDetector> d = FailSlowDetector::Create(o);
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().message() == "FailSlowDetectorOptions.trend_min_samples out of range: 4");
  o = {};
  o.trend_window = 5;
  d = FailSlowDetector::Create(o);
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().message() == "FailSlowDetectorOptions.trend_window out of range: 5");
  o = {};
  o.trend_min_t = -1;
  CHECK_FALSE(FailSlowDetector::Create(o).ok());
  o = {};
  o.trend_min_rise = std::nan("");
  CHECK_FALSE(FailSlowDetector::Create(o).ok());
  o = {};
  o.trend_min_samples = 0;  // off
  CHECK(FailSlowDetector::Create(o).ok());
}

TEST_CASE("The default BOCPD baseline finds a clear step and nothing on a flat series", "[unit]") {
  std::mt19937 rng(3);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> flat, step;
  for (int i = 0; i < 200; ++i) {
    flat.push_back(10.0 + g(rng));
    step.push_back((i >= 120 ? 20.0 : 10.0) + g(rng));
  }
  absl::StatusOr<std::vector<int64_t>> cps = GaussianBocpdChangePoints(flat);
  REQUIRE(cps.ok());
  CHECK(cps->empty());
  cps = GaussianBocpdChangePoints(step);
  REQUIRE(cps.ok());
  CHECK(*cps == std::vector<int64_t>{120});
  // Missing values are skipped and locations keep the original indexes.
  step.insert(step.begin() + 50, std::nan(""));
  cps = GaussianBocpdChangePoints(step);
  REQUIRE(cps.ok());
  CHECK(*cps == std::vector<int64_t>{121});
  GaussianBocpdOptions bad;
  bad.lambda = 1.0;
  cps = GaussianBocpdChangePoints(step, bad);
  REQUIRE_FALSE(cps.ok());
  CHECK(cps.status().message() == "GaussianBocpdOptions.lambda out of range: 1");
}

TEST_CASE("PeregrineChangePoints maps indexes past missing values", "[unit]") {
  std::vector<double> x(300, 100.0);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i >= 150 ? 150.0 : 100.0) * (1.0 + 0.001 * (i % 7));
  x.insert(x.begin() + 10, std::nan(""));
  absl::StatusOr<std::vector<int64_t>> cps = PeregrineChangePoints(x);
  REQUIRE(cps.ok());
  REQUIRE(cps->size() == 1);
  CHECK(std::llabs((*cps)[0] - 151) <= 1);
}

}  // namespace
}  // namespace peregrine
