// IterationTracker on streams with known answers: stray calls that replace pattern calls,
// stray calls inserted more often than the once-per-iteration anchor call, a warm-up
// prefix, and a restart with a different period. Every sample must span exactly one true
// iteration and carry that iteration's period.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "diagnosis/iteration_period.h"

namespace peregrine {
namespace {

constexpr int kStray = 13;  // the stray call's symbol (a logging all-reduce, a barrier)

struct Phase {
  int period;              // pattern calls per iteration; symbol 12 once, others 0..11
  int iterations;
  double substitute_prob;  // each pattern call is replaced by the stray call
  double insert_prob;      // a stray call is inserted after each pattern call
  uint64_t comm_base;      // communicators of this phase (a restart may change them)
};

struct Truth {
  std::vector<NcclCallRecord> calls;
  std::map<int64_t, std::pair<int64_t, int>> iteration_by_start;  // start -> (duration, period)
  std::map<int, int> iterations_by_period;
};

NcclCallRecord SymbolCall(int s, uint64_t comm_base, int64_t t) {
  NcclCallRecord r;
  r.op = static_cast<NcclOp>(s % 4);
  r.comm_id = comm_base + static_cast<uint64_t>(s % 3);
  r.count = 1024 * static_cast<uint64_t>(s + 1);
  r.datatype = 7;
  r.enter_ns = t;
  return r;
}

void AppendPhase(const Phase& phase, std::mt19937& rng, int64_t& clock, Truth& truth) {
  std::vector<int> pattern(static_cast<size_t>(phase.period));
  for (int& s : pattern) s = static_cast<int>(rng() % 12);
  pattern[0] = 12;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int64_t> jitter(-2'000'000, 2'000'000);
  const int64_t gap = 90'000'000 / phase.period;
  for (int k = 0; k < phase.iterations; ++k) {
    const int64_t start = clock;
    const int64_t duration = 100'000'000 + jitter(rng);
    truth.iteration_by_start[start] = {duration, phase.period};
    ++truth.iterations_by_period[phase.period];
    for (int j = 0; j < phase.period; ++j) {
      const int64_t t = start + j * gap;
      const bool substituted = u(rng) < phase.substitute_prob;
      truth.calls.push_back(
          SymbolCall(substituted ? kStray : pattern[static_cast<size_t>(j)], phase.comm_base, t));
      if (u(rng) < phase.insert_prob) truth.calls.push_back(SymbolCall(kStray, 0x900, t + gap / 2));
    }
    clock += duration;
  }
}

TEST_CASE("IterationTracker finds the right period and iteration times", "[unit]") {
  struct Case {
    const char* name;
    int warmup_calls;  // irregular initialisation broadcasts before the first phase
    std::vector<Phase> phases;
    int final_period;
    double min_measured;  // fraction of each phase's iterations measured exactly
  };
  const std::vector<Case> cases = {
      {"1% substituted calls, period 300", 0, {{300, 150, 0.01, 0.0, 0x1000}}, 300, 0.9},
      {"2% substituted calls, period 60", 0, {{60, 300, 0.02, 0.0, 0x1000}}, 60, 0.85},
      {"inserted 3x per iteration, period 300", 0, {{300, 150, 0.0, 0.01, 0x1000}}, 300, 0.9},
      {"inserted 1.6x per iteration, period 40", 0, {{40, 400, 0.0, 0.04, 0x1000}}, 40, 0.9},
      {"substituted and inserted, period 200", 0, {{200, 150, 0.005, 0.01, 0x1000}}, 200, 0.9},
      {"warm-up, then 1% substituted", 500, {{100, 300, 0.01, 0.0, 0x1000}}, 100, 0.9},
      {"warm-up, then inserted 2x per iteration", 700, {{120, 250, 0.0, 0.016, 0x1000}}, 120, 0.9},
      {"restart 120 -> 200 calls, inserted calls",
       0,
       {{120, 200, 0.0, 0.016, 0x1000}, {200, 200, 0.0, 0.01, 0x2000}},
       200,
       0.85},
      {"restart 200 -> 50 calls, substituted calls",
       0,
       {{200, 150, 0.01, 0.0, 0x1000}, {50, 400, 0.01, 0.0, 0x2000}},
       50,
       0.85},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    std::mt19937 rng(23);
    Truth truth;
    int64_t clock = 1'000'000'000;
    for (int i = 0; i < c.warmup_calls; ++i) {
      NcclCallRecord r = SymbolCall(0, 0x500, clock);
      r.op = NcclOp::kBroadcast;
      r.count = 1 + rng() % 50;
      truth.calls.push_back(r);
      clock += 1'000'000;
    }
    for (size_t p = 0; p < c.phases.size(); ++p) {
      if (p > 0) {
        // The restart: a pause, then re-initialisation broadcasts.
        clock += 5'000'000'000;
        for (int i = 0; i < 40; ++i) {
          NcclCallRecord r = SymbolCall(0, 0x600, clock);
          r.op = NcclOp::kBroadcast;
          r.count = 1 + static_cast<uint64_t>(i);
          truth.calls.push_back(r);
          clock += 1'000'000;
        }
      }
      AppendPhase(c.phases[p], rng, clock, truth);
    }

    auto tracker = IterationTracker::Create({});
    REQUIRE(tracker.ok());
    std::vector<IterationSample> samples;
    for (size_t i = 0; i < truth.calls.size(); i += 64) {
      const size_t n = std::min<size_t>(64, truth.calls.size() - i);
      auto out = tracker->Add(absl::MakeConstSpan(truth.calls).subspan(i, n));
      samples.insert(samples.end(), out.begin(), out.end());
    }
    CHECK(tracker->period() == c.final_period);
    std::map<int, int> exact_by_period;
    for (const IterationSample& s : samples) {
      auto it = truth.iteration_by_start.upper_bound(s.start_ns);
      REQUIRE(it != truth.iteration_by_start.begin());
      --it;
      // The sample opens at the anchor inside a true iteration and lasts that iteration.
      CHECK(s.duration_ns == it->second.first);
      CHECK(s.period == it->second.second);
      if (s.duration_ns == it->second.first && s.period == it->second.second) {
        ++exact_by_period[s.period];
      }
    }
    for (const auto& [period, iterations] : truth.iterations_by_period) {
      INFO("period " << period << ": " << exact_by_period[period] << " of " << iterations);
      CHECK(exact_by_period[period] >= static_cast<int>(c.min_measured * iterations));
    }
    for (size_t i = 1; i < samples.size(); ++i) {
      CHECK(samples[i].end_call > samples[i - 1].end_call);
    }
  }
}

TEST_CASE("IterationTracker validates missing_fraction", "[unit]") {
  IterationTrackerOptions bad;
  bad.missing_fraction = 1.0;
  CHECK(IterationTracker::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad.missing_fraction = -0.1;
  CHECK(IterationTracker::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine
