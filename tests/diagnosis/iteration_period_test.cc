#include "diagnosis/iteration_period.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace peregrine {
namespace {

std::vector<CallSymbol> Repeat(const std::vector<CallSymbol>& pattern, int times) {
  std::vector<CallSymbol> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), pattern.begin(), pattern.end());
  return out;
}

TEST_CASE("DetectPeriod finds the first lag of exactly periodic sequences", "[unit]") {
  struct Case {
    const char* name;
    std::vector<CallSymbol> pattern;
    int expected;
  };
  std::vector<CallSymbol> tp_heavy(41, 0);  // 40 identical TP all-reduces and one DP one
  tp_heavy[40] = 1;
  std::vector<CallSymbol> halves;
  for (int i = 0; i < 20; ++i) halves.push_back(2);
  for (int i = 0; i < 20; ++i) halves.push_back(3);
  std::vector<CallSymbol> long_pattern;
  for (int i = 0; i < 300; ++i) long_pattern.push_back(static_cast<CallSymbol>(i % 37 + (i / 150)));
  const std::vector<Case> cases = {
      {"single call per iteration", {5}, 1},
      {"two calls", {1, 2}, 2},
      {"RS AG AR AR (Falcon Fig. 8)", {0, 1, 2, 2}, 4},
      {"repeated symbol inside", {0, 1, 0, 2, 1, 3, 3}, 7},
      {"40 TP + 1 DP", tp_heavy, 41},
      {"blocks of 20", halves, 40},
      {"300 calls", long_pattern, 300},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const int reps = std::max(4, 4096 / static_cast<int>(c.pattern.size()));
    auto est = DetectPeriod(Repeat(c.pattern, reps));
    REQUIRE(est.ok());
    CHECK(est->period == c.expected);
    CHECK(est->acf == Approx(1.0));
  }
}

TEST_CASE("CallSequenceAcf is 1 at the period and near 0 for unrelated calls", "[unit]") {
  const auto periodic = Repeat({0, 1, 2, 1, 3}, 200);
  const std::vector<double> acf = CallSequenceAcf(periodic, 12);
  REQUIRE(acf.size() == 12);
  CHECK(acf[4] == Approx(1.0));
  CHECK(acf[9] == Approx(1.0));
  CHECK(acf[0] < 0.5);
  std::mt19937 rng(7);
  std::vector<CallSymbol> iid(4000);
  for (auto& s : iid) s = static_cast<CallSymbol>(rng() % 6);
  for (double v : CallSequenceAcf(iid, 50)) CHECK(std::fabs(v) < 0.1);
  CHECK_FALSE(DetectPeriod(iid).ok());
}

