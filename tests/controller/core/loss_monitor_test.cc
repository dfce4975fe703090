#include "controller/core/loss_monitor.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

namespace peregrine {
namespace {

std::map<int, RankLossObservation> AllRanks(uint64_t step, double loss, double grad, int ranks = 4) {
  std::map<int, RankLossObservation> m;
  for (int r = 0; r < ranks; ++r) m[r] = RankLossObservation{step, loss, grad};
  return m;
}

TEST_CASE("A NaN or Inf loss or grad-norm on any rank is a NaNLoss at once, even before warm-up", "[unit]") {
  LossReference ref;
  auto losses = AllRanks(1, 2.0, 1.0);
  losses[3].loss = std::numeric_limits<double>::quiet_NaN();
  auto v = CheckLosses(losses, 5.0, &ref);
  REQUIRE(v.has_value());
  CHECK(v->kind == IncidentKind::kNaNLoss);
  CHECK(v->ranks == std::vector<int>{3});
  CHECK_THAT(v->signal, Catch::Contains("rank 3 step 1 loss=nan"));
  CHECK(ref.losses.empty());  // not folded in

  losses = AllRanks(1, 2.0, 1.0);
  losses[0].grad_norm = std::numeric_limits<double>::infinity();
  v = CheckLosses(losses, 5.0, &ref);
  REQUIRE(v.has_value());
  CHECK(v->kind == IncidentKind::kNaNLoss);
  CHECK(v->ranks == std::vector<int>{0});
}

TEST_CASE("A loss 5x the running reference is a spike after warm-up, slow drift is not", "[unit]") {
  LossReference ref;
  // A slowly falling loss (as training does) never triggers.
  for (uint64_t step = 1; step <= 40; ++step) {
    const double loss = 3.0 * std::pow(0.97, static_cast<double>(step));
    REQUIRE_FALSE(CheckLosses(AllRanks(step, loss, 0.5), 5.0, &ref).has_value());
  }
  CHECK(ref.losses.size() == kLossWindow);
  CHECK(ref.step == 40);
  const double reference = LossReferenceValue(ref.losses);
  // Just below the factor: no verdict; at the factor: a spike naming the rank.
  auto below = AllRanks(41, reference * 4.9, 0.5);
  CHECK_FALSE(CheckLosses(below, 5.0, &ref).has_value());
  auto spike = AllRanks(42, reference, 0.5);
  spike[2].loss = reference * 5.0;
  auto v = CheckLosses(spike, 5.0, &ref);
  REQUIRE(v.has_value());
  CHECK(v->kind == IncidentKind::kLossSpike);
  CHECK(v->ranks == std::vector<int>{2});
  CHECK(v->step == 42);
  CHECK(ref.step == 41);  // the spiking step was not folded in
}

TEST_CASE("A grad-norm jump is a spike too, a single outlier step barely moves the median reference", "[unit]") {
  LossReference ref;
  for (uint64_t step = 1; step <= 10; ++step) REQUIRE_FALSE(CheckLosses(AllRanks(step, 1.0, 2.0), 5.0, &ref));
  // 4.5x on one step is tolerated and enters the window, but the median stays put.
  REQUIRE_FALSE(CheckLosses(AllRanks(11, 1.0, 9.0), 5.0, &ref));
  CHECK(LossReferenceValue(ref.grad_norms) == 2.0);
  auto v = CheckLosses(AllRanks(12, 1.0, 10.0), 5.0, &ref);
  REQUIRE(v.has_value());
  CHECK(v->kind == IncidentKind::kLossSpike);
  CHECK_THAT(v->signal, Catch::Contains("grad-norm 10"));
}

TEST_CASE("No spike during warm-up, zero (not printed) losses and repeated steps never enter the reference", "[unit]") {
  LossReference ref;
  for (uint64_t step = 1; step < kLossWarmupSteps; ++step) {
    REQUIRE_FALSE(CheckLosses(AllRanks(step, 1.0, 1.0), 5.0, &ref));
  }
  CHECK_FALSE(CheckLosses(AllRanks(kLossWarmupSteps, 100.0, 1.0), 5.0, &ref).has_value());  // still warming up
  REQUIRE_FALSE(CheckLosses(AllRanks(kLossWarmupSteps, 1.0, 1.0), 5.0, &ref));  // same step again: ignored
  CHECK(ref.losses.size() == kLossWarmupSteps);
  REQUIRE_FALSE(CheckLosses(AllRanks(kLossWarmupSteps + 1, 0.0, 0.0), 5.0, &ref));
  CHECK(ref.losses.size() == kLossWarmupSteps);
  CHECK(ref.step == kLossWarmupSteps + 1);
}

}  // namespace
}  // namespace peregrine
