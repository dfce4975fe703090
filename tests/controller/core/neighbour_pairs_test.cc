#include "controller/core/neighbour_pairs.h"

#include <catch2/catch.hpp>
#include <map>

namespace peregrine {
namespace {

TEST_CASE("Neighbour pairs: rounds are disjoint, cover every ring edge once, and find any single culprit",
          "[unit]") {
  for (int n = 1; n <= 64; ++n) {
    INFO("n = " << n);
    const auto rounds = PlanNeighbourPairs(n);
    std::map<int, int> edge_seen;
    std::map<int, int> pairs_of_machine;
    for (const auto& round : rounds) {
      std::set<int> busy;
      for (const NeighbourPair& p : round) {
        CHECK(p.first != p.second);
        CHECK(busy.insert(p.first).second);  // one diagnostic at a time per machine
        CHECK(busy.insert(p.second).second);
        ++edge_seen[p.index];
        ++pairs_of_machine[p.first];
        ++pairs_of_machine[p.second];
      }
    }
    if (n <= 1) {
      CHECK(rounds.empty());
      continue;
    }
    if (n == 2) {
      REQUIRE(rounds.size() == 1);
      CHECK(rounds[0] == std::vector<NeighbourPair>{NeighbourPair{0, 1, 0}});
      continue;
    }
    CHECK(rounds.size() == (n % 2 == 0 ? 2u : 3u));
    CHECK(edge_seen.size() == static_cast<size_t>(n));
    for (const auto& [edge, count] : edge_seen) CHECK(count == 1);
    for (int m = 0; m < n; ++m) CHECK(pairs_of_machine[m] == 2);
    // Each machine as the culprit: exactly the pairs containing it fail.
    for (int culprit = 0; culprit < n; ++culprit) {
      std::set<int> failed;
      for (const auto& round : rounds) {
        for (const NeighbourPair& p : round) {
          if (p.first == culprit || p.second == culprit) failed.insert(p.index);
        }
      }
      CHECK(NeighbourCulprits(n, failed) == std::set<int>{culprit});
    }
  }
}

TEST_CASE("Neighbour pairs: no failures, no culprit, two adjacent culprits are both found", "[unit]") {
  CHECK(NeighbourCulprits(8, {}).empty());
  // Machines 3 and 4 faulty: edges (2,3), (3,4), (4,5) fail.
  CHECK(NeighbourCulprits(8, {2, 3, 4}) == std::set<int>{3, 4});
  CHECK(NeighbourCulprits(2, {0}).empty());
}

}  // namespace
}  // namespace peregrine