TEST_CASE("DetectPeriod tolerates a few substituted calls and rejects bad input", "[unit]") {
  auto seq = Repeat({0, 1, 2, 3, 4, 5, 6, 7}, 512);
  std::mt19937 rng(3);
  for (int k = 0; k < 20; ++k) seq[rng() % seq.size()] = 9;  // 0.5% noise
  auto est = DetectPeriod(seq);
  REQUIRE(est.ok());
  CHECK(est->period == 8);
  CHECK(est->acf >= 0.95);
  CHECK(DetectPeriod(Repeat({0, 1}, 2)).status().code() == absl::StatusCode::kNotFound);
  PeriodOptions bad;
  bad.acf_threshold = 1.5;
  CHECK(DetectPeriod(seq, bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.max_lag = 0;
  CHECK(DetectPeriod(seq, bad).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("DropRareSymbols removes rare signatures within the drop budget", "[unit]") {
  std::vector<CallSymbol> seq = Repeat({0, 1, 2}, 100);
  seq.insert(seq.begin() + 50, 7);
  seq.insert(seq.begin() + 150, 7);
  auto keep0 = DropRareSymbols(seq, 0, 0.1);
  REQUIRE(keep0.has_value());
  CHECK(keep0->size() == seq.size());
  auto keep1 = DropRareSymbols(seq, 1, 0.1);
  REQUIRE(keep1.has_value());
  CHECK(keep1->size() == 300);
  for (size_t i : *keep1) CHECK(seq[i] != 7);
  // Level 2 would drop the pattern itself (all three share one count): not allowed.
  CHECK_FALSE(DropRareSymbols(seq, 2, 0.1).has_value());
}

// A synthetic rank: each iteration issues `pattern` (signatures) 100 us apart from the
// iteration start; iteration k lasts durations[k]. Extra calls can be injected.
struct SyntheticStream {
  std::vector<NcclCallRecord> calls;
  std::map<int64_t, int64_t> duration_by_start;  // anchor-independent: keyed by iteration start
  std::vector<int64_t> iteration_starts;
};

NcclCallRecord Call(NcclOp op, uint64_t comm, uint64_t count, int64_t t) {
  NcclCallRecord r;
  r.op = op;
  r.comm_id = comm;
  r.count = count;
  r.datatype = 7;  // ncclBfloat16-like
  r.enter_ns = t;
  return r;
}

std::vector<NcclCallRecord> MegatronLikePattern(uint64_t comm_base, int layers) {
  std::vector<NcclCallRecord> p;
  for (int l = 0; l < layers; ++l) {
    p.push_back(Call(NcclOp::kAllReduce, comm_base + 1, 4096, 0));  // TP
    p.push_back(Call(NcclOp::kAllReduce, comm_base + 1, 4096, 0));
  }
  p.push_back(Call(NcclOp::kSend, comm_base + 2, 1 << 20, 0));  // PP
  p.push_back(Call(NcclOp::kRecv, comm_base + 2, 1 << 20, 0));
  p.push_back(Call(NcclOp::kReduceScatter, comm_base + 3, 1 << 24, 0));  // DP
  p.push_back(Call(NcclOp::kAllGather, comm_base + 3, 1 << 24, 0));
  return p;
}

void AppendIterations(SyntheticStream& s, const std::vector<NcclCallRecord>& pattern, int iterations,
                      int64_t& clock, std::mt19937& rng, double extra_probability,
                      uint64_t extra_comm) {
  std::uniform_int_distribution<int64_t> jitter(-2'000'000, 2'000'000);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int k = 0; k < iterations; ++k) {
    const int64_t start = clock;
    const int64_t duration = 100'000'000 + jitter(rng);  // 100 ms +- 2 ms
    s.iteration_starts.push_back(start);
    s.duration_by_start[start] = duration;
    for (size_t j = 0; j < pattern.size(); ++j) {
      NcclCallRecord r = pattern[j];
      r.enter_ns = start + static_cast<int64_t>(j) * 100'000;
      s.calls.push_back(r);
      if (u(rng) < extra_probability) {
        // A logging all-reduce or checkpoint barrier on another communicator.
        s.calls.push_back(Call(NcclOp::kAllReduce, extra_comm, 1, r.enter_ns + 50'000));
      }
    }
    clock += duration;
  }
}

// Checks every sample against the ground truth: it must span exactly one iteration.
int CheckSamples(const SyntheticStream& s, const std::vector<IterationSample>& samples) {
  int exact = 0;
  for (const IterationSample& sample : samples) {
    // The anchor call is at a fixed offset from its iteration's start.
    auto it = s.duration_by_start.upper_bound(sample.start_ns);
    REQUIRE(it != s.duration_by_start.begin());
    --it;
    const int64_t offset = sample.start_ns - it->first;
    CHECK(offset >= 0);
    CHECK(offset < 100'000'000);
    // The next iteration starts exactly `duration` later, with the same offset.
    CHECK(sample.duration_ns == it->second);
    exact += sample.duration_ns == it->second;
  }
  return exact;
}

TEST_CASE("IterationTracker measures iterations despite warm-up and extra calls", "[unit]") {
  struct Case {
    const char* name;
    int layers;
    double extra_probability;
    int warmup_calls;
  };
  const std::vector<Case> cases = {
      {"clean", 4, 0.0, 0},
      {"warm-up prefix", 4, 0.0, 300},
      {"extra calls", 6, 0.01, 0},
      {"warm-up and extra calls", 12, 0.005, 500},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    std::mt19937 rng(11);
    SyntheticStream s;
    int64_t clock = 1'000'000'000;
    // Warm-up: irregular calls (initialisation broadcasts, varying sizes).
    for (int i = 0; i < c.warmup_calls; ++i) {
      s.calls.push_back(Call(NcclOp::kBroadcast, 99, 1 + rng() % 50, clock));
      clock += 1'000'000;
    }
    const auto pattern = MegatronLikePattern(10, c.layers);
    AppendIterations(s, pattern, 300, clock, rng, c.extra_probability, 77);
    auto samples = InferIterationTimes(s.calls);
    REQUIRE(samples.ok());
    const int exact = CheckSamples(s, *samples);
    // Nearly every iteration is measured (the first ones wait for the detection window,
    // but are then measured retroactively from the buffer).
    CHECK(exact >= 290);
    for (const IterationSample& x : *samples) CHECK(x.period == static_cast<int>(pattern.size()));
  }
}

TEST_CASE("IterationTracker re-detects the period after a restart", "[unit]") {
  std::mt19937 rng(5);
  SyntheticStream s;
  int64_t clock = 0;
  const auto before = MegatronLikePattern(10, 5);  // 14 calls
  const auto after = MegatronLikePattern(20, 8);   // 20 calls, new communicators
  AppendIterations(s, before, 200, clock, rng, 0.0, 0);
  clock += 5'000'000'000;  // the restart
  for (int i = 0; i < 40; ++i) {
    s.calls.push_back(Call(NcclOp::kBroadcast, 21, 1 + i, clock));
    clock += 1'000'000;
  }
  AppendIterations(s, after, 200, clock, rng, 0.0, 0);

  auto tracker = IterationTracker::Create({});
  REQUIRE(tracker.ok());
  std::vector<IterationSample> samples;
  // Feed in uneven batches, as the agent reads the ring.
  size_t pos = 0;
  while (pos < s.calls.size()) {
    const size_t n = std::min<size_t>(s.calls.size() - pos, 1 + rng() % 300);
    auto out = tracker->Add(absl::MakeConstSpan(s.calls).subspan(pos, n));
    samples.insert(samples.end(), out.begin(), out.end());
    pos += n;
  }
  CHECK(tracker->period() == static_cast<int>(after.size()));
  CHECK(tracker->stats().breaks >= 1);
  CHECK(tracker->stats().detections >= 2);
  const int exact = CheckSamples(s, samples);
  CHECK(exact >= 380);
  int old_period = 0, new_period = 0;
  for (const IterationSample& x : samples) {
    old_period += x.period == static_cast<int>(before.size());
    new_period += x.period == static_cast<int>(after.size());
  }
  CHECK(old_period >= 190);
  CHECK(new_period >= 190);
  // Never emitted twice, in stream order.
  for (size_t i = 1; i < samples.size(); ++i) CHECK(samples[i].end_call > samples[i - 1].end_call);
}

TEST_CASE("IterationTracker streaming equals batch", "[unit]") {
  std::mt19937 rng(9);
  SyntheticStream s;
  int64_t clock = 0;
  AppendIterations(s, MegatronLikePattern(1, 3), 150, clock, rng, 0.02, 5);
  auto batch = InferIterationTimes(s.calls);
  REQUIRE(batch.ok());
  auto tracker = IterationTracker::Create({});
  REQUIRE(tracker.ok());
  std::vector<IterationSample> streamed;
  for (const NcclCallRecord& r : s.calls) {
    auto out = tracker->Add({&r, 1});
    streamed.insert(streamed.end(), out.begin(), out.end());
  }
  // Detection may happen at another point of the stream and pick another anchor call,
  // so the samples need not be the same calls; both must measure the iterations exactly.
  CHECK(CheckSamples(s, streamed) == static_cast<int>(streamed.size()));
  CHECK(CheckSamples(s, *batch) == static_cast<int>(batch->size()));
  CHECK(streamed.size() >= 145);
  CHECK(batch->size() >= 145);
}

TEST_CASE("IterationTracker emits nothing for aperiodic streams and validates options", "[unit]") {
  std::mt19937 rng(1);
  std::vector<NcclCallRecord> calls;
  for (int i = 0; i < 3000; ++i) {
    calls.push_back(Call(static_cast<NcclOp>(rng() % 4), rng() % 5, rng() % 7, i * 1000));
  }
  auto samples = InferIterationTimes(calls);
  REQUIRE(samples.ok());
  CHECK(samples->empty());
  IterationTrackerOptions bad;
  bad.window = 4;
  CHECK(IterationTracker::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.break_after = 0;
  CHECK(IterationTracker::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.period.acf_threshold = 0.0;
  CHECK(IterationTracker::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("EncodeCallSignatures assigns codes by first appearance", "[unit]") {
  std::vector<NcclCallRecord> calls = {Call(NcclOp::kAllReduce, 1, 10, 0),
                                       Call(NcclOp::kAllReduce, 1, 11, 1),
                                       Call(NcclOp::kAllReduce, 1, 10, 2),
                                       Call(NcclOp::kAllGather, 1, 10, 3)};
  auto codes = EncodeCallSignatures(calls);
  REQUIRE(codes.ok());
  CHECK(*codes == std::vector<CallSymbol>{0, 1, 0, 2});
}

}  // namespace
}  // namespace peregrine
