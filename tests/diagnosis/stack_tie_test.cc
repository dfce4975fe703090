// Hang verdicts when the largest stack groups tie: activity (idle signatures, collective
// waits) and the parallel layout decide, with a stated confidence.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "diagnosis/stack_aggregation.h"
#include "tests/diagnosis/stack_fixtures.h"
#include "tests/testing/layout.h"

namespace peregrine {
namespace {

using testing::Layout;

// A one-process rank whose main thread is in `frames` ({function, file}, innermost first).
RankStacks Rank(int rank, const std::vector<std::pair<std::string, std::string>>& frames) {
  ProcessStack p;
  p.pid = 4000 + rank;
  p.tool = "py-spy";
  ThreadStack t;
  t.thread_id = p.pid;
  t.thread_name = "MainThread";
  for (const auto& [function, file] : frames) t.frames.push_back({function, file, 10 + rank, "", 0});
  p.threads.push_back(t);
  return {rank, {p}};
}

const std::vector<std::pair<std::string, std::string>> kDpAllReduce = {
    {"all_reduce", "torch/distributed/distributed_c10d.py"}, {"finish_grad_sync", "megatron/ddp.py"},
    {"train_step", "megatron/training.py"}};
const std::vector<std::pair<std::string, std::string>> kTpAllReduce = {
    {"all_reduce", "torch/distributed/distributed_c10d.py"}, {"reduce_from_tp_region", "megatron/mappings.py"},
    {"forward", "megatron/transformer.py"}, {"train_step", "megatron/training.py"}};
const std::vector<std::pair<std::string, std::string>> kDataLoader = {
    {"wait", "threading.py"}, {"get", "queue.py"}, {"_try_get_data", "torch/utils/data/dataloader.py"},
    {"__next__", "torch/utils/data/dataloader.py"}, {"train_step", "megatron/training.py"}};

// The 16 ranks of tests/diagnosis/testdata/stacks/tie_dataloader (README there).
std::vector<RankStacks> TieFixture() {
  std::vector<RankStacks> ranks;
  for (int r = 0; r < 16; ++r) {
    absl::StatusOr<std::vector<ProcessStack>> p =
        ParsePySpyDump(StackFixture(absl::StrCat("tie_dataloader/rank-", r, ".txt")));
    REQUIRE(p.ok());
    ranks.push_back({r, *p});
  }
  return ranks;
}

TEST_CASE("stack tie: 16 ranks, two groups of 7 tie, a lone rank idles in its DataLoader", "[unit]") {
  // TP=1 PP=2 DP=8, 4 GPUs per machine: stage 0 is ranks 0-7, stage 1 ranks 8-15.
  const ParallelLayout layout = Layout(1, 2, 8, 4);
  absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, TieFixture());
  REQUIRE(agg.ok());
  INFO(agg->explanation);
  REQUIRE(agg->groups.size() == 4);
  CHECK(agg->groups[0].ranks == std::vector<int>{0, 1, 2, 3, 4, 6, 7});
  CHECK(agg->groups[1].ranks == std::vector<int>{8, 9, 10, 11, 12, 14, 15});
  CHECK(agg->groups[0].kind == FrameKind::kCollectiveWait);
  CHECK(agg->groups[1].kind == FrameKind::kCollectiveWait);
  CHECK(agg->groups[2].ranks == std::vector<int>{5});
  CHECK(agg->groups[2].kind == FrameKind::kDataLoading);
  CHECK(agg->groups[2].kind_frame == "_try_get_data @ dataloader.py");
  CHECK(agg->groups[3].ranks == std::vector<int>{13});
  CHECK(agg->groups[3].kind == FrameKind::kCollectiveWait);  // recv_forward from rank 5
  CHECK(agg->groups[2].distinguishing_frames.front() == "wait @ threading.py");
  CHECK(agg->suspect_groups == std::vector<int>{2});
  CHECK(agg->suspect_ranks == std::vector<int>{5});
  CHECK(agg->dominant_group == 0);
  REQUIRE(agg->chosen_group.has_value());
  CHECK(agg->chosen_group->kind == GroupKind::kTensor);  // TP=1: rank 5 alone
  CHECK(agg->machines_to_evict == std::vector<int>{1});
  CHECK(agg->confidence == VerdictConfidence::kHigh);
  CHECK(agg->confidence_reason.find("idle signature") != std::string::npos);
  const std::string first_line = agg->explanation.substr(0, agg->explanation.find('\n'));
  CHECK(first_line.find("Confidence: high (tie broken by idle signature") != std::string::npos);
}

TEST_CASE("stack tie: an exact tie with no signal evicts nothing, low confidence", "[unit]") {
  const ParallelLayout layout = Layout(2, 1, 2, 2);
  // Ranks 0,1 in the DP all-reduce, 2,3 in a TP all-reduce: both groups wait in collectives.
  absl::StatusOr<StackAggregation> agg =
      AggregateStacks(layout, {Rank(0, kDpAllReduce), Rank(1, kDpAllReduce), Rank(2, kTpAllReduce),
                               Rank(3, kTpAllReduce)});
  REQUIRE(agg.ok());
  CHECK(agg->dominant_group == -1);
  CHECK(agg->suspect_ranks.empty());
  CHECK(agg->machines_to_evict.empty());
  CHECK(agg->confidence == VerdictConfidence::kLow);
  CHECK(agg->confidence_reason == "tie, no signal: evict nothing, capture again");
  CHECK(agg->explanation.find("nothing evicted") != std::string::npos);
}

TEST_CASE("stack tie: the idle group is a suspect even when it is one of the tied groups", "[unit]") {
  // TP=2 DP=2, one machine per TP group: ranks 0,1 wait in the DP all-reduce for ranks
  // 2,3, which wait for their data. Sizes tie; the idle signature names machine 1.
  const ParallelLayout layout = Layout(2, 1, 2, 2);
  absl::StatusOr<StackAggregation> agg =
      AggregateStacks(layout, {Rank(0, kDpAllReduce), Rank(1, kDpAllReduce), Rank(2, kDataLoader),
                               Rank(3, kDataLoader)});
  REQUIRE(agg.ok());
  CHECK(agg->suspect_ranks == std::vector<int>{2, 3});
  CHECK(agg->machines_to_evict == std::vector<int>{1});
  CHECK(agg->confidence == VerdictConfidence::kMedium);  // not a minority
}

TEST_CASE("stack tie: ranks outside any collective break a tie when none idles", "[unit]") {
  // TP=1 PP=2 DP=4, one GPU per machine. Rank 1 hangs in compute; its DP peers of stage 0
  // wait in the all-reduce (3 ranks), stage 1 in a pipeline receive (3 ranks; rank 5 in
  // another p2p call): the two largest groups tie, and every group but rank 1's waits.
  const ParallelLayout layout = Layout(1, 2, 4, 1);
  const std::vector<std::pair<std::string, std::string>> compute = {
      {"forward", "model.py"}, {"train_step", "megatron/training.py"}};
  const std::vector<std::pair<std::string, std::string>> recv = {
      {"recv_forward", "megatron/p2p_communication.py"}, {"train_step", "megatron/training.py"}};
  const std::vector<std::pair<std::string, std::string>> recv_backward = {
      {"recv_backward", "megatron/p2p_communication.py"}, {"train_step", "megatron/training.py"}};
  std::vector<RankStacks> ranks = {Rank(0, kDpAllReduce), Rank(1, compute), Rank(2, kDpAllReduce),
                                   Rank(3, kDpAllReduce)};
  for (int r = 4; r < 8; ++r) ranks.push_back(Rank(r, r == 5 ? recv_backward : recv));
  absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
  REQUIRE(agg.ok());
  INFO(agg->explanation);
  CHECK(agg->groups[0].ranks.size() == 3);  // 4,6,7
  CHECK(agg->suspect_ranks == std::vector<int>{1});
  CHECK(agg->confidence == VerdictConfidence::kMedium);
  CHECK(agg->confidence_reason.find("outside any collective") != std::string::npos);
  CHECK(agg->machines_to_evict == std::vector<int>{1});
}

TEST_CASE("stack tie: a near tie with no signal falls back to size, low confidence", "[unit]") {
  const ParallelLayout layout = Layout(1, 1, 7, 1);
  std::vector<RankStacks> ranks;
  for (int r = 0; r < 7; ++r) ranks.push_back(Rank(r, r < 4 ? kDpAllReduce : kTpAllReduce));
  absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
  REQUIRE(agg.ok());
  CHECK(agg->dominant_group == 0);
  CHECK(agg->suspect_ranks == std::vector<int>{4, 5, 6});
  CHECK(agg->confidence == VerdictConfidence::kLow);
  CHECK(agg->confidence_reason.find("near tie decided by size alone") != std::string::npos);
}

TEST_CASE("stack tie: confidence of clear verdicts", "[unit]") {
  const ParallelLayout layout = Layout(1, 1, 8, 1);
  std::vector<RankStacks> ranks;
  for (int r = 0; r < 8; ++r) ranks.push_back(Rank(r, kDpAllReduce));
  absl::StatusOr<StackAggregation> same = AggregateStacks(layout, ranks);
  REQUIRE(same.ok());
  CHECK(same->confidence == VerdictConfidence::kHigh);
  ranks[6] = Rank(6, kDataLoader);
  absl::StatusOr<StackAggregation> one = AggregateStacks(layout, ranks);
  REQUIRE(one.ok());
  CHECK(one->suspect_ranks == std::vector<int>{6});
  CHECK(one->confidence == VerdictConfidence::kHigh);
  CHECK(one->confidence_reason == "unique minority group");
  CHECK(one->explanation.find("Confidence: high (unique minority group).") != std::string::npos);
  ranks[7] = Rank(7, kTpAllReduce);
  absl::StatusOr<StackAggregation> two = AggregateStacks(layout, ranks);
  REQUIRE(two.ok());
  CHECK(two->suspect_ranks == std::vector<int>{6, 7});
  CHECK(two->confidence == VerdictConfidence::kMedium);
  CHECK(two->suspect_groups == std::vector<int>{1, 2});
}

}  // namespace
}  // namespace peregrine
