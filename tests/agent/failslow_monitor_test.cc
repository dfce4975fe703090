// FailSlowMonitor's warm-up rule: IterationWarmup as a pure rule, and the monitor reading
// real ring files (written the way libperegrine_nccl.so writes them, with synthetic call
// times) so that a warm-up shift is not reported while a later slowdown is, with its onset.
#include "agent/failslow_monitor.h"
#include "agent/agent_components.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "agent/nccl_ring/ring_format.h"
#include "tests/agent/mapped_ring.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

namespace ring = nccl_ring;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kUnixOffset = 1'700'000'000'000'000'000;  // unix - monotonic in the test

using ::peregrine::testing::TempDir;

// A ring of this (live) process, named and formatted the way the hook does it.
class TrainerRing {
 public:
  TrainerRing(const std::string& dir, int rank)
      : ring_(dir + "/" + MappedRing::FileName(rank, getpid()), kCapacity, getpid(), rank, 0, 1) {}

  // One iteration of another pattern (6 calls: a reconfigured job) starting at `start_ns`.
  void IterationB(int64_t start_ns) {
    Call(start_ns, 11, 2000, ring::kOpAllReduce);
    Call(start_ns + 1 * kMs, 14, 512, ring::kOpReduceScatter);
    Call(start_ns + 2 * kMs, 14, 512, ring::kOpAllGather);
    Call(start_ns + 3 * kMs, 12, 256, ring::kOpAllGather);
    Call(start_ns + 4 * kMs, 13, 64, ring::kOpSend);
    Call(start_ns + 5 * kMs, 13, 64, ring::kOpRecv);
  }
  // One iteration of a 4-call pattern starting at `start_ns`.
  void Iteration(int64_t start_ns) {
    Call(start_ns, 11, 1000, ring::kOpAllReduce);
    Call(start_ns + 1 * kMs, 12, 256, ring::kOpAllGather);
    Call(start_ns + 2 * kMs, 13, 64, ring::kOpSend);
    Call(start_ns + 3 * kMs, 13, 64, ring::kOpRecv);
  }

 private:
  static constexpr uint32_t kCapacity = 1u << 14;
  void Call(int64_t t, uint64_t comm, uint64_t count, uint8_t op) {
    ring::RecordPayload p{};
    p.time_ns = static_cast<uint64_t>(t);
    p.comm_id = comm;
    p.count = count;
    p.link = calls_++;
    p.rank = 0;
    p.nranks = 2;
    p.peer = op == ring::kOpSend || op == ring::kOpRecv ? 1 : -1;
    p.op = op;
    p.datatype = 7;
    ring_.Append(p);
  }
  MappedRing ring_;
  uint64_t calls_ = 0;
};

// A monitor of the rings in `ring_dir`, otherwise with `options`.
std::unique_ptr<FailSlowMonitor> MonitorOf(const std::string& ring_dir, FailSlowMonitorOptions options = {}) {
  options.ring_dir = ring_dir;
  auto monitor = FailSlowMonitor::Create(options);
  INFO(monitor.status().ToString());
  REQUIRE(monitor.ok());
  return *std::move(monitor);
}

// Deterministic +-1% noise.
double Noise(int i) { return 1.0 + 0.01 * std::sin(i * 2.399963); }

struct Run {
  std::vector<v1::FailSlowEvent> events;
  std::vector<int64_t> starts;  // monotonic start of each iteration
  FailSlowMonitorStats stats;
  std::vector<RankTrackingState> ranks;
};

// Writes iterations with the given durations (ms) into a ring, polling every 10 iterations.
Run Feed(const FailSlowMonitorOptions& base, const std::vector<double>& durations_ms) {
  TempDir dir;
  const std::unique_ptr<FailSlowMonitor> monitor = MonitorOf(dir.path(), base);
  TrainerRing r(dir.path(), 3);
  Run run;
  int64_t t = 5'000 * kMs;
  for (size_t i = 0; i < durations_ms.size(); ++i) {
    run.starts.push_back(t);
    r.Iteration(t);
    t += static_cast<int64_t>(durations_ms[i] * kMs);
    if (i % 10 == 9 || i + 1 == durations_ms.size()) {
      for (auto& e : monitor->Poll(t + kUnixOffset, t)) run.events.push_back(e);
    }
  }
  r.Iteration(t);  // closes the last iteration
  for (auto& e : monitor->Poll(t + kUnixOffset, t)) run.events.push_back(e);
  run.stats = monitor->stats();
  run.ranks = monitor->Ranks();
  return run;
}

TEST_CASE("IterationWarmup: drops min_iterations and then waits for the level to settle", "[unit]") {
  auto w = IterationWarmup::Create(WarmupOptions{});
  REQUIRE(w.ok());
  // Settled from the start: exactly min_iterations (20) dropped.
  for (int i = 0; i < 20; ++i) CHECK_FALSE(w->Accept(0.1 * Noise(i)));
  CHECK_FALSE(w->done());
  CHECK(w->Accept(0.1));
  CHECK(w->done());
  CHECK(w->dropped() == 20);
  CHECK(w->Accept(5.0));  // past warm-up everything goes to the detector

  // A ramp (a machine still loading): dropped until two windows of 8 agree within 5%.
  auto ramp = IterationWarmup::Create(WarmupOptions{});
  REQUIRE(ramp.ok());
  int accepted_at = -1;
  for (int i = 0; i < 100 && accepted_at < 0; ++i) {
    const double ms = i < 40 ? 60 + i : 100;  // +1 ms per iteration up to 100 ms
    if (ramp->Accept(ms / 1e3)) accepted_at = i;
  }
  // Window medians 8 ms apart at ~90 ms are > 5% apart until the ramp has ended.
  CHECK(accepted_at > 40);
  CHECK(accepted_at <= 40 + 16);

  // Noise around a steady level settles (medians agree) ...
  auto noisy = IterationWarmup::Create(WarmupOptions{});
  REQUIRE(noisy.ok());
  int n = 0;
  while (!noisy->Accept(n % 2 == 0 ? 0.1 : 0.2)) ++n;
  CHECK(n == 20);
  // ... a level that keeps drifting never does: accepted after max_iterations.
  WarmupOptions o;
  o.max_iterations = 30;
  auto drifting = IterationWarmup::Create(o);
  REQUIRE(drifting.ok());
  n = 0;
  while (!drifting->Accept(0.1 * std::pow(1.02, n))) ++n;
  CHECK(n == 30);

  // Junk does not count.
  auto junk = IterationWarmup::Create(WarmupOptions{});
  REQUIRE(junk.ok());
  CHECK_FALSE(junk->Accept(std::nan("")));
  CHECK_FALSE(junk->Accept(-1));
  CHECK(junk->dropped() == 0);
}

TEST_CASE("IterationWarmup: options out of range are named", "[unit]") {
  WarmupOptions o;
  o.window = 0;
  CHECK_THAT(std::string(IterationWarmup::Create(o).status().message()), Catch::Contains("window"));
  o = WarmupOptions{};
  o.min_iterations = 10;
  CHECK_THAT(std::string(IterationWarmup::Create(o).status().message()), Catch::Contains("min_iterations"));
  o = WarmupOptions{};
  o.stable_fraction = 0;
  CHECK_THAT(std::string(IterationWarmup::Create(o).status().message()), Catch::Contains("stable_fraction"));
  o = WarmupOptions{};
  o.max_iterations = 5;
  CHECK_THAT(std::string(IterationWarmup::Create(o).status().message()), Catch::Contains("max_iterations"));
  FailSlowMonitorOptions m;
  m.ring_dir = "/tmp";
  m.warmup.window = -1;
  CHECK(FailSlowMonitor::Create(m).status().code() == absl::StatusCode::kInvalidArgument);
}

// A process whose first 15 iterations run at 100 ms and then settle at 117 ms (the
// machine got busier as the rest of the restarted job came up): the series a false
// +17% report came from.
std::vector<double> WarmupShift(int total) {
  std::vector<double> d;
  for (int i = 0; i < total; ++i) d.push_back((i < 15 ? 100.0 : 117.0) * Noise(i));
  return d;
}

