// Tests for checkpoint/backup_placement.h.
//
// The oracle is independent of the implementation: groups are enumerated here by brute
// force from the rank order documented in diagnosis/parallel_layout.h (rank = tp +
// tensor * (dp + data * pp); machine m holds ranks [m * g, (m + 1) * g)), and the
// properties are checked on every small layout exhaustively.
#include "checkpoint/backup_placement.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace peregrine {
namespace {

struct Coords {
  int tp, dp, pp;
};

Coords CoordsOf(int rank, int t, int d) { return {rank % t, (rank / t) % d, rank / (t * d)}; }

// Every TP, PP and DP group of the layout as the set of machines it touches.
std::vector<std::set<int>> GroupMachineSets(int t, int p, int d, int g) {
  std::vector<std::set<int>> groups;
  const int world = t * p * d;
  // Two ranks are in the same TP group iff (dp, pp) match; PP iff (tp, dp); DP iff (tp, pp).
  auto key = [&](int kind, const Coords& c) {
    switch (kind) {
      case 0: return c.dp + d * c.pp;
      case 1: return c.tp + t * c.dp;
      default: return c.tp + t * c.pp;
    }
  };
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<std::set<int>> by_key(world);
    for (int r = 0; r < world; ++r) by_key[key(kind, CoordsOf(r, t, d))].insert(r / g);
    for (auto& s : by_key) {
      if (!s.empty()) groups.push_back(s);
    }
  }
  return groups;
}

bool BruteShare(int a, int b, const std::vector<std::set<int>>& groups) {
  for (const auto& s : groups) {
    if (s.count(a) && s.count(b)) return true;
  }
  return false;
}

TEST_CASE("exhaustively: evicting any whole parallel group never loses every copy", "[unit]") {
  int layouts = 0, placed = 0, refused = 0, exactly_balanced = 0;
  for (int t = 1; t <= 4; ++t) {
    for (int p = 1; p <= 4; ++p) {
      for (int d = 1; d <= 6; ++d) {
        const int world = t * p * d;
        for (int g : {1, 2, 4, 8}) {
          if (world % g != 0) continue;
          const ParallelLayout layout = ParallelLayout::Create(t, p, d, g).value();
          const int n = layout.machines();
          const std::vector<std::set<int>> groups = GroupMachineSets(t, p, d, g);
          for (int copies = 1; copies <= 3; ++copies) {
            ++layouts;
            INFO(layout.DebugString() << " copies=" << copies);
            // Brute force: the fewest safe peers any machine has.
            int fewest_safe = n;
            for (int m = 0; m < n; ++m) {
              int safe = 0;
              for (int q = 0; q < n; ++q) safe += (q != m && !BruteShare(m, q, groups)) ? 1 : 0;
              fewest_safe = std::min(fewest_safe, safe);
              if (copies == 1 && n <= 32) {
                for (int q = 0; q < n; ++q) {
                  CHECK(ShareParallelGroup(layout, m, q) == (q == m || BruteShare(m, q, groups)));
                }
              }
            }
            absl::StatusOr<BackupPlacement> result = PlaceBackups(layout, copies);
            // Refused exactly when some machine has too few safe peers.
            REQUIRE(result.ok() == (fewest_safe >= copies));
            if (!result.ok()) {
              ++refused;
              CHECK(result.status().code() == absl::StatusCode::kFailedPrecondition);
              CHECK_THAT(std::string(result.status().message()), Catch::Contains("cannot place"));
              continue;
            }
            ++placed;
            const BackupPlacement& bp = *result;
            REQUIRE(static_cast<int>(bp.backups.size()) == n);
            std::vector<int> load(n, 0);
            for (int m = 0; m < n; ++m) {
              const std::vector<int>& b = bp.backups[m];
              REQUIRE(static_cast<int>(b.size()) == copies);
              CHECK(std::set<int>(b.begin(), b.end()).size() == b.size());  // distinct
              for (int q : b) {
                REQUIRE((q >= 0 && q < n));
                CHECK(q != m);
                CHECK(!BruteShare(m, q, groups));
                ++load[q];
              }
            }
            CHECK(load == bp.holders_load);
            // The property itself: evict every machine of one group; each evicted
            // machine's checkpoint survives on all of its holders.
            for (const std::set<int>& evicted : groups) {
              for (int m : evicted) {
                for (int q : bp.backups[m]) CHECK(evicted.count(q) == 0);
              }
            }
            // Balance: nobody holds more than one extra copy.
            const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
            CHECK(*hi <= copies + 1);
            exactly_balanced += (*lo == copies && *hi == copies) ? 1 : 0;
          }
        }
      }
    }
  }
  CHECK(layouts > 500);
  CHECK(placed > 100);
  CHECK(refused > 100);
  CHECK(exactly_balanced == placed);
}

TEST_CASE("placement is deterministic", "[unit]") {
  const ParallelLayout layout = ParallelLayout::Create(2, 4, 2, 2).value();
  const BackupPlacement a = PlaceBackups(layout, 2).value();
  const BackupPlacement b = PlaceBackups(layout, 2).value();
  CHECK(a.backups == b.backups);
  CHECK(a.holders_load == b.holders_load);
}

