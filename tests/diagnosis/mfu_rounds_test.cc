#include "diagnosis/mfu_rounds.h"

#include <catch2/catch.hpp>

#include "tests/testing/layout.h"

namespace peregrine {
namespace {

using testing::Layout;

TEST_CASE("mfu rounds: the group with the most suspect machines is flagged", "[unit]") {
  const ParallelLayout layout = Layout(2, 4, 4, 2);
  CHECK(!GroupWithMostOutliers(layout, {}).has_value());
  // All ranks of one pipeline chain (dp=2): the PP group covering those 4 machines.
  std::vector<int> chain;
  for (int pp = 0; pp < 4; ++pp) {
    for (int tp = 0; tp < 2; ++tp) chain.push_back(layout.RankOf({tp, pp, 2}));
  }
  std::optional<FlaggedGroup> flagged = GroupWithMostOutliers(layout, chain);
  REQUIRE(flagged.has_value());
  CHECK(flagged->kind == GroupKind::kPipeline);
  CHECK(flagged->index == layout.GroupIndexOf(GroupKind::kPipeline, layout.RankOf({0, 0, 2})));
  // One machine: its TP group (1 machine) beats the PP and DP groups that also hold it.
  flagged = GroupWithMostOutliers(layout, {10, 11});
  REQUIRE(flagged.has_value());
  CHECK(flagged->kind == GroupKind::kTensor);
  CHECK(flagged->index == layout.GroupIndexOf(GroupKind::kTensor, 10));
}

TEST_CASE("mfu rounds: after five rounds the most-flagged group is evicted", "[unit]") {
  const ParallelLayout layout = Layout(2, 4, 4, 2);
  const FlaggedGroup a{GroupKind::kPipeline, 1};
  const FlaggedGroup b{GroupKind::kData, 3};
  MfuDropRounds rounds(layout);
  rounds.RecordRound(a);
  rounds.RecordRound(b);
  rounds.RecordRound(a);
  rounds.RecordRound(std::nullopt);
  CHECK(!rounds.Decide().has_value());  // only 4 rounds
  rounds.RecordRound(a);
  std::optional<MfuVerdict> v = rounds.Decide();
  REQUIRE(v.has_value());
  REQUIRE(v->group.has_value());
  CHECK(*v->group == a);
  CHECK(v->flags == 3);
  std::vector<int> machines = layout.MachinesOfGroup(layout.Group(GroupKind::kPipeline, 1));
  std::sort(machines.begin(), machines.end());
  CHECK(v->machines_to_evict == machines);
  CHECK(v->explanation.find("3 of the last 5") != std::string::npos);
  rounds.Reset();
  CHECK(rounds.rounds_recorded() == 0);
}

TEST_CASE("mfu rounds: ties and quiet rounds are decided deterministically", "[unit]") {
  const ParallelLayout layout = Layout(2, 4, 4, 2);
  const FlaggedGroup a{GroupKind::kPipeline, 1};
  const FlaggedGroup b{GroupKind::kData, 3};
  // 2-2 tie: the one flagged in the latest round wins, whatever order came first.
  for (bool a_first : {true, false}) {
    MfuDropRounds rounds(layout);
    const FlaggedGroup first = a_first ? a : b;
    const FlaggedGroup second = a_first ? b : a;
    rounds.RecordRound(first);
    rounds.RecordRound(second);
    rounds.RecordRound(first);
    rounds.RecordRound(second);
    rounds.RecordRound(std::nullopt);
    std::optional<MfuVerdict> v = rounds.Decide();
    REQUIRE(v.has_value());
    CHECK(*v->group == second);
    CHECK(v->flags == 2);
  }
  MfuDropRounds quiet(layout);
  for (int i = 0; i < 5; ++i) quiet.RecordSuspects({});
  std::optional<MfuVerdict> v = quiet.Decide();
  REQUIRE(v.has_value());
  CHECK(!v->group.has_value());
  CHECK(v->machines_to_evict.empty());
  // A sliding window: only the last five rounds count.
  MfuDropRounds sliding(layout);
  for (int i = 0; i < 3; ++i) sliding.RecordRound(a);
  for (int i = 0; i < 5; ++i) sliding.RecordRound(b);
  CHECK(*sliding.Decide()->group == b);
  CHECK(sliding.Decide()->flags == 5);
}

}  // namespace
}  // namespace peregrine
