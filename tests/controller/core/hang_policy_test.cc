// DecideHang (controller/hang_policy.h): hang detection, capture rounds, aggregation and
// over-eviction, MFU-drop rounds; synthetic stacks with known answers.
#include "controller/core/hang_policy.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <set>

#include "tests/testing/layout.h"

namespace peregrine {
namespace {

using testing::Layout;  // the demo's by default: TP=2 PP=2 DP=2 on 4 machines x 2 GPUs

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kT0 = 1'700'000'000 * kSecond;

ProcessStack Stack(int pid, std::vector<std::string> innermost_first) {
  ProcessStack p;
  p.pid = pid;
  p.tool = "eu-stack";
  ThreadStack t;
  t.thread_id = pid;
  for (const std::string& f : innermost_first) {
    StackFrame frame;
    frame.function = f;
    frame.address = 0x400000 + static_cast<uint64_t>(pid) * 16;  // differs per process: normalised away
    t.frames.push_back(frame);
  }
  p.threads.push_back(t);
  return p;
}

const std::vector<std::string> kDpAllReduce = {"__GI___poll", "Exchange", "RingAllReduce", "ncclAllReduce",
                                               "DpGradientAllReduce", "TrainStep", "main"};
const std::vector<std::string> kHungCompute = {"clock_nanosleep@@GLIBC_2.17", "WaitWhileHung", "Compute",
                                               "Forward", "TrainStep", "main"};
const std::vector<std::string> kPipelineRecv = {"__GI___poll", "RecvExact", "ncclRecv", "Forward", "TrainStep",
                                                "main"};
const std::vector<std::string> kSlowGemm = {"sgemm_kernel", "Compute", "Forward", "TrainStep", "main"};

struct Fixture {
  ParallelLayout layout = Layout();
  HangPolicyInput in;
  int64_t now = kT0;

