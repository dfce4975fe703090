#include "diagnosis/parallel_layout.h"

#include <catch2/catch.hpp>
#include <set>

namespace peregrine {
namespace {

TEST_CASE("ParallelLayout maps ranks in Megatron order", "[unit]") {
  auto layout = ParallelLayout::Create(2, 2, 2, 2);
  REQUIRE(layout.ok());
  CHECK(layout->world_size() == 8);
  CHECK(layout->machines() == 4);
  CHECK(layout->Coordinates(0) == RankCoordinates{0, 0, 0});
  CHECK(layout->Coordinates(1) == RankCoordinates{1, 0, 0});
  CHECK(layout->Coordinates(2) == RankCoordinates{0, 0, 1});
  CHECK(layout->Coordinates(4) == RankCoordinates{0, 1, 0});
  CHECK(layout->Group(GroupKind::kTensor, 1).ranks == std::vector<int>{2, 3});
  CHECK(layout->Group(GroupKind::kPipeline, 0).ranks == std::vector<int>{0, 4});
  CHECK(layout->Group(GroupKind::kData, 0).ranks == std::vector<int>{0, 2});
  CHECK(layout->MachinesOfGroup(layout->Group(GroupKind::kPipeline, 0)) == std::vector<int>{0, 2});
}

TEST_CASE("ParallelLayout groups partition the ranks for every kind", "[unit]") {
  for (auto [t, p, d, g] : {std::array{1, 1, 1, 1}, std::array{2, 3, 4, 8}, std::array{4, 2, 6, 4},
                            std::array{8, 4, 3, 8}}) {
    auto layout = ParallelLayout::Create(t, p, d, g);
    REQUIRE(layout.ok());
    for (GroupKind kind : {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData}) {
      std::multiset<int> seen;
      for (const CommGroup& group : layout->Groups(kind)) {
        CHECK(static_cast<int>(group.ranks.size()) == layout->GroupSize(kind));
        for (int r : group.ranks) {
          seen.insert(r);
          CHECK(layout->GroupIndexOf(kind, r) == group.index);
        }
      }
      CHECK(static_cast<int>(seen.size()) == layout->world_size());
      CHECK(std::set<int>(seen.begin(), seen.end()).size() == seen.size());
    }
    for (int r = 0; r < layout->world_size(); ++r) CHECK(layout->RankOf(layout->Coordinates(r)) == r);
  }
}

TEST_CASE("ParallelLayout::Create names the bad field", "[unit]") {
  CHECK(ParallelLayout::Create(0, 1, 1, 1).status().message().find("parallelism.tensor") != std::string::npos);
  CHECK(ParallelLayout::Create(1, 1, 1, 0).status().message().find("gpusPerMachine") != std::string::npos);
  CHECK(ParallelLayout::Create(3, 1, 1, 2).status().message().find("not a multiple") != std::string::npos);
}

}  // namespace
}  // namespace peregrine
