// MatchCommsToGroups: joining per-rank communicator observations into TP/PP/DP groups.
#include "diagnosis/comm_groups.h"

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

// Every rank of a TP=2 PP=2 DP=2 job reports the communicators it would create.
std::vector<CommObservation> Observe(const ParallelLayout& layout) {
  std::vector<CommObservation> obs;
  for (int g = 0; g < layout.world_size(); ++g) {
    obs.push_back({/*comm_id=*/1000, g, g, layout.world_size()});
    for (GroupKind kind : {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData}) {
      const int index = layout.GroupIndexOf(kind, g);
      const CommGroup group = layout.Group(kind, index);
      int rank_in_group = -1;
      for (size_t i = 0; i < group.ranks.size(); ++i) {
        if (group.ranks[i] == g) rank_in_group = static_cast<int>(i);
      }
      const uint64_t id = 2000 + 100 * static_cast<uint64_t>(kind) + static_cast<uint64_t>(index);
      obs.push_back({id, g, rank_in_group, static_cast<int>(group.ranks.size())});
    }
  }
  return obs;
}

TEST_CASE("observed communicators map onto the layout's TP, PP and DP groups", "[unit]") {
  auto layout = ParallelLayout::Create(2, 2, 2, 4);
  REQUIRE(layout.ok());
  auto matches = MatchCommsToGroups(Observe(*layout), *layout);
  REQUIRE(matches.ok());
  REQUIRE(matches->size() == 1 + 4 + 4 + 4);
  for (const CommGroupMatch& m : *matches) {
    REQUIRE(m.complete);
    if (m.comm_id == 1000) {
      CHECK(m.world);
      CHECK_FALSE(m.kind.has_value());
      continue;
    }
    const auto kind = static_cast<GroupKind>((m.comm_id - 2000) / 100);
    const int index = static_cast<int>((m.comm_id - 2000) % 100);
    REQUIRE(m.kind.has_value());
    CHECK(*m.kind == kind);
    CHECK(m.group_index == index);
    CHECK(m.members == layout->Group(kind, index).ranks);
  }
}

TEST_CASE("partial and foreign communicators are reported without a group", "[unit]") {
  auto layout = ParallelLayout::Create(2, 2, 2, 4);
  REQUIRE(layout.ok());
  std::vector<CommObservation> obs = {
      {7, 0, 0, 2},                  // only one of two ranks reported
      {8, 0, 0, 2}, {8, 3, 1, 2},   // {0,3}: no TP/PP/DP group
      {0, 1, 0, 2},                  // id 0: ignored
      {9, -1, 0, 2},                 // unknown global rank: ignored
  };
  auto matches = MatchCommsToGroups(obs, *layout);
  REQUIRE(matches.ok());
  REQUIRE(matches->size() == 2);
  CHECK((*matches)[0].comm_id == 7);
  CHECK_FALSE((*matches)[0].complete);
  CHECK((*matches)[0].members == std::vector<int>{0, -1});
  CHECK((*matches)[1].complete);
  CHECK_FALSE((*matches)[1].kind.has_value());
  CHECK_FALSE((*matches)[1].world);
}

TEST_CASE("contradicting observations are rejected", "[unit]") {
  auto layout = ParallelLayout::Create(2, 2, 2, 4);
  REQUIRE(layout.ok());
  using Obs = std::vector<CommObservation>;
  CHECK(MatchCommsToGroups(Obs{{5, 0, 0, 2}, {5, 1, 0, 2}}, *layout).status().code() ==
        absl::StatusCode::kInvalidArgument);  // rank 0 claimed twice
  CHECK(MatchCommsToGroups(Obs{{5, 0, 0, 2}, {5, 1, 1, 4}}, *layout).status().code() ==
        absl::StatusCode::kInvalidArgument);  // sizes differ
  CHECK(MatchCommsToGroups(Obs{{5, 0, 2, 2}}, *layout).status().code() ==
        absl::StatusCode::kInvalidArgument);  // rank outside size
  CHECK(MatchCommsToGroups(Obs{{5, 8, 0, 2}}, *layout).status().code() ==
        absl::StatusCode::kInvalidArgument);  // outside the world
  CHECK(MatchCommsToGroups(Obs{{5, 1, 0, 2}, {5, 1, 1, 2}}, *layout).status().code() ==
        absl::StatusCode::kInvalidArgument);  // one process, two ranks
}

}  // namespace
}  // namespace peregrine
