// Tests for checkpoint/fallback_placement.h: the exact placement when one exists, and
// otherwise the peers sharing the fewest parallel groups, balanced, deterministic, with
// the reason the placement is degraded.
#include "checkpoint/fallback_placement.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

namespace peregrine {
namespace {

ParallelLayout Layout(int t, int p, int d, int g) { return ParallelLayout::Create(t, p, d, g).value(); }

TEST_CASE("a layout PlaceBackups can place is placed exactly as it places it", "[unit]") {
  const ParallelLayout layout = Layout(2, 2, 2, 2);  // 4 machines, TP in the machine
  const absl::StatusOr<CheckpointPlacement> got = PlaceBackupsOrFewestShared(layout, 1);
  REQUIRE(got.ok());
  CHECK(got->degraded_reason.empty());
  CHECK(got->placement.backups == PlaceBackups(layout, 1)->backups);
}

TEST_CASE("pure data parallelism on two machines: each holds the other's copy, degraded", "[unit]") {
  const ParallelLayout layout = Layout(1, 1, 2, 1);
  REQUIRE_FALSE(PlaceBackups(layout, 1).ok());
  const absl::StatusOr<CheckpointPlacement> got = PlaceBackupsOrFewestShared(layout, 1);
  REQUIRE(got.ok());
  CHECK(got->placement.backups == std::vector<std::vector<int>>{{1}, {0}});
  CHECK(got->placement.holders_load == std::vector<int>{1, 1});
  CHECK_THAT(got->degraded_reason, Catch::StartsWith("placement degraded: ") && Catch::Contains("at most 1 shared"));
}

TEST_CASE("one machine: no peer, nothing placed, degraded", "[unit]") {
  const absl::StatusOr<CheckpointPlacement> got = PlaceBackupsOrFewestShared(Layout(2, 1, 1, 2), 1);
  REQUIRE(got.ok());
  CHECK(got->placement.backups == std::vector<std::vector<int>>{{}});
  CHECK_THAT(got->degraded_reason, Catch::Contains("1 machine has no peer"));
}

TEST_CASE("more copies than peers: every peer holds one, the shortfall is named", "[unit]") {
  const absl::StatusOr<CheckpointPlacement> got = PlaceBackupsOrFewestShared(Layout(1, 1, 3, 1), 5);
  REQUIRE(got.ok());
  for (int m = 0; m < 3; ++m) {
    std::vector<int> held = got->placement.backups[m];
    std::sort(held.begin(), held.end());
    std::vector<int> others;
    for (int p = 0; p < 3; ++p) {
      if (p != m) others.push_back(p);
    }
    CHECK(held == others);
  }
  CHECK_THAT(got->degraded_reason, Catch::Contains("placed 2 of 5 copies"));
  CHECK_FALSE(PlaceBackupsOrFewestShared(Layout(1, 1, 3, 1), -1).ok());
}

TEST_CASE("degraded placements take the peers sharing the fewest groups, balanced and deterministic", "[unit]") {
  int degraded = 0;
  for (int t = 1; t <= 4; ++t) {
    for (int p = 1; p <= 4; ++p) {
      for (int d = 1; d <= 4; ++d) {
        for (int g : {1, 2, 4}) {
          if ((t * p * d) % g != 0 || t * p * d / g < 2) continue;
          const ParallelLayout layout = Layout(t, p, d, g);
          const int n = layout.machines();
          for (int copies = 1; copies <= 2; ++copies) {
            INFO(layout.DebugString() << " copies=" << copies);
            const absl::StatusOr<CheckpointPlacement> got = PlaceBackupsOrFewestShared(layout, copies);
            REQUIRE(got.ok());
            const absl::StatusOr<CheckpointPlacement> again = PlaceBackupsOrFewestShared(layout, copies);
            CHECK(again->placement.backups == got->placement.backups);
            if (got->degraded_reason.empty()) continue;
            ++degraded;
            const int placed = std::min(copies, n - 1);
            int total = 0;
            for (int m = 0; m < n; ++m) {
              const std::vector<int>& held = got->placement.backups[m];
              REQUIRE(static_cast<int>(held.size()) == placed);
              CHECK(std::set<int>(held.begin(), held.end()).size() == held.size());
              CHECK(std::find(held.begin(), held.end(), m) == held.end());
              // The first holder shares no more groups than any other peer.
              int fewest = 1 << 30;
              for (int q = 0; q < n; ++q) {
                if (q != m) fewest = std::min(fewest, SharedParallelGroups(layout, m, q));
              }
              CHECK(SharedParallelGroups(layout, m, held[0]) == fewest);
              total += placed;
            }
            const std::vector<int>& load = got->placement.holders_load;
            CHECK(std::accumulate(load.begin(), load.end(), 0) == total);
          }
        }
      }
    }
  }
  CHECK(degraded > 5);
}

}  // namespace
}  // namespace peregrine
