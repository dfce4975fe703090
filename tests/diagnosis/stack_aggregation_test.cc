#include "diagnosis/stack_aggregation.h"

#include <string>

#include <catch2/catch.hpp>

#include "tests/diagnosis/stack_fixtures.h"
#include "tests/testing/layout.h"

namespace peregrine {
namespace {

using testing::Layout;

// A one-process, one-thread rank whose main thread is in the given frames (innermost
// first); addresses and ids vary per rank, as they do in real captures.
RankStacks Synthetic(int rank, std::vector<std::string> functions) {
  ProcessStack p;
  p.pid = 1000 + rank;
  p.tool = "py-spy";
  ThreadStack t;
  t.thread_id = p.pid;
  t.thread_name = "MainThread";
  int line = 10 + rank;  // line numbers differ between ranks and must not split groups
  for (const std::string& f : functions) {
    t.frames.push_back({f, "/venv" + std::to_string(rank) + "/megatron/schedules.py", line++,
                        "", 0x1000u + static_cast<uint64_t>(rank)});
  }
  p.threads.push_back(t);
  return {rank, {p}};
}

const std::vector<std::string> kHealthy = {"all_reduce", "reduce_gradients", "step", "train"};

TEST_CASE("stack aggregation: function-name normalisation", "[unit]") {
  CHECK(NormalizeFunctionName("demo::RecvActivations(int)") == "demo::RecvActivations");
  CHECK(NormalizeFunctionName(
            "void std::this_thread::sleep_for<long, std::ratio<1l, 1l> >(std::chrono::duration<"
            "long, std::ratio<1l, 1l> > const&)") == "std::this_thread::sleep_for");
  CHECK(NormalizeFunctionName("std::thread::_Invoker<std::tuple<void (*)()> >::operator()()") ==
        "std::thread::_Invoker::operator_call");
  CHECK(NormalizeFunctionName("__libc_start_main@@GLIBC_2.34") == "__libc_start_main");
  CHECK(NormalizeFunctionName("clock_nanosleep@GLIBC_2.2.5") == "clock_nanosleep");
  CHECK(NormalizeFunctionName("__GI___libc_read") == "__libc_read");
  CHECK(NormalizeFunctionName("<module>") == "<module>");
  CHECK(NormalizeFunctionName("forward") == "forward");
  CHECK(NormalizeFunctionName("") == "??");
  CHECK(NormalizeFunctionName(
            "void std::condition_variable::wait<demo::AllReduceGradients()::{lambda()#1}>("
            "std::unique_lock<std::mutex>&, demo::AllReduceGradients()::{lambda()#1})") ==
        "std::condition_variable::wait");
  CHECK(NormalizeFrame({"f(int)", "/a/b/model.py", 12, "", 0x10}, false) == "f @ model.py");
  CHECK(NormalizeFrame({"f(int)", "/a/b/model.py", 12, "", 0x10}, true) == "f @ model.py:12");
  CHECK(NormalizeFrame({"??", "", 0, "/lib/libc.so.6", 0x10}, false) == "?? @ libc.so.6");
}

TEST_CASE("stack aggregation: real gdb and eu-stack captures find the hung rank", "[unit]") {
  // Four real processes: ranks 0-2 blocked in a "collective", rank 3 in a "p2p receive".
  // TP=1 PP=2 DP=2, one GPU per machine.
  const ParallelLayout layout = Layout(1, 2, 2, 1);
  for (const char* tool : {"gdb", "eustack"}) {
    INFO(tool);
    std::vector<RankStacks> ranks;
    for (int r = 0; r < 4; ++r) {
      const std::string text = StackFixture(std::string(tool) + "_rank" + std::to_string(r) + ".txt");
      absl::StatusOr<std::vector<ProcessStack>> parsed =
          ParseStackText(std::string(tool) == "gdb" ? StackTool::kGdb : StackTool::kEuStack, text);
      REQUIRE(parsed.ok());
      ranks.push_back({r, *parsed});
    }
    // Different pids, thread ids and addresses, same state: same signature.
    CHECK(RankSignature(ranks[0]) == RankSignature(ranks[1]));
    CHECK(RankSignature(ranks[0]) == RankSignature(ranks[2]));
    CHECK(RankSignature(ranks[0]) != RankSignature(ranks[3]));
    absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
    REQUIRE(agg.ok());
    REQUIRE(agg->groups.size() == 2);
    CHECK(agg->dominant_group == 0);
    CHECK(agg->groups[0].ranks == std::vector<int>{0, 1, 2});
    CHECK(agg->suspect_ranks == std::vector<int>{3});
    REQUIRE(agg->chosen_group.has_value());
    CHECK(agg->chosen_group->kind == GroupKind::kTensor);  // TP=1: the rank's own machine
    CHECK(agg->machines_to_evict == std::vector<int>{3});
    CHECK(agg->explanation.find("RecvActivations") != std::string::npos);
  }
}

TEST_CASE("stack aggregation: a hung pipeline evicts that pipeline group", "[unit]") {
  // ByteRobust Figure 7 in this project's rank order: TP=2 PP=4 DP=4, 2 GPUs per machine.
  // The pipeline of DP replica 1 hangs in backward: the last stage in all_gather, the
  // others in isend/irecv; every other rank has reached the optimizer's all-reduce.
  const ParallelLayout layout = Layout(2, 4, 4, 2);
  std::vector<RankStacks> ranks;
  for (int r = 0; r < layout.world_size(); ++r) {
    const RankCoordinates c = layout.Coordinates(r);
    if (c.dp != 1) {
      ranks.push_back(Synthetic(r, kHealthy));
    } else if (c.pp == 3) {
      ranks.push_back(Synthetic(r, {"all_gather_into_tensor", "backward_step", "train"}));
    } else if (c.pp == 2) {
      ranks.push_back(Synthetic(r, {"isend", "send_backward", "backward_step", "train"}));
    } else {
      ranks.push_back(Synthetic(r, {"irecv", "recv_backward", "backward_step", "train"}));
    }
  }
  absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
  REQUIRE(agg.ok());
  CHECK(agg->groups.size() == 4);
  CHECK(agg->groups[0].ranks.size() == 24);
  CHECK(agg->suspect_ranks.size() == 8);
  REQUIRE(agg->chosen_group.has_value());
  CHECK(agg->chosen_group->kind == GroupKind::kPipeline);
  const CommGroup expected =
      layout.Group(GroupKind::kPipeline, layout.GroupIndexOf(GroupKind::kPipeline,
                                                             layout.RankOf({0, 0, 1})));
  CHECK(agg->chosen_group->index == expected.index);
  std::vector<int> machines = layout.MachinesOfGroup(expected);
  std::sort(machines.begin(), machines.end());
  CHECK(agg->machines_to_evict == machines);
  CHECK(machines.size() == 4);
  CHECK(agg->explanation.find("pp group") != std::string::npos);
}

TEST_CASE("stack aggregation: one rank in a different frame evicts its smallest group",
          "[unit]") {
  struct Case {
    const char* name;
    int gpus_per_machine;
    std::vector<int> machines_to_evict;
  };
  const Case cases[] = {
      {"two GPUs per machine = one TP group per machine: the rank's machine alone", 2, {6}},
      {"one GPU per machine: the TP group (2 machines) is smaller than PP or DP (4)", 1, {12, 13}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const ParallelLayout layout = Layout(2, 4, 4, c.gpus_per_machine);
    std::vector<RankStacks> ranks;
    for (int r = 0; r < layout.world_size(); ++r) {
      ranks.push_back(Synthetic(r, r == 13 ? std::vector<std::string>{"nan_check", "step", "train"}
                                           : kHealthy));
    }
    absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
    REQUIRE(agg.ok());
    CHECK(agg->suspect_ranks == std::vector<int>{13});
    REQUIRE(agg->chosen_group.has_value());
    CHECK(agg->chosen_group->kind == GroupKind::kTensor);
    CHECK(agg->machines_to_evict == c.machines_to_evict);
  }
}

TEST_CASE("stack aggregation: identical stacks evict nothing", "[unit]") {
  const ParallelLayout layout = Layout(2, 2, 2, 2);
  std::vector<RankStacks> ranks;
  for (int r = 0; r < layout.world_size(); ++r) ranks.push_back(Synthetic(r, kHealthy));
  absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
  REQUIRE(agg.ok());
  CHECK(agg->groups.size() == 1);
  CHECK(agg->dominant_group == 0);
  CHECK(agg->suspect_ranks.empty());
  CHECK(!agg->chosen_group.has_value());
  CHECK(agg->machines_to_evict.empty());
  CHECK(agg->explanation.find("nothing to evict") != std::string::npos);
}

TEST_CASE("stack aggregation: no healthy majority, union fallback, missing ranks", "[unit]") {
  const ParallelLayout layout = Layout(1, 2, 2, 1);
  {
    std::vector<RankStacks> ranks = {Synthetic(0, kHealthy), Synthetic(1, kHealthy),
                                     Synthetic(2, {"irecv"}), Synthetic(3, {"irecv"})};
    absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
    REQUIRE(agg.ok());
    CHECK(agg->dominant_group == -1);
    CHECK(agg->machines_to_evict.empty());
    CHECK(agg->explanation.find("no dominant stack") != std::string::npos);
  }
  {
    // Ranks 0 (pp0,dp0) and 3 (pp1,dp1) share no TP, PP or DP group.
    std::vector<RankStacks> ranks;
    for (int r = 0; r < 8; ++r) {
      ranks.push_back(Synthetic(r, kHealthy));
    }
    const ParallelLayout bigger = Layout(1, 2, 4, 1);
    ranks[0] = Synthetic(0, {"irecv"});
    ranks[7] = Synthetic(7, {"isend"});
    absl::StatusOr<StackAggregation> agg = AggregateStacks(bigger, ranks);
    REQUIRE(agg.ok());
    CHECK(agg->suspect_ranks == std::vector<int>{0, 7});
    CHECK(!agg->chosen_group.has_value());
    CHECK(agg->machines_to_evict == std::vector<int>{0, 7});
    CHECK(agg->explanation.find("union") != std::string::npos);
  }
  {
    // A rank with no capture is an outlier of its own.
    std::vector<RankStacks> ranks = {Synthetic(0, kHealthy), Synthetic(1, kHealthy),
                                     Synthetic(3, kHealthy)};
    absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
    REQUIRE(agg.ok());
    CHECK(agg->suspect_ranks == std::vector<int>{2});
    CHECK(agg->explanation.find("no stack captured") != std::string::npos);
  }
  CHECK(AggregateStacks(layout, {Synthetic(4, kHealthy)}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(AggregateStacks(layout, {Synthetic(1, kHealthy), Synthetic(1, kHealthy)})
            .status()
            .code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("stack aggregation: thread selection and line numbers", "[unit]") {
  // py-spy capture: a helper thread active on one rank, idle on the other.
  absl::StatusOr<std::vector<ProcessStack>> dump = ParsePySpyDump(StackFixture("pyspy_dump_rank5.txt"));
  REQUIRE(dump.ok());
  RankStacks a{0, *dump};
  RankStacks b{1, *dump};
  b.processes[0].threads[2].frames.erase(b.processes[0].threads[2].frames.begin());
  CHECK(RankSignature(a) != RankSignature(b));
  StackAggregationOptions main_only;
  main_only.threads = ThreadSelection::kMainThread;
  CHECK(RankSignature(a, main_only) == RankSignature(b, main_only));
  // Line numbers: ignored by default, significant on request.
  RankStacks c{2, *dump};
  c.processes[0].threads[0].frames[0].line += 3;
  CHECK(RankSignature(a) == RankSignature(c));
  StackAggregationOptions lines;
  lines.keep_line_numbers = true;
  CHECK(RankSignature(a, lines) != RankSignature(c, lines));
  // Only the innermost frames when asked.
  RankStacks d{3, *dump};
  d.processes[0].threads[0].frames.back().function = "other_entry";
  StackAggregationOptions top2;
  top2.max_frames = 2;
  CHECK(RankSignature(a) != RankSignature(d));
  CHECK(RankSignature(a, top2) == RankSignature(d, top2));
}

}  // namespace
}  // namespace peregrine
