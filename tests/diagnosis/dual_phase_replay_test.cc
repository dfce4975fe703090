#include "diagnosis/dual_phase_replay.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <catch2/catch.hpp>

#include "tests/testing/layout.h"

namespace peregrine {
namespace {

using testing::Layout;

int GroupOf(const std::vector<ReplayGroup>& groups, int machine) {
  int found = -1;
  for (const ReplayGroup& g : groups) {
    if (std::count(g.machines.begin(), g.machines.end(), machine) > 0) {
      REQUIRE(found == -1);  // a partition: exactly one group holds each machine
      found = g.index;
    }
  }
  REQUIRE(found >= 0);
  return found;
}

void CheckValidJobs(const ParallelLayout& layout, const std::vector<ReplayGroup>& groups) {
  int total = 0;
  for (const ReplayGroup& g : groups) {
    const int gpus = static_cast<int>(g.machines.size()) * layout.gpus_per_machine();
    REQUIRE(gpus % (layout.tensor() * layout.pipeline()) == 0);
    REQUIRE(g.replay_dp == gpus / (layout.tensor() * layout.pipeline()));
    REQUIRE(g.replay_dp >= 1);
    REQUIRE(g.replay_dp <= layout.data());
    total += static_cast<int>(g.machines.size());
  }
  REQUIRE(total == layout.machines());
}

TEST_CASE("dual-phase replay: the paper's shape, n=4 m=6", "[unit]") {
  // One machine per TP group (TP = gpus per machine), PP=4, DP=24: 96 machines.
  const ParallelLayout layout = Layout(8, 4, 24, 8);
  absl::StatusOr<DualPhaseReplayPlan> plan = PlanDualPhaseReplay(layout, {.n = 4});
  REQUIRE(plan.ok());
  CHECK(plan->n == 4);
  CHECK(plan->m == 6);
  CHECK(plan->machines_per_unit == 4);
  CHECK(plan->layers == 4);
  REQUIRE(plan->horizontal.size() == 6);
  for (const ReplayGroup& h : plan->horizontal) {
    CHECK(h.machines.size() == 16);  // k = n x PP
    CHECK(h.replay_dp == 4);
  }
  // Horizontal groups keep whole original replicas: H0 holds DP ranks 0..3 of every stage.
  for (int machine : plan->horizontal[0].machines) {
    const int dp = layout.Coordinates(layout.RanksOfMachine(machine)[0]).dp;
    CHECK(dp < 4);
  }
  for (const ReplayGroup& v : plan->vertical) CHECK(v.machines.size() == 4);
  CheckValidJobs(layout, plan->horizontal);
  CheckValidJobs(layout, plan->vertical);
  absl::StatusOr<int> located = LocateFaultyMachine(*plan, {GroupOf(plan->horizontal, 13)},
                                                    {GroupOf(plan->vertical, 13)});
  REQUIRE(located.ok());
  CHECK(*located == 13);
}

TEST_CASE("dual-phase replay: every single faulty machine is located exactly", "[unit]") {
  int layouts_checked = 0;
  for (int tp : {1, 2, 4, 8}) {
    for (int pp : {1, 2, 3, 4}) {
      for (int dp = 1; dp <= 16; ++dp) {
        for (int g : {1, 2, 4, 8}) {
          if ((tp * pp * dp) % g != 0) continue;
          const ParallelLayout layout = Layout(tp, pp, dp, g);
          absl::StatusOr<DualPhaseReplayPlan> plan = PlanDualPhaseReplay(layout);
          INFO(layout.DebugString());
          if (!plan.ok()) {
            CHECK(plan.status().code() == absl::StatusCode::kFailedPrecondition);
            // Independently: too few DP units for vertical groups to tell machines apart.
            const int dp_unit = g / std::gcd(g, tp * pp);
            const int w = tp * pp * dp_unit / g;
            CHECK(dp / dp_unit < w);
            continue;
          }
          ++layouts_checked;
          CheckValidJobs(layout, plan->horizontal);
          CheckValidJobs(layout, plan->vertical);
          for (const ReplayGroup& h : plan->horizontal) {
            for (const ReplayGroup& v : plan->vertical) {
              int shared = 0;
              for (int machine : h.machines) {
                shared += static_cast<int>(
                    std::count(v.machines.begin(), v.machines.end(), machine));
              }
              REQUIRE(shared <= 1);
            }
          }
          for (int faulty = 0; faulty < layout.machines(); ++faulty) {
            absl::StatusOr<int> located = LocateFaultyMachine(
                *plan, {GroupOf(plan->horizontal, faulty)}, {GroupOf(plan->vertical, faulty)});
            REQUIRE(located.ok());
            REQUIRE(*located == faulty);
          }
        }
      }
    }
  }
  CHECK(layouts_checked > 200);
}

TEST_CASE("dual-phase replay: layouts that cannot be split are refused", "[unit]") {
  // DP=1, PP=4: one replica of 4 machines; no vertical group can avoid sharing 2 machines.
  absl::StatusOr<DualPhaseReplayPlan> plan = PlanDualPhaseReplay(Layout(8, 4, 1, 8));
  REQUIRE(!plan.ok());
  CHECK(plan.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(plan.status().message().find("DP unit") != std::string::npos);
  // n must divide the units and leave m >= PP.
  CHECK(PlanDualPhaseReplay(Layout(8, 4, 24, 8), {.n = 5}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(PlanDualPhaseReplay(Layout(8, 4, 24, 8), {.n = 8}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(PlanDualPhaseReplay(Layout(8, 4, 24, 8), {.n = -1}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("dual-phase replay: ambiguous outcomes are explained, not guessed", "[unit]") {
  absl::StatusOr<DualPhaseReplayPlan> plan = PlanDualPhaseReplay(Layout(8, 2, 8, 8));
  REQUIRE(plan.ok());
  absl::StatusOr<int> none = LocateFaultyMachine(*plan, {}, {0});
  CHECK(none.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(none.status().message().find("did not reproduce") != std::string::npos);
  absl::StatusOr<int> two = LocateFaultyMachine(*plan, {0, 1}, {0});
  CHECK(two.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(two.status().message().find("2 horizontal groups failed") != std::string::npos);
  absl::StatusOr<int> unknown = LocateFaultyMachine(*plan, {0}, {999});
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  // The same group reported twice is one failure.
  CHECK(LocateFaultyMachine(*plan, {1, 1}, {GroupOf(plan->vertical, plan->horizontal[1].machines[0])})
            .ok());
}

}  // namespace
}  // namespace peregrine
