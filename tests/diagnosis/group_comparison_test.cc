#include "diagnosis/group_comparison.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <vector>

#include "diagnosis/parallel_layout.h"
#include "tests/testing/layout.h"

namespace peregrine {
namespace {

// A small discrete-event model of hybrid-parallel training: per iteration every rank
// computes, joins its TP all-reduce, computes, joins its PP exchange, then its DP
// all-reduce. A collective starts when its last member arrives and takes its group's
// transfer time; everyone leaves at completion.
struct Scenario {
  int slow_rank = -1;            // compute takes 1.6x on this rank
  GroupKind congested_kind = GroupKind::kData;
  int congested_group = -1;      // transfer takes 1.8x in this group
};

std::vector<CollectiveTiming> Simulate(const ParallelLayout& layout, const Scenario& s,
                                       int iterations, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(0.98, 1.02);
  const int world = layout.world_size();
  std::vector<double> clock(static_cast<size_t>(world), 0.0);
  std::vector<CollectiveTiming> out;
  auto compute = [&](double us) {
    for (int r = 0; r < world; ++r) {
      const double factor = r == s.slow_rank ? 1.6 : 1.0;
      clock[static_cast<size_t>(r)] += us * factor * jitter(rng);
    }
  };
  auto collective = [&](GroupKind kind, double transfer_us) {
    for (const CommGroup& g : layout.Groups(kind)) {
      if (g.ranks.size() < 2) continue;
      double last = 0.0;
      for (int r : g.ranks) last = std::max(last, clock[static_cast<size_t>(r)]);
      double t = transfer_us * jitter(rng);
      if (kind == s.congested_kind && g.index == s.congested_group) t *= 1.8;
      const double done = last + t;
      CollectiveTiming c;
      c.kind = kind;
      c.group_index = g.index;
      for (int r : g.ranks) {
        c.members.push_back({r, static_cast<int64_t>(clock[static_cast<size_t>(r)] * 1000),
                             static_cast<int64_t>(done * 1000)});
        clock[static_cast<size_t>(r)] = done;
      }
      out.push_back(std::move(c));
    }
  };
  for (int it = 0; it < iterations; ++it) {
    compute(5000);
    collective(GroupKind::kTensor, 300);
    compute(5000);
    collective(GroupKind::kPipeline, 500);
    collective(GroupKind::kData, 2000);
  }
  return out;
}

// TP=2 PP=2 DP=4 on machines of 4 GPUs.
ParallelLayout Layout() { return testing::Layout(/*tp=*/2, /*pp=*/2, /*dp=*/4, /*gpus_per_machine=*/4); }

// Rank 6 computes slowly and DP group 2 is congested, at once.
Scenario SlowRankAndCongestedGroup() {
  Scenario s;
  s.slow_rank = 6;
  s.congested_kind = GroupKind::kData;
  s.congested_group = 2;
  return s;
}

TEST_CASE("CompareGroups names the slow compute rank, not its victims", "[unit]") {
  const ParallelLayout layout = Layout();
  for (int slow : {0, 5, 11, 15}) {
    INFO("slow rank " << slow);
    auto suspects = CompareGroups(Simulate(layout, {slow}, 50, 3));
    REQUIRE(suspects.ok());
    REQUIRE(suspects->compute.size() == 1);
    const ComputeSuspect& s = suspects->compute[0];
    CHECK(s.rank == slow);
    CHECK(s.min_late_fraction == Approx(1.0));
    // Each collective waits about 0.6 x 5000 us for it.
    CHECK(s.mean_imposed_wait_ns > 1'000'000);
    CHECK(s.mean_own_wait_ns < 200'000);
    // Waiting is not transfer: no group is blamed.
    CHECK(suspects->communication.empty());
  }
}

TEST_CASE("CompareGroups names the congested group", "[unit]") {
  const ParallelLayout layout = Layout();
  struct Case {
    GroupKind kind;
    int index;
  };
  for (const Case c : {Case{GroupKind::kData, 1}, Case{GroupKind::kTensor, 6},
                       Case{GroupKind::kPipeline, 3}}) {
    INFO(GroupKindName(c.kind) << " " << c.index);
    Scenario s;
    s.congested_kind = c.kind;
    s.congested_group = c.index;
    auto suspects = CompareGroups(Simulate(layout, s, 50, 4));
    REQUIRE(suspects.ok());
    REQUIRE(suspects->communication.size() == 1);
    const CommunicationSuspect& g = suspects->communication[0];
    CHECK(g.kind == c.kind);
    CHECK(g.group_index == c.index);
    CHECK(g.ratio == Approx(1.8).margin(0.05));
    CHECK(g.ranks == layout.Group(c.kind, c.index).ranks);
    // Members of a congested group arrive late elsewhere, but not in their own group.
    CHECK(suspects->compute.empty());
  }
}

TEST_CASE("CompareGroups separates a slow rank and a congested group at once", "[unit]") {
  const ParallelLayout layout = Layout();
  const Scenario s = SlowRankAndCongestedGroup();
  auto suspects = CompareGroups(Simulate(layout, s, 60, 5));
  REQUIRE(suspects.ok());
  REQUIRE(suspects->compute.size() == 1);
  CHECK(suspects->compute[0].rank == 6);
  REQUIRE(suspects->communication.size() == 1);
  CHECK(suspects->communication[0].kind == GroupKind::kData);
  CHECK(suspects->communication[0].group_index == 2);
}

// Every rank's timings on its own clock, off by up to +-5 ms from the others (hosts under
// NTP): only durations are compared, so the verdicts do not move.
std::vector<CollectiveTiming> SkewClocks(std::vector<CollectiveTiming> timings, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> skew(-5'000'000, 5'000'000);
  std::map<int, int64_t> offset;
  for (CollectiveTiming& c : timings) {
    for (MemberTiming& m : c.members) {
      if (!offset.count(m.rank)) offset[m.rank] = skew(rng);
      m.enter_ns += offset[m.rank];
      m.exit_ns += offset[m.rank];
    }
  }
  return timings;
}

TEST_CASE("CompareGroups uses durations only: clock offsets between hosts change nothing", "[unit]") {
  const ParallelLayout layout = Layout();
  const Scenario s = SlowRankAndCongestedGroup();
  const std::vector<CollectiveTiming> timings = Simulate(layout, s, 60, 7);
  auto same_clock = CompareGroups(timings);
  auto skewed = CompareGroups(SkewClocks(timings, 11));
  REQUIRE(same_clock.ok());
  REQUIRE(skewed.ok());
  REQUIRE(skewed->compute.size() == 1);
  CHECK(skewed->compute[0].rank == 6);
  REQUIRE(!skewed->communication.empty());
  CHECK(skewed->communication[0].kind == GroupKind::kData);
  CHECK(skewed->communication[0].group_index == 2);
  CHECK(skewed->median_transfer_ns == same_clock->median_transfer_ns);
  CHECK(skewed->compute[0].mean_imposed_wait_ns == same_clock->compute[0].mean_imposed_wait_ns);
}

TEST_CASE("CompareGroups: transfer is the shortest stay, the last arriver the member with it", "[unit]") {
  // Three members on unrelated clocks: stays 9, 4 and 7 ms. Rank 1 arrived last (4 ms is the
  // transfer), rank 0 waited 5 ms, rank 2 waited 3 ms, and rank 1 imposed 7 - 4 = 3 ms.
  std::vector<CollectiveTiming> timings;
  for (int i = 0; i < 10; ++i) {
    CollectiveTiming c;
    c.kind = GroupKind::kTensor;
    c.members = {{0, 1'000'000'000, 1'009'000'000}, {1, 5, 4'000'005}, {2, -70'000'000, -63'000'000}};
    timings.push_back(c);
  }
  GroupComparisonOptions options;
  options.min_imposed_wait_fraction = 0.5;
  auto out = CompareGroups(timings, options);
  REQUIRE(out.ok());
  CHECK(out->median_transfer_ns == 4'000'000);
  REQUIRE(out->compute.size() == 1);
  CHECK(out->compute[0].rank == 1);
  CHECK(out->compute[0].mean_imposed_wait_ns == 3'000'000);
  CHECK(out->compute[0].mean_own_wait_ns == 0);
}

TEST_CASE("CompareGroups finds nothing in a healthy job", "[unit]") {
  auto suspects = CompareGroups(Simulate(Layout(), {}, 80, 6));
  REQUIRE(suspects.ok());
  CHECK(suspects->compute.empty());
  CHECK(suspects->communication.empty());
  CHECK(suspects->median_transfer_ns > 0);
}

TEST_CASE("CompareGroups rejects malformed timings", "[unit]") {
  CollectiveTiming empty;
  CHECK(CompareGroups({&empty, 1}).status().code() == absl::StatusCode::kInvalidArgument);
  CollectiveTiming backwards;
  backwards.members = {{0, 100, 50}, {1, 0, 200}};
  CHECK(CompareGroups({&backwards, 1}).status().code() == absl::StatusCode::kInvalidArgument);
  CollectiveTiming twice;
  twice.members = {{3, 0, 10}, {3, 1, 10}};
  CHECK(CompareGroups({&twice, 1}).status().code() == absl::StatusCode::kInvalidArgument);
  GroupComparisonOptions bad;
  bad.slow_ratio = 0.9;
  CHECK(CompareGroups({}, bad).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine
