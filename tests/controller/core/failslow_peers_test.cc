// ClassifyRankSlowdowns: a slowdown most ranks share is job-wide; the peer rule on the
// ranks' latest iteration times names persistent stragglers, spread-aware.
#include "controller/core/failslow_peers.h"

#include <catch2/catch.hpp>
#include <vector>

namespace peregrine {
namespace {

// `n` ranks at `seconds` x (1 + spread[r % spread.size()]), rank `slow_rank` x `factor`.
std::vector<RankSlowdownInput> Times(int n, double seconds, const std::vector<double>& spread, int slow_rank = -1,
                                     double factor = 1.0) {
  std::vector<RankSlowdownInput> out;
  for (int r = 0; r < n; ++r) {
    RankSlowdownInput in;
    in.rank = r;
    in.iteration_seconds = seconds * (1 + spread[static_cast<size_t>(r) % spread.size()]) * (r == slow_rank ? factor : 1.0);
    out.push_back(in);
  }
  return out;
}

const std::vector<double> kTight = {0.004, -0.006, 0.001, 0.008, -0.003, 0.0, -0.009, 0.005};   // +-1%
const std::vector<double> kLoose = {0.07, -0.06, 0.02, -0.08, 0.05, -0.02, 0.08, -0.05, 0.0};  // +-8%

TEST_CASE("ClassifyRankSlowdowns: a slowdown most ranks share is job-wide, a minority's is not", "[unit]") {
  for (int slow : {1, 3, 4, 5, 8}) {
    INFO(slow << " of 8 slow");
    std::vector<RankSlowdownInput> ranks = Times(8, 0.1, kTight);
    for (int r = 0; r < slow; ++r) {
      ranks[static_cast<size_t>(r)].slow = true;
      ranks[static_cast<size_t>(r)].severity = 0.3 + 0.01 * r;
    }
    const PeerSlowdownClassification c = ClassifyRankSlowdowns(ranks, 8);
    CHECK(static_cast<int>(c.slow_ranks.size()) == slow);
    CHECK(c.job_wide == (slow > 4));
    if (c.job_wide) CHECK(c.detail.find("job-wide: " + std::to_string(slow) + " of 8 ranks slowed together") == 0);
  }
  // Ranks that send nothing still count: 3 slow ranks of a 16-rank job are not job-wide.
  std::vector<RankSlowdownInput> three(3);
  for (int r = 0; r < 3; ++r) three[static_cast<size_t>(r)] = RankSlowdownInput{r, true, 0.5, 0};
  CHECK_FALSE(ClassifyRankSlowdowns(three, 16).job_wide);
  CHECK(ClassifyRankSlowdowns(three, 4).job_wide);
  // Two ranks cannot tell a shared change from one rank's.
  std::vector<RankSlowdownInput> two = {{0, true, 0.5, 0}, {1, true, 0.5, 0}};
  CHECK_FALSE(ClassifyRankSlowdowns(two, 2).job_wide);
}

TEST_CASE("ClassifyRankSlowdowns: persistent stragglers by the peer rule, spread-aware", "[unit]") {
  SECTION("1.5x among ranks within 1%: a straggler, with its figures") {
    const PeerSlowdownClassification c = ClassifyRankSlowdowns(Times(8, 0.1, kTight, 5, 1.5), 8);
    REQUIRE(c.stragglers == std::vector<int>{5});
    CHECK(c.straggler_excess[0] == Approx(0.5).margin(0.02));
    CHECK(c.straggler_z[0] > 10);
    CHECK(c.timed_ranks == 8);
    CHECK(c.median_seconds == Approx(0.1).margin(0.001));
    CHECK(c.detail.find("rank 5: iteration 150.") == 0);
  }
  SECTION("1.11x among ranks that scatter by 8%: within the spread") {
    const PeerSlowdownClassification c = ClassifyRankSlowdowns(Times(9, 0.1, kLoose, 8, 1.11), 9);
    CHECK(c.stragglers.empty());
    CHECK(c.detail.empty());
  }
  SECTION("4% over ranks within 0.5%: far out by z, too small by the excess") {
    const std::vector<double> very_tight = {0.001, -0.002, 0.0, 0.002, -0.001, 0.001, 0.0, -0.001};
    CHECK(ClassifyRankSlowdowns(Times(8, 0.1, very_tight, 2, 1.04), 8).stragglers.empty());
    PeerSlowdownOptions o;
    o.peer.min_relative_excess = 0.03;
    CHECK(ClassifyRankSlowdowns(Times(8, 0.1, very_tight, 2, 1.04), 8, o).stragglers == std::vector<int>{2});
  }
  SECTION("fewer than 3 ranks with a time: no comparison") {
    std::vector<RankSlowdownInput> ranks = Times(8, 0.1, kTight, 1, 2.0);
    for (size_t r = 2; r < ranks.size(); ++r) ranks[r].iteration_seconds = 0;  // unknown
    const PeerSlowdownClassification c = ClassifyRankSlowdowns(ranks, 8);
    CHECK(c.timed_ranks == 2);
    CHECK(c.stragglers.empty());
  }
  SECTION("invalid options classify nothing") {
    PeerSlowdownOptions o;
    o.job_wide_fraction = 1.0;
    CHECK_FALSE(ValidPeerOptions(o));
    const PeerSlowdownClassification c = ClassifyRankSlowdowns(Times(8, 0.1, kTight, 5, 1.5), 8, o);
    CHECK(c.stragglers.empty());
    CHECK_FALSE(c.job_wide);
    CHECK(ValidPeerOptions(PeerSlowdownOptions{}));
  }
}

}  // namespace
}  // namespace peregrine