  Fixture() {
    in.command_prefix = "default/demo";
    in.layout = &layout;
    in.hang_timeout_seconds = 60;
    in.attempt = 1;
    in.resume_step = 0;
    in.last_completed_step = 40;
    in.mean_iteration_seconds = 0.5;
    in.recent_iteration_seconds = 0.5;
    in.steady = true;
    for (int s = 0; s < 4; ++s) {
      in.slots.push_back(HangPolicySlot{s, "demo-m" + std::to_string(s), "machine-" + std::to_string(10 + s), true});
      in.slots.back().agent_connected = true;
    }
  }
  std::set<int> silent;  // slots whose agents stopped heartbeating (a half-open stream)
  // One round of the policy; the state carries over as the engine persists it. The agents
  // not silent heartbeat now.
  HangDecision Decide() {
    for (HangPolicySlot& s : in.slots) {
      if (!silent.count(s.index)) s.agent_last_seen = now;
    }
    HangDecision d = DecideHang(in, now);
    in.state = d.state;
    for (const StackCaptureRequest& c : d.captures) in.pending.insert(c.command_id);
    return d;
  }
  // The pod of `slot` answers capture `id` with a stack per rank.
  void Answer(const std::string& id, int slot, const std::map<int, std::vector<std::string>>& stacks) {
    StackCaptureReply r;
    r.ok = true;
    for (const auto& [rank, frames] : stacks) r.stacks[rank].push_back(Stack(1000 + rank, frames));
    REQUIRE(slot >= 0);
    in.replies[id] = r;
    in.pending.erase(id);
  }
  std::string Id(int slot, uint64_t investigation, int round) const {
    return StackCaptureCommandId(in.command_prefix, in.slots[slot].pod, investigation, round);
  }
  // A hang is detected: the progress watch starts at kT0 and the timeout passes.
  HangDecision DetectHang() {
    HangDecision first = Decide();
    REQUIRE(first.verdict == HangVerdict::kNone);
    now = kT0 + 60 * kSecond;
    return Decide();
  }
};

// The demo's pipeline-stage hang: machine 0 (ranks 0,1; stage 0 of dp 0) hangs in its
// compute; their stage-1 peers (4,5 on machine 2) wait in the pipeline receive; dp 1's
// pipeline (machines 1 and 3) finishes its micro-batches and waits in the DP all-reduce.
std::map<int, std::map<int, std::vector<std::string>>> PipelineStageHang() {
  return {{0, {{0, kHungCompute}, {1, kHungCompute}}},
          {1, {{2, kDpAllReduce}, {3, kDpAllReduce}}},
          {2, {{4, kPipelineRecv}, {5, kPipelineRecv}}},
          {3, {{6, kDpAllReduce}, {7, kDpAllReduce}}}};
}

TEST_CASE("The hang timeout is max(hangTimeoutSeconds, 10 mean iterations)", "[unit]") {
  CHECK(HangTimeoutNanos(60, 0.5) == 60 * kSecond);
  CHECK(HangTimeoutNanos(60, 9.0) == 90 * kSecond);
  CHECK(HangTimeoutNanos(5, 0) == 5 * kSecond);
  CHECK(HangTimeoutNanos(0, 0) == 1 * kSecond);  // never zero
  CHECK(StackCaptureCommandId("ns/job", "job-m1", 3, 2) == "ns/job/job-m1/stacks-3-2");
}

TEST_CASE("A hang is detected after the timeout and stacks are captured once from every pod", "[unit]") {
  Fixture f;
  HangDecision d = f.Decide();
  CHECK(d.verdict == HangVerdict::kNone);
  CHECK(d.wake_at == kT0 + 60 * kSecond);
  f.now = kT0 + 59 * kSecond;
  CHECK(f.Decide().verdict == HangVerdict::kNone);

  f.now = kT0 + 60 * kSecond;
  d = f.Decide();
  REQUIRE(d.verdict == HangVerdict::kHangDetected);
  CHECK(d.kind == InvestigationKind::kHang);
  CHECK_THAT(d.signal, Catch::Contains("no step for 60.0 s"));
  CHECK(d.hold_until > f.now);
  REQUIRE(d.captures.size() == 4);
  std::set<std::string> ids;
  for (const StackCaptureRequest& c : d.captures) ids.insert(c.command_id);
  CHECK(ids == std::set<std::string>{f.Id(0, 1, 1), f.Id(1, 1, 1), f.Id(2, 1, 1), f.Id(3, 1, 1)});
  REQUIRE(f.in.state.investigations.size() == 1);
  CHECK(f.in.state.investigations[0].state == InvestigationState::kCapturing);

  // Pending captures are not sent again; nothing else happens while they are outstanding.
  f.now += kSecond;
  d = f.Decide();
  CHECK(d.verdict == HangVerdict::kNone);
  CHECK(d.captures.empty());
  // A restarted controller (pending ids forgotten) re-sends the same ids.
  f.in.pending.clear();
  d = f.Decide();
  CHECK(d.captures.size() == 4);
  CHECK(d.captures[0].command_id == f.Id(0, 1, 1));
  CHECK(f.in.state.investigations.size() == 1);
}

TEST_CASE("No hang is declared while a process is down, before the first step or outside steady running",
          "[unit]") {
  for (int variant = 0; variant < 3; ++variant) {
    Fixture f;
    if (variant == 0) f.in.slots[2].training_alive = false;
    if (variant == 1) f.in.last_completed_step = f.in.resume_step;  // the start timeout's business
    if (variant == 2) f.in.steady = false;
    f.Decide();
    f.now = kT0 + 600 * kSecond;
    HangDecision d = f.Decide();
    CHECK(d.verdict == HangVerdict::kNone);
    CHECK(d.captures.empty());
    CHECK(f.in.state.investigations.empty());
  }
}

TEST_CASE("Progress resets the hang clock", "[unit]") {
  Fixture f;
  f.Decide();
  f.now = kT0 + 50 * kSecond;
  f.in.last_completed_step = 41;
  f.Decide();
  f.now = kT0 + 100 * kSecond;
  CHECK(f.Decide().verdict == HangVerdict::kNone);
  f.now = kT0 + 110 * kSecond;
  CHECK(f.Decide().verdict == HangVerdict::kHangDetected);
}

TEST_CASE("A hold (NCCL trapped for a fail-slow validation) is not a hang and restarts the hang clock", "[unit]") {
  Fixture f;
  f.Decide();
  f.in.held = true;
  f.now = kT0 + 90 * kSecond;  // well past the timeout, but training is held on purpose
  CHECK(f.Decide().verdict == HangVerdict::kNone);
  f.in.held = false;
  f.now = kT0 + 140 * kSecond;  // 50 s after the hold ended: under the 60 s timeout
  CHECK(f.Decide().verdict == HangVerdict::kNone);
  f.now = kT0 + 151 * kSecond;
  CHECK(f.Decide().verdict == HangVerdict::kHangDetected);
}

TEST_CASE("A pipeline-stage hang over-evicts that pipeline group's machines", "[unit]") {
  Fixture f;
  REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
  const auto stacks = PipelineStageHang();
  for (int slot : {0, 1, 2}) f.Answer(f.Id(slot, 1, 1), slot, stacks.at(slot));
  f.now += 2 * kSecond;
  CHECK(f.Decide().verdict == HangVerdict::kNone);  // slot 3 has not answered yet
  f.Answer(f.Id(3, 1, 1), 3, stacks.at(3));
  f.now += kSecond;
  HangDecision d = f.Decide();
  REQUIRE(d.verdict == HangVerdict::kEvict);
  CHECK(d.kind == InvestigationKind::kHang);
  CHECK(d.evict_slots == std::vector<int>{0, 2});
  const StackInvestigation& inv = f.in.state.investigations.back();
  CHECK(inv.state == InvestigationState::kDecided);
  CHECK(inv.chosen_group == "pp 0");
  CHECK(inv.machines == std::vector<std::string>{"machine-10", "machine-12"});
  REQUIRE(inv.rounds.size() == 1);
  CHECK(inv.rounds[0].suspect_ranks == std::vector<int>{0, 1, 4, 5});
  REQUIRE(inv.rounds[0].groups.size() == 3);
  CHECK_THAT(inv.rounds[0].groups[0], Catch::StartsWith("ranks 2,3,6,7 (healthy)"));
  CHECK_THAT(d.reason, Catch::Contains("pp 0 over-evicted"));
  bool listed = false;
  for (const std::string& line : d.details) listed |= line.find("suspect ranks 0,1,4,5") != std::string::npos;
  CHECK(listed);

  // The verdict is repeated (not re-decided) until the engine acted: same slots.
  f.now += kSecond;
  d = f.Decide();
  CHECK(d.verdict == HangVerdict::kEvict);
  CHECK(d.evict_slots == std::vector<int>{0, 2});
  CHECK(d.captures.empty());
  // The engine evicted and restarted (attempt 2): the investigation is closed, nothing repeats.
  f.in.attempt = 2;
  f.in.resume_step = 40;
  f.now += kSecond;
  d = f.Decide();
  CHECK(d.verdict == HangVerdict::kNone);
  CHECK(f.in.state.investigations.back().state == InvestigationState::kEvicted);
  // The new attempt must make a step before a new hang can be declared.
  f.now += 600 * kSecond;
  CHECK(f.Decide().verdict == HangVerdict::kNone);
}

TEST_CASE("A pod that does not answer by the deadline is itself the suspect", "[unit]") {
  Fixture f;
  REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
  for (int slot : {0, 2, 3}) {
    const int r = slot * 2;
    f.Answer(f.Id(slot, 1, 1), slot, {{r, kDpAllReduce}, {r + 1, kDpAllReduce}});
  }
  f.now += 30 * kSecond;
  HangDecision d = f.Decide();
  CHECK(d.verdict == HangVerdict::kNone);
  CHECK(d.wake_at == kT0 + 60 * kSecond + HangPolicyOptions{}.capture_deadline_ns);
  f.now = d.wake_at;
  d = f.Decide();
  REQUIRE(d.verdict == HangVerdict::kEvict);
  CHECK(d.evict_slots == std::vector<int>{1});
  const StackRound& round = f.in.state.investigations.back().rounds.back();
  CHECK(round.unanswered_slots == std::vector<int>{1});
  CHECK(round.suspect_ranks == std::vector<int>{2, 3});
  CHECK(f.in.state.investigations.back().chosen_group == "tp 1");
}

TEST_CASE("A capture answer lost with the agent's link makes no suspect: half-open, disconnected or dropped stream", "[unit]") {
  for (const std::string how : {"half-open", "disconnected", "dropped and re-registered"}) {
    INFO(how);
    Fixture f;
    REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
    // Every pod but slot 1 answers the same DP all-reduce wait.
    for (int slot : {0, 2, 3}) {
      const int r = slot * 2;
      f.Answer(f.Id(slot, 1, 1), slot, {{r, kDpAllReduce}, {r + 1, kDpAllReduce}});
    }
    REQUIRE(f.in.pending.count(f.Id(1, 1, 1)));
    if (how == "half-open") {
      f.silent.insert(1);  // the stream looks open, nothing arrives any more
    } else if (how == "disconnected") {
      f.in.slots[1].agent_connected = false;
    } else {
      f.in.pending.erase(f.Id(1, 1, 1));  // the registry forgot it; the answer in flight is gone
      f.now += HangPolicyOptions{}.capture_deadline_ns;
      HangDecision d = f.Decide();
      REQUIRE(d.verdict == HangVerdict::kReattempt);
      CHECK(d.evict_slots.empty());
      CHECK_THAT(f.in.state.investigations.back().explanation, Catch::Contains("no suspect once slot(s) 1"));
      continue;
    }
    f.now += HangPolicyOptions{}.capture_deadline_ns;
    HangDecision d = f.Decide();
    REQUIRE(d.verdict == HangVerdict::kReattempt);
    CHECK(d.evict_slots.empty());
    const StackRound& round = f.in.state.investigations.back().rounds.back();
    CHECK(round.unanswered_slots.empty());
    CHECK(round.suspect_ranks.empty());
    CHECK_THAT(round.explanation, Catch::Contains("slot 1 (pod demo-m1): inconclusive, agent link lost"));
  }
}

TEST_CASE("Outliers among the answered ranks are still evicted when another pod's answer was lost with its link", "[unit]") {
  Fixture f;
  REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
  // Slot 0 hangs in its compute, slots 1 and 2 wait in the DP all-reduce; slot 3's link is lost.
  f.Answer(f.Id(0, 1, 1), 0, {{0, kHungCompute}, {1, kHungCompute}});
  f.Answer(f.Id(1, 1, 1), 1, {{2, kDpAllReduce}, {3, kDpAllReduce}});
  f.Answer(f.Id(2, 1, 1), 2, {{4, kDpAllReduce}, {5, kDpAllReduce}});
  f.silent.insert(3);
  f.now += HangPolicyOptions{}.capture_deadline_ns;
  HangDecision d = f.Decide();
  REQUIRE(d.verdict == HangVerdict::kEvict);
  const StackRound& round = f.in.state.investigations.back().rounds.back();
  CHECK(round.suspect_ranks == std::vector<int>{0, 1});  // ranks 6 and 7 (slot 3) are no suspects
  CHECK(d.evict_slots == std::vector<int>{0});
  CHECK_THAT(f.in.state.investigations.back().explanation, Catch::Contains("besides slot(s) 3 (ranks 6,7)"));
}

TEST_CASE("When the lost links' ranks are the largest stack group nothing is evicted", "[unit]") {
  Fixture f;
  REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
  f.Answer(f.Id(0, 1, 1), 0, {{0, kHungCompute}, {1, kHungCompute}});
  f.Answer(f.Id(1, 1, 1), 1, {{2, kDpAllReduce}, {3, kDpAllReduce}});
  f.silent = {2, 3};  // four ranks with no stacks outnumber either answered group
  f.now += HangPolicyOptions{}.capture_deadline_ns;
  HangDecision d = f.Decide();
  REQUIRE(d.verdict == HangVerdict::kReattempt);
  CHECK(d.evict_slots.empty());
  CHECK_THAT(f.in.state.investigations.back().explanation, Catch::StartsWith("no verdict: the largest stack group is slot(s) 2,3"));
}

TEST_CASE("A failed capture counts like a silent pod", "[unit]") {
  Fixture f;
  REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
  for (int slot : {0, 1, 2}) {
    const int r = slot * 2;
    f.Answer(f.Id(slot, 1, 1), slot, {{r, kDpAllReduce}, {r + 1, kDpAllReduce}});
  }
  StackCaptureReply failed;
  failed.ok = false;
  failed.error = "capture_stacks: no training process is running";
  f.in.replies[f.Id(3, 1, 1)] = failed;
  f.now += kSecond;
  HangDecision d = f.Decide();
  REQUIRE(d.verdict == HangVerdict::kEvict);
  CHECK(d.evict_slots == std::vector<int>{3});
  CHECK_THAT(f.in.state.investigations.back().rounds.back().explanation,
             Catch::Contains("no training process is running"));
}

TEST_CASE("Identical stacks everywhere: no outlier, reattempt in place", "[unit]") {
  Fixture f;
  REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
  for (int slot = 0; slot < 4; ++slot) {
    f.Answer(f.Id(slot, 1, 1), slot, {{slot * 2, kDpAllReduce}, {slot * 2 + 1, kDpAllReduce}});
  }
  HangDecision d = f.Decide();
  CHECK(d.verdict == HangVerdict::kReattempt);
  CHECK(d.evict_slots.empty());
  CHECK_THAT(d.reason, Catch::Contains("no outlier"));
  f.in.attempt = 2;
  f.Decide();
  CHECK(f.in.state.investigations.back().state == InvestigationState::kReattempted);
}

TEST_CASE("Ranks answered for another slot are ignored (they stay uncaptured)", "[unit]") {
  Fixture f;
  REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
  f.Answer(f.Id(0, 1, 1), 0, {{0, kDpAllReduce}, {1, kDpAllReduce}});
  f.Answer(f.Id(1, 1, 1), 1, {{2, kDpAllReduce}, {3, kDpAllReduce}});
  f.Answer(f.Id(2, 1, 1), 2, {{4, kDpAllReduce}, {5, kDpAllReduce}});
  f.Answer(f.Id(3, 1, 1), 3, {{0, kDpAllReduce}, {99, kDpAllReduce}});  // not its ranks
  HangDecision d = f.Decide();
  REQUIRE(d.verdict == HangVerdict::kEvict);
  CHECK(d.evict_slots == std::vector<int>{3});
}

TEST_CASE("Progress during the capture resolves the hang, another failure abandons it", "[unit]") {
  SECTION("progress") {
    Fixture f;
    REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
    f.now += kSecond;
    f.in.last_completed_step = 41;
    HangDecision d = f.Decide();
    CHECK(d.verdict == HangVerdict::kResolved);
    CHECK(f.in.state.investigations.back().state == InvestigationState::kResolved);
    f.now += kSecond;
    CHECK(f.Decide().verdict == HangVerdict::kNone);
  }
  SECTION("another failure") {
    Fixture f;
    REQUIRE(f.DetectHang().verdict == HangVerdict::kHangDetected);
    f.now += kSecond;
    f.in.other_failure = true;
    HangDecision d = f.Decide();
    CHECK(d.verdict == HangVerdict::kAbandoned);
    CHECK(f.in.state.investigations.back().state == InvestigationState::kAbandoned);
    CHECK(d.captures.empty());
  }
}

TEST_CASE("Investigations are bounded, oldest dropped", "[unit]") {
  Fixture f;
  HangPolicyOptions options;
  options.max_investigations = 2;
  for (int i = 0; i < 4; ++i) {
    f.in.last_completed_step += 1;
    HangDecision d = DecideHang(f.in, f.now, options);
    f.in.state = d.state;
    f.now += 60 * kSecond;
    d = DecideHang(f.in, f.now, options);
    REQUIRE(d.verdict == HangVerdict::kHangDetected);
    f.in.state = d.state;
    f.in.last_completed_step += 1;  // progress: resolved
    f.now += kSecond;
    f.in.state = DecideHang(f.in, f.now, options).state;
  }
  REQUIRE(f.in.state.investigations.size() == 2);
  CHECK(f.in.state.investigations[0].id == 3);
  CHECK(f.in.state.investigations[1].id == 4);
  CHECK(f.in.state.next_id == 5);
}

// MFU drop: machine 1 (ranks 2,3; stage 0 of dp 1) computes slowly. Each round its ranks
// sit in a GEMM while everyone else waits in the DP all-reduce; in one noisy round a
// stage-1 machine is caught elsewhere. The group flagged most over 5 rounds is evicted.
TEST_CASE("MFU drop: five rounds 10 s apart, the group flagged most is evicted", "[unit]") {
  Fixture f;
  f.in.last_completed_step = 100;
  f.Decide();  // healthy baseline 0.5 s
  CHECK(f.in.state.healthy_iteration_seconds == Approx(0.5));
  f.in.recent_iteration_seconds = 1.6;
  f.now += kSecond;
  f.in.last_completed_step = 101;
  HangDecision d = f.Decide();
  CHECK(d.verdict == HangVerdict::kNone);
  CHECK(f.in.state.degraded_since == f.now);
  CHECK(f.in.state.investigations.empty());

  const int64_t start = f.now + 30 * kSecond;
  f.now = start;
  f.in.last_completed_step = 140;
  d = f.Decide();
  REQUIRE(f.in.state.investigations.size() == 1);
  CHECK(f.in.state.investigations[0].kind == InvestigationKind::kMfuDrop);
  CHECK(d.captures.size() == 4);
  CHECK(d.verdict == HangVerdict::kNone);

  for (int round = 1; round <= 5; ++round) {
    for (int slot = 0; slot < 4; ++slot) {
      const int r = slot * 2;
      std::vector<std::string> frames = slot == 1 ? kSlowGemm : kDpAllReduce;
      if (round == 3 && slot == 3) frames = kPipelineRecv;  // noise: one round flags machine 3
      if (round == 3 && slot == 1) frames = kDpAllReduce;
      f.Answer(f.Id(slot, 1, round), slot, {{r, frames}, {r + 1, frames}});
    }
    f.in.last_completed_step += 10;
    d = f.Decide();
    if (round < 5) {
      CHECK(d.verdict == HangVerdict::kNone);
      CHECK(f.in.state.investigations[0].state == InvestigationState::kWaiting);
      CHECK(d.wake_at == start + round * 10 * kSecond);
      f.now = d.wake_at;
      d = f.Decide();
      CHECK(d.captures.size() == 4);
      CHECK(d.captures[0].command_id == f.Id(0, 1, round + 1));
    }
  }
  REQUIRE(d.verdict == HangVerdict::kEvict);
  CHECK(d.kind == InvestigationKind::kMfuDrop);
  CHECK(d.evict_slots == std::vector<int>{1});
  const StackInvestigation& inv = f.in.state.investigations[0];
  CHECK(inv.chosen_group == "tp 1");
  CHECK(inv.rounds.size() == 5);
  CHECK(inv.rounds[2].flagged_kind == "tp");
  CHECK(inv.rounds[2].flagged_index == 3);
  CHECK_THAT(inv.explanation, Catch::Contains("4 of 5 rounds"));
}

// Degrades the fixture's iteration time (0.5 s -> 1.6 s) and starts the MFU rounds.
void StartMfuRounds(Fixture& f) {
  f.in.last_completed_step = 100;
  f.Decide();
  f.in.recent_iteration_seconds = 1.6;
  f.now += kSecond;
  f.Decide();
  f.now += 30 * kSecond;
  f.in.last_completed_step = 110;
  REQUIRE(f.Decide().captures.size() == 4);
}

// Runs the 5 rounds; `outlier(round)` is the slot caught in a GEMM that round (-1: none).
HangDecision RunMfuRounds(Fixture& f, const std::function<int(int)>& outlier) {
  HangDecision d;
  for (int round = 1; round <= 5; ++round) {
    for (int slot = 0; slot < 4; ++slot) {
      const std::vector<std::string>& frames = slot == outlier(round) ? kSlowGemm : kDpAllReduce;
      f.Answer(f.Id(slot, 1, round), slot, {{slot * 2, frames}, {slot * 2 + 1, frames}});
    }
    f.in.last_completed_step += 10;
    d = f.Decide();
    if (round < 5) {
      REQUIRE(d.wake_at > f.now);
      f.now = d.wake_at;
      f.Decide();
    }
  }
  return d;
}

TEST_CASE("MFU drop: a group flagged in fewer than 3 of 5 rounds is not evicted", "[unit]") {
  Fixture f;
  StartMfuRounds(f);
  HangDecision d = RunMfuRounds(f, [](int round) { return round <= 2 ? 1 : round <= 4 ? 3 : -1; });
  CHECK(d.verdict == HangVerdict::kNone);
  CHECK(d.evict_slots.empty());
  const StackInvestigation& inv = f.in.state.investigations.back();
  CHECK(inv.state == InvestigationState::kResolved);
  CHECK_THAT(inv.explanation, Catch::Contains("only 2 of 5 rounds"));
  CHECK(inv.rounds[0].flagged_index == 1);
  CHECK(inv.rounds[4].flagged_kind.empty());
}

TEST_CASE("MFU drop: a fail-slow that Falcon-Detect is still locating holds the rounds for its grace", "[unit]") {
  Fixture f;
  f.in.hang_timeout_seconds = 1000;
  f.in.fail_slow_profiling_since = kT0;
  f.in.last_completed_step = 100;
  f.Decide();
  f.in.recent_iteration_seconds = 1.6;
  f.now += kSecond;
  f.Decide();
  f.now += 60 * kSecond;
  f.in.last_completed_step = 110;
  HangDecision d = f.Decide();
  CHECK(d.captures.empty());
  CHECK(d.wake_at == kT0 + HangPolicyOptions{}.mfu_failslow_grace_ns);
  f.now = d.wake_at;
  f.in.last_completed_step = 120;
  CHECK(f.Decide().captures.size() == 4);  // not localized within the grace: rounds start
}

TEST_CASE("MFU drop: the healthy level follows the iteration time while it is not degraded", "[unit]") {
  Fixture f;
  f.in.last_completed_step = 100;
  f.Decide();
  CHECK(f.in.state.healthy_iteration_seconds == Approx(0.5));
  f.in.recent_iteration_seconds = 0.7;  // slower but below 2x: the baseline moves towards it
  f.now += kSecond;
  f.Decide();
  CHECK(f.in.state.healthy_iteration_seconds == Approx(0.54));
  CHECK(f.in.state.degraded_since == 0);
  f.in.recent_iteration_seconds = 1.2;  // >= 2 x 0.54: degraded, the baseline stays
  f.now += kSecond;
  f.Decide();
  CHECK(f.in.state.healthy_iteration_seconds == Approx(0.54));
  CHECK(f.in.state.degraded_since == f.now);
}

TEST_CASE("MFU drop: recovery or a localized fail-slow stops the rounds, a hang takes over", "[unit]") {
  auto degraded = [](Fixture& f) {
    f.in.last_completed_step = 100;
    f.Decide();
    f.in.recent_iteration_seconds = 1.5;
    f.now += kSecond;
    f.Decide();
    f.now += 30 * kSecond;
    f.in.last_completed_step = 110;
  };
  SECTION("recovered between rounds") {
    Fixture f;
    degraded(f);
    REQUIRE(f.Decide().captures.size() == 4);
    f.in.recent_iteration_seconds = 0.55;
    f.now += kSecond;
    f.in.last_completed_step = 111;
    f.Decide();
    CHECK(f.in.state.investigations[0].state == InvestigationState::kResolved);
  }
  SECTION("a machine stops training (it finished first)") {
    Fixture f;
    degraded(f);
    REQUIRE(f.Decide().captures.size() == 4);
    f.in.slots[3].training_alive = false;
    f.now += kSecond;
    CHECK(f.Decide().verdict == HangVerdict::kNone);
    CHECK(f.in.state.investigations[0].state == InvestigationState::kAbandoned);
  }
  SECTION("Falcon-Detect localized it") {
    Fixture f;
    f.in.fail_slow_localized = true;
    degraded(f);
    CHECK(f.Decide().captures.empty());
    CHECK(f.in.state.investigations.empty());
  }
  SECTION("a hang during the rounds") {
    Fixture f;
    degraded(f);
    REQUIRE(f.Decide().captures.size() == 4);
    f.now += 60 * kSecond;  // no step since
    HangDecision d = f.Decide();
    CHECK(d.verdict == HangVerdict::kHangDetected);
    REQUIRE(f.in.state.investigations.size() == 2);
    CHECK(f.in.state.investigations[0].state == InvestigationState::kAbandoned);
    CHECK(f.in.state.investigations[1].kind == InvestigationKind::kHang);
  }
}

TEST_CASE("MakeHangPolicyInput reads slots, liveness, replies and pending ids from the observations", "[unit]") {
  TrainingJob job;
  job.metadata.name = "demo";
  job.spec.machines = 2;
  job.spec.gpus_per_machine = 2;
  job.spec.parallelism = {2, 1, 2};
  job.spec.fault_tolerance.hang_timeout_seconds = 7;
  JobStatus st;
  st.attempt = 3;
  st.slots = {SlotStatus{0, "demo-m0", "a", true}, SlotStatus{1, "demo-m1", "b", true}};
  JobObservation obs;
  obs.pods = {PodObservation{"demo-m0", "a", true, false, "", "", 0, false, false, {}, ""},
              PodObservation{"demo-m1", "b", true, false, "", "", 0, false, false, {}, ""}};
  for (const char* pod : {"demo-m0", "demo-m1"}) {
    AgentObservation a;
    a.pod = pod;
    a.connected = true;
    a.attempt = 3;
    a.phase = AgentTrainingPhase::kRunning;
    a.mean_iteration_seconds = 0.25;
    obs.agents.push_back(a);
  }
  obs.agents[1].phase = AgentTrainingPhase::kExited;
  obs.agents[1].connected = false;
  obs.agents[0].last_seen = 123;
  job.spec.fault_tolerance.heartbeat_timeout_seconds = 9;
  obs.agents[0].pending_command_ids = {"default/demo/demo-m0/stacks-1-1", "default/demo/demo-m0/attempt-3"};
  CommandResultObservation result;
  result.ok = true;
  result.has_stacks = true;
  CapturedProcessStack rank0;
  rank0.stack = Stack(11, kDpAllReduce);
  result.stacks[2].push_back(rank0);
  CapturedProcessStack raw_only;  // an agent that sent only the tool's text
  raw_only.stack.pid = 12;
  raw_only.stack.tool = "eu-stack";
  raw_only.raw = "PID 12 - process\nTID 12:\n#0  0x00007f0000001000 __GI___poll\n#1  0x0000000000401000 main\n";
  result.stacks[3].push_back(raw_only);
  CapturedProcessStack launcher;  // no rank: counts for every captured rank of the pod
  launcher.stack = Stack(10, {"wait4", "main"});
  result.stacks[-1].push_back(launcher);
  obs.agents[1].command_results["default/demo/demo-m1/stacks-1-1"] = result;
  obs.agents[1].command_results["default/demo/demo-m1/attempt-3"] = CommandResultObservation{};

  const ParallelLayout layout = Layout(2, 1, 2, 2);
  HangPolicyInput in = MakeHangPolicyInput(job, st, obs, &layout, true, false);
  CHECK(in.command_prefix == "default/demo");
  CHECK(in.hang_timeout_seconds == 7);
  REQUIRE(in.slots.size() == 2);
  CHECK(in.slots[0].training_alive);
  CHECK_FALSE(in.slots[1].training_alive);
  CHECK(in.slots[0].agent_connected);
  CHECK(in.slots[0].agent_last_seen == 123);
  CHECK_FALSE(in.slots[1].agent_connected);
  CHECK(in.heartbeat_timeout_ns == 9 * kSecond);
  CHECK(in.pending == std::set<std::string>{"default/demo/demo-m0/stacks-1-1"});
  REQUIRE(in.replies.size() == 1);
  const StackCaptureReply& r = in.replies.at("default/demo/demo-m1/stacks-1-1");
  CHECK(r.ok);
  REQUIRE(r.stacks.count(2) == 1);
  REQUIRE(r.stacks.count(3) == 1);
  CHECK(r.stacks.at(2).size() == 2);  // the rank's process and the launcher
  REQUIRE(r.stacks.at(3).size() == 2);
  REQUIRE(r.stacks.at(3)[0].threads.size() == 1);
  CHECK(r.stacks.at(3)[0].threads[0].frames.size() == 2);  // parsed from the raw text
  CHECK(in.recent_iteration_seconds == Approx(0.25));
}

}  // namespace
}  // namespace peregrine