TEST_CASE("the ByteRobust figure 9 layout (TP=2 PP=4 DP=2)", "[unit]") {
  // In the paper ranks 8, 9 (machine 4) and ranks 2, 3 (machine 1) back each other up.
  const ParallelLayout layout = ParallelLayout::Create(2, 4, 2, 2).value();
  CHECK_FALSE(ShareParallelGroup(layout, 4, 1));
  CHECK(ShareParallelGroup(layout, 4, 5));  // same pipeline stage: a DP group
  CHECK(ShareParallelGroup(layout, 4, 0));  // same DP index: a PP group
  const BackupPlacement bp = PlaceBackups(layout, 1).value();
  for (int m = 0; m < layout.machines(); ++m) CHECK_FALSE(ShareParallelGroup(layout, m, bp.backups[m][0]));
  CHECK(bp.holders_load == std::vector<int>(8, 1));
}

TEST_CASE("TP in the machine with PP=2 needs a two-level shift", "[unit]") {
  // Machine m = dp + 64 * pp: a plain shift m -> m + s keeps the stage for some m or
  // the DP index for others; shifting both coordinates works for all.
  const ParallelLayout layout = ParallelLayout::Create(8, 2, 64, 8).value();
  const BackupPlacement bp = PlaceBackups(layout, 3).value();
  CHECK(bp.holders_load == std::vector<int>(128, 3));
  for (int m = 0; m < 128; ++m) {
    for (int q : bp.backups[m]) CHECK((q % 64 != m % 64 && q / 64 != m / 64));
  }
}

TEST_CASE("when no shift permutation fits, the matching fallback still places and balances", "[unit]") {
  // TP=1 PP=3 DP=2, one GPU per machine: m = dp + 2 * pp. Each machine has exactly two
  // safe peers (other DP index and other stage), and only one shift permutation
  // exists, so the second copy comes from the matching rounds and must be the
  // remaining safe peer.
  const ParallelLayout layout = ParallelLayout::Create(1, 3, 2, 1).value();
  const BackupPlacement bp = PlaceBackups(layout, 2).value();
  for (int m = 0; m < 6; ++m) {
    std::set<int> expected;
    for (int q = 0; q < 6; ++q) {
      if (q % 2 != m % 2 && q / 2 != m / 2) expected.insert(q);
    }
    CHECK(std::set<int>(bp.backups[m].begin(), bp.backups[m].end()) == expected);
  }
  CHECK(bp.holders_load == std::vector<int>(6, 2));
}

TEST_CASE("impossible layouts are refused with the reason", "[unit]") {
  SECTION("one machine") {
    absl::StatusOr<BackupPlacement> r = PlaceBackups(ParallelLayout::Create(8, 1, 1, 8).value(), 1);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("a job of 1 machine has no peer"));
  }
  SECTION("pure data parallelism: the DP group spans every machine") {
    absl::StatusOr<BackupPlacement> r = PlaceBackups(ParallelLayout::Create(1, 1, 8, 1).value(), 1);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("only 0 of the other 7 machines"));
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("TP=1 PP=1 DP=8 on 8 machines x 1 GPUs"));
  }
  SECTION("more copies than safe peers") {
    // TP=8 in the machine, PP=2, DP=2: each machine has exactly one safe peer.
    const ParallelLayout layout = ParallelLayout::Create(8, 2, 2, 8).value();
    CHECK(PlaceBackups(layout, 1).ok());
    absl::StatusOr<BackupPlacement> r = PlaceBackups(layout, 2);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("only 1 of the other 3 machines"));
  }
  SECTION("negative copies") {
    absl::StatusOr<BackupPlacement> r = PlaceBackups(ParallelLayout::Create(2, 2, 2, 2).value(), -1);
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("checkpoint.backupCopies"));
  }
  SECTION("zero copies places nothing") {
    const BackupPlacement bp = PlaceBackups(ParallelLayout::Create(2, 2, 2, 2).value(), 0).value();
    CHECK(bp.backups == std::vector<std::vector<int>>(4));
  }
}

TEST_CASE("a 100,000-GPU layout is placed and balanced", "[unit]") {
  // TP=8 (one machine), PP=10, DP=1250: 12,500 machines.
  const ParallelLayout layout = ParallelLayout::Create(8, 10, 1250, 8).value();
  const BackupPlacement bp = PlaceBackups(layout, 2).value();
  REQUIRE(bp.backups.size() == 12500u);
  CHECK(bp.holders_load == std::vector<int>(12500, 2));
  // Machine m = dp + 1250 * pp holds ranks of TP group m, DP group (pp), PP group (dp):
  // a safe peer differs in both dp and pp.
  for (int m = 0; m < 12500; ++m) {
    for (int q : bp.backups[m]) {
      CHECK((q % 1250 != m % 1250 && q / 1250 != m / 1250));
    }
  }
}

}  // namespace
}  // namespace peregrine