TEST_CASE("FailSlowMonitor: a level change during warm-up is not reported", "[unit]") {
  SECTION("without the warm-up rule the shift reads as a slowdown") {
    FailSlowMonitorOptions bare;
    bare.warmup.min_iterations = 2;
    bare.warmup.window = 1;
    bare.warmup.stable_fraction = 1e9;
    Run run = Feed(bare, WarmupShift(150));
    REQUIRE_FALSE(run.events.empty());
    CHECK(run.events.front().kind() == v1::FailSlowEvent::KIND_SLOWDOWN_START);
  }
  SECTION("with the default rule nothing is reported") {
    Run run = Feed(FailSlowMonitorOptions{}, WarmupShift(150));
    CHECK(run.events.empty());
    CHECK(run.stats.warmup_iterations >= 20);
    CHECK(run.stats.iterations >= 140);
    REQUIRE(run.ranks.size() == 1);
    CHECK(run.ranks[0].global_rank == 3);
    CHECK_FALSE(run.ranks[0].warming_up);
    CHECK_FALSE(run.ranks[0].in_slowdown);
  }
}

TEST_CASE("FailSlowMonitor: a slowdown after warm-up is reported at its onset", "[unit]") {
  std::vector<double> d;
  for (int i = 0; i < 160; ++i) d.push_back((i < 15 ? 140.0 : i < 110 ? 100.0 : 150.0) * Noise(i));
  Run run = Feed(FailSlowMonitorOptions{}, d);
  REQUIRE(run.events.size() == 1);
  const v1::FailSlowEvent& e = run.events[0];
  CHECK(e.kind() == v1::FailSlowEvent::KIND_SLOWDOWN_START);
  CHECK(e.global_rank() == 3);
  CHECK(e.severity() == Approx(0.5).margin(0.05));
  CHECK(e.before_seconds() == Approx(0.1).margin(0.005));
  // The onset is the start of iteration 110, in Unix time, whatever the warm-up dropped.
  CHECK(e.onset_time() == run.starts[110] + kUnixOffset);
  CHECK(run.stats.warmup_iterations >= 20);
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

TEST_CASE("monitor reports each process that runs without a ring once, and owns its directory", "[unit]") {
  TempDir parent;
  const std::string dir = parent.path() + "/rings";
  FailSlowMonitorOptions options;
  options.remove_ring_dir_on_exit = true;
  {
    const std::unique_ptr<FailSlowMonitor> monitor = MonitorOf(dir, options);
    // A live process (this one) whose hook could not reserve its ring, as the hook leaves it.
    const std::string marker = dir + "/peregrine-nccl-r4-p" + std::to_string(getpid()) + ".unavailable";
    { std::ofstream(marker) << "posix_fallocate: No space left on device"; }
    TrainerRing r(dir, 1);
    monitor->Poll(kUnixOffset, 0);
    std::vector<NcclRingFailure> failures = monitor->TakeRingFailures();
    REQUIRE(failures.size() == 1);
    CHECK(failures[0].global_rank == 4);
    CHECK(failures[0].pid == getpid());
    CHECK(failures[0].reason == "posix_fallocate: No space left on device");
    CHECK(monitor->stats().ring_failures == 1);
    monitor->Poll(kUnixOffset, 0);
    CHECK(monitor->TakeRingFailures().empty());  // once
    CHECK(std::filesystem::exists(marker));         // the process still runs
  }
  CHECK(!std::filesystem::exists(dir));  // the monitor owned it
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

TEST_CASE("RemoveDeadAgentRingDirs deletes only directories of agents that are gone", "[unit]") {
  TempDir parent;
  // A pid that is certainly dead: a child that has exited and been reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  const std::string dead = parent.path() + "/peregrine-nccl-pod-a-" + std::to_string(child);
  const std::string live = parent.path() + "/peregrine-nccl-pod-b-" + std::to_string(getpid());
  const std::string other = parent.path() + "/something-else-" + std::to_string(child);
  for (const std::string& d : {dead, live, other}) {
    std::filesystem::create_directories(d);
    std::ofstream(d + "/peregrine-nccl-r0-p1.ring") << "x";
  }
  CHECK(RemoveDeadAgentRingDirs(parent.path()) == 1);
  CHECK(!std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(other));
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

// A ring written record by record, the way the hook and its CUDA resolver thread write it.
class RawRing {
 public:
  RawRing(const std::string& dir, int rank)
      : ring_(dir + "/" + MappedRing::FileName(rank, getpid()), kCapacity, getpid(), rank, 0, 1) {}
  // A traffic call; returns its ring seq.
  uint64_t Call(uint8_t op, uint64_t comm, uint64_t call_index, int64_t t, bool in_group = false) {
    ring::RecordPayload p{};
    p.time_ns = static_cast<uint64_t>(t);
    p.comm_id = comm;
    p.count = 1024;
    p.link = call_index;
    p.rank = 0;
    p.nranks = 2;
    p.peer = op == ring::kOpSend || op == ring::kOpRecv ? 1 : -1;
    p.op = op;
    p.datatype = 7;
    p.flags = ring::kFlagProfiled | (in_group ? ring::kFlagInGroup : 0);
    return Append(p);
  }
  uint64_t GroupEnd(int64_t t) {
    ring::RecordPayload p{};
    p.time_ns = static_cast<uint64_t>(t);
    p.value = 1;  // closes depth 1
    p.rank = -1;
    p.nranks = -1;
    p.peer = -1;
    p.op = ring::kOpGroupEnd;
    p.flags = ring::kFlagProfiled;
    return Append(p);
  }
  void Completion(uint8_t kind, uint64_t call_seq, int64_t duration, int64_t t) {
    ring::RecordPayload p{};
    p.time_ns = static_cast<uint64_t>(t);
    p.link = call_seq;
    p.value = static_cast<uint64_t>(duration);
    p.rank = -1;
    p.nranks = -1;
    p.peer = -1;
    p.op = kind;
    Append(p);
  }

 private:
  static constexpr uint32_t kCapacity = 1u << 12;
  uint64_t Append(const ring::RecordPayload& p) { return ring_.Append(p); }
  MappedRing ring_;
};

// comm id -> "<op><sequence>" -> exit - enter, from a heartbeat's profiles.
using DurationMap = std::map<std::string, int64_t>;
std::map<uint64_t, DurationMap> Durations(const FailSlowMonitor& monitor) {
  google::protobuf::RepeatedPtrField<v1::CommProfile> profiles;
  monitor.FillCommProfiles(&profiles);
  std::map<uint64_t, DurationMap> out;
  for (const v1::CommProfile& p : profiles) {
    for (const v1::CollectiveTiming& t : p.collectives()) {
      out[p.comm_id()][t.op() + std::to_string(t.sequence())] = t.exit_time() - t.enter_time();
    }
  }
  return out;
}

TEST_CASE("monitor attaches device times that arrive late and out of order, a group's time goes to its operations",
          "[unit]") {
  TempDir dir;
  const std::unique_ptr<FailSlowMonitor> created = MonitorOf(dir.path());
  FailSlowMonitor& monitor = *created;
  RawRing r(dir.path(), 0);
  monitor.Poll(kUnixOffset, 0);  // opens the ring
  monitor.SetMode(/*profiling=*/true, /*trap=*/false);

  // Three all-reduces on comm 7, each with its host exit (tiny: an asynchronous launch).
  int64_t t = 1000 * kMs;
  uint64_t seq[3];
  for (int i = 0; i < 3; ++i) {
    seq[i] = r.Call(ring::kOpAllReduce, 7, static_cast<uint64_t>(i), t);
    r.Completion(ring::kOpHostExit, seq[i], 20'000, t + 20'000);
    t += 10 * kMs;
  }
  // A grouped send/recv on comm 9 (call numbers 0 and 1), closed by GroupEnd.
  const uint64_t send = r.Call(ring::kOpSend, 9, 0, t, /*in_group=*/true);
  r.Completion(ring::kOpHostExit, send, 1'000, t + 1'000);
  const uint64_t recv = r.Call(ring::kOpRecv, 9, 1, t + 2'000, /*in_group=*/true);
  r.Completion(ring::kOpHostExit, recv, 1'000, t + 3'000);
  const uint64_t group_end = r.GroupEnd(t + 4'000);
  r.Completion(ring::kOpHostExit, group_end, 50'000, t + 54'000);
  monitor.Poll(kUnixOffset + t, t);
  {
    auto d = Durations(monitor);
    CHECK(d[7] == DurationMap{{"allreduce0", 20'000}, {"allreduce1", 20'000}, {"allreduce2", 20'000}});  // host times
    CHECK(d[9] == DurationMap{{"send0", 50'000}, {"recv0", 50'000}});  // the group's host time
  }
  // The resolver thread appends device times later, newest call first, after a newer call.
  t += 10 * kMs;
  const uint64_t later = r.Call(ring::kOpAllReduce, 7, 3, t);
  r.Completion(ring::kOpDeviceTime, seq[2], 3 * kMs, t + 1);
  r.Completion(ring::kOpDeviceTime, group_end, 8 * kMs, t + 2);
  r.Completion(ring::kOpDeviceTime, seq[0], 1 * kMs, t + 3);
  monitor.Poll(kUnixOffset + t, t);
  // A host exit arriving after the device time does not replace it.
  r.Completion(ring::kOpHostExit, later, 20'000, t + 4);
  r.Completion(ring::kOpDeviceTime, seq[1], 2 * kMs, t + 5);
  r.Completion(ring::kOpHostExit, seq[1], 99'000, t + 6);
  monitor.Poll(kUnixOffset + t, t);
  auto d = Durations(monitor);
  CHECK(d[7] ==
        DurationMap{{"allreduce0", 1 * kMs}, {"allreduce1", 2 * kMs}, {"allreduce2", 3 * kMs}, {"allreduce3", 20'000}});
  CHECK(d[9] == DurationMap{{"send0", 8 * kMs}, {"recv0", 8 * kMs}});
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

TEST_CASE("monitor numbers sends and recvs per peer and collectives apart from them", "[unit]") {
  TempDir dir;
  const std::unique_ptr<FailSlowMonitor> created = MonitorOf(dir.path());
  FailSlowMonitor& monitor = *created;
  RawRing r(dir.path(), 0);
  // Before profiling: counted all the same (the peer counts its calls from its start too).
  r.Call(ring::kOpSend, 9, 0, 1 * kMs);
  monitor.Poll(kUnixOffset, 0);
  monitor.SetMode(/*profiling=*/true, /*trap=*/false);
  const uint64_t send = r.Call(ring::kOpSend, 9, 1, 2 * kMs);
  const uint64_t recv = r.Call(ring::kOpRecv, 9, 2, 3 * kMs);
  const uint64_t allreduce = r.Call(ring::kOpAllReduce, 9, 3, 4 * kMs);
  for (uint64_t s : {send, recv, allreduce}) r.Completion(ring::kOpHostExit, s, kMs, 5 * kMs);
  monitor.Poll(kUnixOffset, 0);
  google::protobuf::RepeatedPtrField<v1::CommProfile> profiles;
  monitor.FillCommProfiles(&profiles);
  REQUIRE(profiles.size() == 1);
  std::vector<std::tuple<std::string, uint64_t, int>> got;
  for (const v1::CollectiveTiming& t : profiles[0].collectives()) got.emplace_back(t.op(), t.sequence(), t.peer());
  CHECK(got == std::vector<std::tuple<std::string, uint64_t, int>>{{"send", 1, 1}, {"recv", 0, 1}, {"allreduce", 0, -1}});
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

// `a` iterations of the 4-call pattern at 100 ms, then `b` of the 6-call pattern at
// `b_ms`, polled every 10 iterations.
Run Reconfigure(int a, int b, double b_ms, int rank) {
  TempDir dir;
  const std::unique_ptr<FailSlowMonitor> monitor = MonitorOf(dir.path());
  TrainerRing r(dir.path(), rank);
  Run run;
  int64_t t = 5'000 * kMs;
  for (int i = 0; i < a + b; ++i) {
    if (i < a) {
      r.Iteration(t);
      t += static_cast<int64_t>(100 * Noise(i) * kMs);
    } else {
      r.IterationB(t);
      t += static_cast<int64_t>(b_ms * Noise(i) * kMs);
    }
    if (i % 10 == 9) {
      for (auto& e : monitor->Poll(t + kUnixOffset, t)) run.events.push_back(e);
    }
  }
  r.IterationB(t);
  for (auto& e : monitor->Poll(t + kUnixOffset, t)) run.events.push_back(e);
  run.stats = monitor->stats();
  run.ranks = monitor->Ranks();
  return run;
}

TEST_CASE("a reconfiguration that lengthens iterations is a new baseline, not a fail-slow", "[unit]") {
  const Run run = Reconfigure(150, 250, 150, 2);
  INFO("events " << run.events.size() << ", restarts " << run.stats.series_restarts);
  CHECK(run.stats.series_restarts >= 2);  // the first period, then the new one
  REQUIRE(run.ranks.size() == 1);
  CHECK(run.ranks[0].period == 6);
  CHECK(!run.ranks[0].in_slowdown);
  CHECK(run.events.empty());
  // The same new level without a new pattern is a fail-slow: the detector does see +50%.
  std::vector<double> same_pattern;
  for (int i = 0; i < 400; ++i) same_pattern.push_back((i < 150 ? 100.0 : 150.0) * Noise(i));
  const Run slow = Feed(FailSlowMonitorOptions{}, same_pattern);
  REQUIRE(!slow.events.empty());
  CHECK(slow.events[0].kind() == v1::FailSlowEvent::KIND_SLOWDOWN_START);
}

TEST_CASE("a process without RANK is tracked but never reported as a rank", "[unit]") {
  TempDir dir;
  const std::unique_ptr<FailSlowMonitor> monitor = MonitorOf(dir.path());
  monitor->SetMode(/*profiling=*/true, /*trap=*/false);
  TrainerRing r(dir.path(), -1);
  std::vector<v1::FailSlowEvent> events;
  int64_t t = 5'000 * kMs;
  for (int i = 0; i < 400; ++i) {
    r.Iteration(t);
    t += static_cast<int64_t>((i < 150 ? 100.0 : 150.0) * Noise(i) * kMs);
    if (i % 10 == 9) {
      for (auto& e : monitor->Poll(t + kUnixOffset, t)) events.push_back(e);
    }
  }
  CHECK(events.empty());
  CHECK(monitor->stats().unranked_events >= 1);  // the slowdown was seen, not reported
  REQUIRE(monitor->Ranks().size() == 1);
  CHECK(monitor->Ranks()[0].global_rank == -1);
  CHECK(monitor->Ranks()[0].in_slowdown);
  google::protobuf::RepeatedPtrField<v1::CommProfile> profiles;
  monitor->FillCommProfiles(&profiles);
  CHECK(profiles.empty());
}

TEST_CASE("FailSlowMonitor: the assignment's spec.failSlow settings reach every rank's detector", "[unit]") {
  // A 14% slowdown after warm-up: over a verifyThreshold of 0.1, under one of 0.2.
  std::vector<double> d;
  for (int i = 0; i < 160; ++i) d.push_back((i < 110 ? 100.0 : 114.0) * Noise(i));
  auto run = [&](double verify_threshold, double probability) {
    TrainingAssignment assignment;
    assignment.failslow_verify_threshold = verify_threshold;
    assignment.failslow_change_point_probability = probability;
    TempDir dir;
    const std::unique_ptr<FailSlowMonitor> monitor = MonitorOf(dir.path());
    REQUIRE(monitor->SetDetectorOptions(DetectorOptionsFor(assignment)).ok());
    CHECK(monitor->detector_options().verify_threshold == (verify_threshold == 0 ? 0.10 : verify_threshold));
    CHECK(monitor->detector_options().bocd.report_threshold == (probability == 0 ? 0.9 : probability));
    TrainerRing r(dir.path(), 3);
    std::vector<v1::FailSlowEvent> events;
    int64_t t = 5'000 * kMs;
    for (size_t i = 0; i < d.size(); ++i) {
      r.Iteration(t);
      t += static_cast<int64_t>(d[i] * kMs);
      if (i % 10 == 9) {
        for (auto& e : monitor->Poll(t + kUnixOffset, t)) events.push_back(e);
      }
    }
    r.Iteration(t);
    for (auto& e : monitor->Poll(t + kUnixOffset, t)) events.push_back(e);
    return events;
  };
  CHECK(run(0, 0).size() == 1);       // the defaults (0.10, 0.9) report it
  CHECK(run(0.2, 0).empty());         // verifyThreshold 0.2 rejects it
  CHECK(run(0.05, 0.95).size() == 1);
  // Out of range: named, nothing changes.
  TempDir dir;
  const std::unique_ptr<FailSlowMonitor> monitor = MonitorOf(dir.path());
  TrainingAssignment bad;
  bad.failslow_change_point_probability = 1.5;
  const absl::Status s = monitor->SetDetectorOptions(DetectorOptionsFor(bad));
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("report_threshold") != std::string::npos);
  CHECK(monitor->detector_options().bocd.report_threshold == 0.9);
}

}  // namespace
}  // namespace peregrine
