#include "diagnosis/change_point.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

namespace peregrine {
namespace {

// Iteration times at `base` with uniform relative jitter +-jitter, multiplied by `factor`
// on [from, to).
std::vector<double> Steps(int n, double base, double jitter, int from, int to, double factor,
                          uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-jitter, jitter);
  std::vector<double> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double level = (i >= from && i < to) ? base * factor : base;
    x[static_cast<size_t>(i)] = level * (1.0 + u(rng));
  }
  return x;
}

TEST_CASE("FailSlowDetector reports start and end of slowdowns of 10%, 20%, 50%", "[unit]") {
  // A slowdown of exactly 10% sits on Falcon's 10% threshold, where the noise of the
  // means puts it on either side; that row verifies with an 8% threshold.
  struct Case {
    double severity;
    double jitter;
    double threshold;
  };
  for (const Case c : {Case{0.10, 0.01, 0.08}, Case{0.20, 0.02, 0.10}, Case{0.50, 0.05, 0.10},
                       Case{0.20, 0.05, 0.10}}) {
    INFO("severity " << c.severity << " jitter " << c.jitter);
    const auto x = Steps(1000, 120.0, c.jitter, 400, 700, 1.0 + c.severity, 17);
    FailSlowDetectorOptions options;
    options.verify_threshold = c.threshold;
    auto events = DetectFailSlows(x, options);
    REQUIRE(events.ok());
    REQUIRE(events->size() == 2);
    const FailSlowEvent& start = (*events)[0];
    const FailSlowEvent& end = (*events)[1];
    CHECK(start.kind == FailSlowEventKind::kSlowdownStart);
    CHECK(std::llabs(start.index - 400) <= 2);
    CHECK(start.confirmed_at >= start.index);
    CHECK(start.confirmed_at - start.index <= 40);
    CHECK(start.severity == Approx(c.severity).margin(0.03));
    CHECK(start.mean_before == Approx(120.0).epsilon(0.02));
    CHECK(start.posterior >= 0.9);
    CHECK(end.kind == FailSlowEventKind::kSlowdownEnd);
    CHECK(std::llabs(end.index - 700) <= 2);
    CHECK(end.relative_change < 0.0);
    CHECK(end.severity == Approx(c.severity).margin(0.03));
  }
}

TEST_CASE("FailSlowDetector stays silent on +-5% uniform jitter over 10,000 samples", "[unit]") {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto x = Steps(10000, 250.0, 0.05, 0, 0, 1.0, seed);
    auto detector = FailSlowDetector::Create();
    REQUIRE(detector.ok());
    for (double v : x) {
      const FailSlowUpdate u = detector->Update(v);
      CHECK(u.events.empty());
    }
    CHECK(detector->stats().verified == 0);
    CHECK_FALSE(detector->in_slowdown());
    CHECK(detector->bocd().max_active_run_lengths_seen() <= 256);
  }
}

TEST_CASE("Verification rejects sub-threshold shifts that BOCD reports", "[unit]") {
  // A 5% step with 0.5% jitter is an obvious change point for BOCD, but not a fail-slow.
  const auto x = Steps(1200, 80.0, 0.005, 500, 1200, 1.05, 4);
  auto cps = DetectChangePoints(x);
  REQUIRE(cps.ok());
  REQUIRE_FALSE(cps->empty());
  bool near = false;
  for (const auto& c : *cps) near = near || std::llabs(c.index - 500) <= 2;
  CHECK(near);
  auto events = DetectFailSlows(x);
  REQUIRE(events.ok());
  CHECK(events->empty());
}

TEST_CASE("A single slow iteration is not a fail-slow", "[unit]") {
  auto x = Steps(2000, 100.0, 0.02, 0, 0, 1.0, 8);
  x[700] *= 2.5;   // checkpoint save
  x[1400] *= 1.6;  // GC pause
  auto events = DetectFailSlows(x);
  REQUIRE(events.ok());
  CHECK(events->empty());
}

TEST_CASE("A speed-up while healthy is a level shift, not a fail-slow", "[unit]") {
  const auto x = Steps(800, 100.0, 0.01, 300, 800, 0.8, 6);
  auto events = DetectFailSlows(x);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 1);
  CHECK((*events)[0].kind == FailSlowEventKind::kLevelShift);
  CHECK((*events)[0].relative_change == Approx(-0.2).margin(0.02));
}

