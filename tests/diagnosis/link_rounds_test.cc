#include "diagnosis/link_rounds.h"

#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

namespace peregrine {
namespace {

// Every round: no rank in two transfers. Returns the multiset of covered links.
std::map<std::pair<int, int>, int> CheckRounds(const ValidationRounds& rounds, int n) {
  std::map<std::pair<int, int>, int> covered;
  for (const auto& round : rounds) {
    CHECK_FALSE(round.empty());
    std::set<int> busy;
    for (const LinkTransfer& t : round) {
      CHECK(t.sender >= 0);
      CHECK(t.sender < n);
      CHECK(t.receiver >= 0);
      CHECK(t.receiver < n);
      CHECK(t.sender != t.receiver);
      CHECK(busy.insert(t.sender).second);
      CHECK(busy.insert(t.receiver).second);
      ++covered[{t.sender, t.receiver}];
    }
  }
  return covered;
}

TEST_CASE("Ring rounds cover every link exactly once, n = 1..256", "[unit]") {
  for (int n = 1; n <= 256; ++n) {
    INFO("n = " << n);
    auto rounds = RingValidationRounds(n);
    REQUIRE(rounds.ok());
    const size_t expected_rounds = n == 1 ? 0 : (n % 2 == 0 ? 2 : 3);
    CHECK(rounds->size() == expected_rounds);
    const auto covered = CheckRounds(*rounds, n);
    if (n == 1) {
      CHECK(covered.empty());
      continue;
    }
    CHECK(covered.size() == static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) CHECK(covered.count({i, (i + 1) % n}) == 1);
    for (const auto& [link, times] : covered) CHECK(times == 1);
  }
  CHECK(RingValidationRounds(0).status().code() == absl::StatusCode::kInvalidArgument);
}

void CheckTree(const std::vector<int>& parents, TreeDirection direction) {
  const int n = static_cast<int>(parents.size());
  auto rounds = TreeValidationRounds(parents, direction);
  REQUIRE(rounds.ok());
  CHECK(rounds->size() <= 4);
  if (n == 1) CHECK(rounds->empty());
  if (n == 2) CHECK(rounds->size() == 1);
  const auto covered = CheckRounds(*rounds, n);
  CHECK(covered.size() == static_cast<size_t>(n - 1));
  for (int i = 0; i < n; ++i) {
    const int p = parents[static_cast<size_t>(i)];
    if (p < 0) continue;
    const auto edge = direction == TreeDirection::kChildToParent ? std::pair{i, p} : std::pair{p, i};
    CHECK(covered.count(edge) == 1);
  }
  for (const auto& [link, times] : covered) CHECK(times == 1);
}

TEST_CASE("Heap tree rounds cover every edge once in at most 4 rounds, n = 1..256", "[unit]") {
  for (int n = 1; n <= 256; ++n) {
    INFO("n = " << n);
    const std::vector<int> parents = HeapBinaryTreeParents(n);
    CHECK(parents[0] == -1);
    for (int i = 1; i < n; ++i) CHECK(parents[static_cast<size_t>(i)] == (i - 1) / 2);
    CheckTree(parents, TreeDirection::kChildToParent);
    CheckTree(parents, TreeDirection::kParentToChild);
    if (n >= 7) {
      auto rounds = TreeValidationRounds(parents, TreeDirection::kChildToParent);
      CHECK(rounds->size() == 4);
    }
  }
}

TEST_CASE("Tree rounds work for arbitrary binary trees", "[unit]") {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 256);
    // Random binary tree with a random root and random labels.
    std::vector<int> label(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) label[static_cast<size_t>(i)] = i;
    std::shuffle(label.begin(), label.end(), rng);
    std::vector<int> parents(static_cast<size_t>(n), -1);
    std::vector<int> open = {0};  // build order positions with < 2 children
    std::vector<int> kids(static_cast<size_t>(n), 0);
    for (int i = 1; i < n; ++i) {
      const size_t pick = rng() % open.size();
      const int p = open[pick];
      parents[static_cast<size_t>(label[static_cast<size_t>(i)])] = label[static_cast<size_t>(p)];
      if (++kids[static_cast<size_t>(p)] == 2) open.erase(open.begin() + static_cast<long>(pick));
      open.push_back(i);
    }
    INFO("trial " << trial << " n " << n);
    CheckTree(parents, TreeDirection::kChildToParent);
    CheckTree(parents, TreeDirection::kParentToChild);
  }
}

TEST_CASE("Tree rounds reject parent arrays that are not binary trees", "[unit]") {
  const std::vector<std::vector<int>> bad = {
      {},                 // empty
      {0},                // self-parent, no root
      {-1, -1},           // two roots
      {-1, 5},            // out of range
      {-1, 2, 1},         // cycle 1 <-> 2
      {-1, 0, 0, 0},      // three children
  };
  for (const auto& parents : bad) {
    CHECK(TreeValidationRounds(parents, TreeDirection::kChildToParent).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

std::vector<LinkTime> RingTimes(int n, double base, const std::map<std::pair<int, int>, double>& slow) {
  std::vector<LinkTime> times;
  for (int i = 0; i < n; ++i) {
    const std::pair<int, int> link{i, (i + 1) % n};
    auto it = slow.find(link);
    times.push_back({i, (i + 1) % n, it == slow.end() ? base * (1.0 + 0.01 * (i % 3)) : it->second});
  }
  return times;
}

TEST_CASE("JudgeLinkTimes tells a slow GPU from a slow link", "[unit]") {
  SECTION("slow rank: both of its ring links are slow") {
    auto verdict = JudgeLinkTimes(RingTimes(8, 1.0, {{{2, 3}, 1.6}, {{3, 4}, 1.5}}));
    REQUIRE(verdict.ok());
    REQUIRE(verdict->slow_ranks.size() == 1);
    CHECK(verdict->slow_ranks[0].rank == 3);
    CHECK(verdict->slow_ranks[0].links == 2);
    CHECK(verdict->slow_ranks[0].mean_ratio == Approx(1.55).margin(0.05));
    CHECK(verdict->slow_links.empty());
  }
  SECTION("slow link only") {
    auto verdict = JudgeLinkTimes(RingTimes(8, 1.0, {{{5, 6}, 2.0}}));
    REQUIRE(verdict.ok());
    CHECK(verdict->slow_ranks.empty());
    REQUIRE(verdict->slow_links.size() == 1);
    CHECK(verdict->slow_links[0].sender == 5);
    CHECK(verdict->slow_links[0].receiver == 6);
    CHECK(verdict->slow_links[0].ratio == Approx(2.0).margin(0.05));
  }
  SECTION("healthy ring: nothing") {
    auto verdict = JudgeLinkTimes(RingTimes(16, 3.0, {}));
    REQUIRE(verdict.ok());
    CHECK(verdict->slow_ranks.empty());
    CHECK(verdict->slow_links.empty());
    CHECK(verdict->median_seconds == Approx(3.03).margin(0.04));
  }
  SECTION("invalid input") {
    CHECK(JudgeLinkTimes({}).status().code() == absl::StatusCode::kInvalidArgument);
    std::vector<LinkTime> negative = {{0, 1, -1.0}};
    CHECK(JudgeLinkTimes(negative).status().code() == absl::StatusCode::kInvalidArgument);
    std::vector<LinkTime> ok = {{0, 1, 1.0}};
    CHECK(JudgeLinkTimes(ok, 1.0).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace peregrine