TEST_CASE("A severity change inside a slowdown is a level shift, then the end", "[unit]") {
  auto x = Steps(1200, 100.0, 0.01, 300, 900, 1.3, 12);
  for (int i = 600; i < 900; ++i) x[static_cast<size_t>(i)] *= 2.0;  // 1.3x -> 2.6x
  auto events = DetectFailSlows(x);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 3);
  CHECK((*events)[0].kind == FailSlowEventKind::kSlowdownStart);
  CHECK((*events)[1].kind == FailSlowEventKind::kLevelShift);
  CHECK((*events)[1].severity == Approx(1.6).margin(0.05));
  CHECK((*events)[2].kind == FailSlowEventKind::kSlowdownEnd);
  CHECK(std::llabs((*events)[2].index - 900) <= 2);
}

TEST_CASE("BOCD pruning keeps the number of run lengths bounded", "[unit]") {
  const auto x = Steps(3000, 100.0, 0.03, 1000, 2000, 1.5, 21);
  BocdOptions unpruned;
  unpruned.prune_epsilon = 0.0;
  unpruned.max_run_lengths = 1 << 20;
  auto full = BocdChangePointDetector::Create(unpruned);
  REQUIRE(full.ok());
  BocdOptions capped;
  capped.prune_epsilon = 0.0;
  capped.max_run_lengths = 16;
  auto small = BocdChangePointDetector::Create(capped);
  REQUIRE(small.ok());
  auto pruned = BocdChangePointDetector::Create({});
  REQUIRE(pruned.ok());
  std::vector<ChangePointCandidate> from_small, from_pruned;
  for (double v : x) {
    full->Update(v);
    for (auto& c : small->Update(v)) from_small.push_back(c);
    for (auto& c : pruned->Update(v)) from_pruned.push_back(c);
    CHECK(small->active_run_lengths() <= 16);
  }
  CHECK(full->active_run_lengths() == 3000);  // unpruned: one per sample
  CHECK(pruned->max_active_run_lengths_seen() < 200);
  // The posterior stays normalised.
  double sum = 0.0;
  for (auto [start, p] : pruned->RunStartPosterior()) sum += p;
  CHECK(sum == Approx(1.0));
  // Pruned and capped detectors still find both changes.
  for (const auto* found : {&from_small, &from_pruned}) {
    bool up = false, down = false;
    for (const auto& c : *found) {
      up = up || std::llabs(c.index - 1000) <= 2;
      down = down || std::llabs(c.index - 2000) <= 2;
    }
    CHECK(up);
    CHECK(down);
  }
}

TEST_CASE("BOCD calibrates its scale or uses the given one", "[unit]") {
  const auto x = Steps(600, 40.0, 0.02, 300, 600, 1.25, 2);
  BocdOptions given;
  given.level = 40.0;
  given.scale = 40.0 * 0.02 / std::sqrt(3.0);
  for (const BocdOptions& o : {BocdOptions{}, given}) {
    auto d = BocdChangePointDetector::Create(o);
    REQUIRE(d.ok());
    std::vector<ChangePointCandidate> found;
    for (double v : x) {
      for (auto& c : d->Update(v)) found.push_back(c);
    }
    CHECK(d->calibrated());
    CHECK(d->scale() > 0.0);
    REQUIRE(found.size() == 1);
    CHECK(std::llabs(found[0].index - 300) <= 1);
  }
}

TEST_CASE("Detectors ignore non-finite samples and validate options", "[unit]") {
  auto d = FailSlowDetector::Create();
  REQUIRE(d.ok());
  CHECK(d->Update(std::nan("")).events.empty());
  CHECK(d->Update(INFINITY).events.empty());
  CHECK(d->bocd().samples() == 0);
  BocdOptions bad;
  bad.hazard = 0.0;
  CHECK(BocdChangePointDetector::Create(bad).status().code() ==
        absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.alpha0 = -1.0;
  CHECK(BocdChangePointDetector::Create(bad).status().code() ==
        absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.max_run_lengths = 1;
  CHECK(BocdChangePointDetector::Create(bad).status().code() ==
        absl::StatusCode::kInvalidArgument);
  FailSlowDetectorOptions fbad;
  fbad.verify_window = 2;
  CHECK(FailSlowDetector::Create(fbad).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine
