// failslow-bench: cost of the fail-slow detectors, each against a baseline measured in the
// same run.
//  - ACF period detection over 4,096 calls (DESIGN budget < 1 ms) vs a naive O(n^2) ACF
//    (Falcon's formula over every lag, on numerically encoded calls);
//  - the full IterationTracker (what the agent runs on each rank's calls: signature
//    encoding, rare-call filtering, ACF detection with retries, anchor matching, samples)
//    on 4,096 calls from a fresh tracker, fed in one batch and in batches of 64 (the agent
//    feeds what one ring poll returned), and its steady-state cost per call once the period
//    is established;
//  - BOCD updates per second (budget >= 1M/s per core) vs BOCD without run-length pruning;
//  - sliding-window updates per second.
//
// Times are process CPU time (std::clock), so they are per-core figures even on a busy
// machine; std::clock's resolution is 1 us, so the ACF timings are best-of-N.
//
// Each figure with a performance budget (docs/failslow.md) is followed by PASS/FAIL (informational: this is a
// benchmark, not a test).
//
//   failslow-bench [--reps=N]
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "diagnosis/change_point.h"
#include "diagnosis/iteration_period.h"
#include "diagnosis/sliding_window.h"

namespace {

// CPU time of this process: on a shared, loaded machine wall time measures the neighbours.
struct Clock {
  using time_point = std::clock_t;
  static time_point now() { return std::clock(); }
};

double SecondsSince(Clock::time_point start) {
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

// Falcon's ACF, computed directly: for every lag k in 1..n-1,
// sum_{t < n-k} (x_t - mu)(x_{t+k} - mu) / sum_t (x_t - mu)^2; then the first lag >= 0.95.
int NaiveAcfPeriod(const std::vector<double>& x, double threshold) {
  const size_t n = x.size();
  double mu = 0.0;
  for (double v : x) mu += v;
  mu /= static_cast<double>(n);
  double var = 0.0;
  for (double v : x) var += (v - mu) * (v - mu);
  int first = 0;
  for (size_t k = 1; k < n; ++k) {
    double cov = 0.0;
    for (size_t t = 0; t + k < n; ++t) cov += (x[t] - mu) * (x[t + k] - mu);
    if (first == 0 && cov / var >= threshold) first = static_cast<int>(k);
  }
  return first;
}

std::vector<peregrine::CallSymbol> Calls(size_t n, int period, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<peregrine::CallSymbol> pattern(static_cast<size_t>(period));
  for (auto& s : pattern) s = static_cast<peregrine::CallSymbol>(rng() % 12);
  pattern[0] = 12;  // a call that occurs once per iteration
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<peregrine::CallSymbol> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = u(rng) < noise ? 13 : pattern[i % pattern.size()];
  }
  return out;
}

// Like Calls(), but a stray call is inserted between two pattern calls (logging, a
// checkpoint barrier) instead of replacing one.
std::vector<peregrine::CallSymbol> CallsWithInsertions(size_t n, int period, double noise,
                                                       uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<peregrine::CallSymbol> pattern(static_cast<size_t>(period));
  for (auto& s : pattern) s = static_cast<peregrine::CallSymbol>(rng() % 12);
  pattern[0] = 12;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<peregrine::CallSymbol> out;
  for (size_t i = 0; out.size() < n; ++i) {
    if (u(rng) < noise) out.push_back(13);
    if (out.size() < n) out.push_back(pattern[i % pattern.size()]);
  }
  return out;
}

// The calls of Calls() as hook records: symbol -> (op, communicator, count), one call every
// 50 us.
std::vector<peregrine::NcclCallRecord> Records(const std::vector<peregrine::CallSymbol>& calls,
                                               int64_t first_ns) {
  std::vector<peregrine::NcclCallRecord> out(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const int s = calls[i];
    out[i].op = static_cast<peregrine::NcclOp>(s % 4);
    out[i].comm_id = 0x1000 + static_cast<uint64_t>(s % 3);
    out[i].count = 1024 * static_cast<uint64_t>(s + 1);
    out[i].datatype = 7;
    out[i].enter_ns = first_ns + static_cast<int64_t>(i) * 50000;
  }
  return out;
}

const char* Verdict(bool pass) { return pass ? "PASS" : "FAIL"; }

}  // namespace

int main(int argc, char** argv) {
  using namespace peregrine;
  int reps = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::max(1, std::atoi(argv[i] + 7));
    } else {
      std::fprintf(stderr, "usage: failslow-bench [--reps=N]\n");
      return 2;
    }
  }

  std::printf("ACF period detection over 4096 calls (best of %d):\n", reps);
  double worst_acf = 0.0;
  struct AcfCase {
    const char* name;
    int period;
    double noise;
  };
  for (const AcfCase c : {AcfCase{"period 64, clean", 64, 0.0},
                          AcfCase{"period 300, 1% stray calls", 300, 0.01},
                          AcfCase{"period 1000, 1% stray calls", 1000, 0.01},
                          AcfCase{"no period (all lags scanned)", 4096, 0.0}}) {
    const auto calls = Calls(4096, c.period, c.noise, 1);
    double best = 1e9;
    int found = 0;
    for (int r = 0; r < reps; ++r) {
      const auto start = Clock::now();
      auto est = DetectPeriod(calls);
      best = std::min(best, SecondsSince(start));
      found = est.ok() ? est->period : 0;
    }
    std::vector<double> numeric(calls.begin(), calls.end());
    double naive_best = 1e9;
    int naive_found = 0;
    for (int r = 0; r < 3; ++r) {
      const auto start = Clock::now();
      naive_found = NaiveAcfPeriod(numeric, 0.95);
      naive_best = std::min(naive_best, SecondsSince(start));
    }
    std::printf("  %-30s %9.1f us (period %4d)  naive O(n^2) %9.1f us (period %4d)  speed-up %6.1fx\n",
                c.name, best * 1e6, found, naive_best * 1e6, naive_found, naive_best / best);
    worst_acf = std::max(worst_acf, best);
  }
  std::printf("  budget ACF over 4,096 calls < 1 ms: %s (worst case %.1f us, %.2f of the budget)\n",
              Verdict(worst_acf < 1e-3), worst_acf * 1e6, worst_acf / 1e-3);

  std::printf("IterationTracker (the agent's full path) on 4096 calls from a fresh tracker "
              "(best of %d):\n", reps);
  double worst_tracker = 0.0;
  struct TrackerCase {
    const char* name;
    int period;
    double noise;
    bool inserted;
  };
  for (const TrackerCase c : {TrackerCase{"period 64, clean", 64, 0.0, true},
                              TrackerCase{"period 300, 1% inserted calls", 300, 0.01, true},
                              TrackerCase{"period 1000, 1% inserted calls", 1000, 0.01, true},
                              TrackerCase{"period 300, 1% replaced calls", 300, 0.01, false},
                              TrackerCase{"no period", 4096, 0.0, true}}) {
    const auto calls = c.inserted ? CallsWithInsertions(8192, c.period, c.noise, 1)
                                  : Calls(8192, c.period, c.noise, 1);
    const auto records = Records(calls, 1000000000);
    const absl::Span<const NcclCallRecord> first(records.data(), 4096);
    const absl::Span<const NcclCallRecord> second(records.data() + 4096, 4096);
    double best_one = 1e9, best_batched = 1e9, best_steady = 1e9;
    size_t samples = 0;
    int period = 0;
    for (int r = 0; r < reps; ++r) {
      auto one = IterationTracker::Create({});
      if (!one.ok()) return 1;
      auto start = Clock::now();
      samples = one->Add(first).size();
      best_one = std::min(best_one, SecondsSince(start));
      period = one->period();

      auto batched = IterationTracker::Create({});
      if (!batched.ok()) return 1;
      start = Clock::now();
      for (size_t i = 0; i < first.size(); i += 64) batched->Add(first.subspan(i, 64));
      best_batched = std::min(best_batched, SecondsSince(start));
      start = Clock::now();
      for (size_t i = 0; i < second.size(); i += 64) batched->Add(second.subspan(i, 64));
      best_steady = std::min(best_steady, SecondsSince(start));
    }
    std::printf("  %-31s one batch %8.1f us  64-call batches %8.1f us  (period %4d, %zu samples)"
                "  then %6.1f ns/call steady\n",
                c.name, best_one * 1e6, best_batched * 1e6, period, samples,
                best_steady * 1e9 / 4096.0);
    worst_tracker = std::max({worst_tracker, best_one, best_batched});
  }
  std::printf("  the ACF budget (4,096 calls < 1 ms) applied to the whole tracker, which has no "
              "budget of its own: %s (worst case %.1f us, %.2f of the budget)\n",
              Verdict(worst_tracker < 1e-3), worst_tracker * 1e6, worst_tracker / 1e-3);

  // BOCD on a trace with a fail-slow in the middle.
  const int n = 200000;
  std::mt19937 rng(2);
  std::normal_distribution<double> noise(0.0, 0.02);
  std::vector<double> x(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double level = (i / 5000) % 4 == 3 ? 1.3 : 1.0;
    x[static_cast<size_t>(i)] = 100.0 * level * (1.0 + noise(rng));
  }
  auto pruned = BocdChangePointDetector::Create({});
  if (!pruned.ok()) return 1;
  auto start = Clock::now();
  size_t reports = 0;
  for (double v : x) reports += pruned->Update(v).size();
  const double pruned_rate = n / SecondsSince(start);

  BocdOptions full_options;
  full_options.prune_epsilon = 0.0;
  full_options.max_run_lengths = 1 << 30;
  auto full = BocdChangePointDetector::Create(full_options);
  if (!full.ok()) return 1;
  const int full_n = 20000;
  start = Clock::now();
  for (int i = 0; i < full_n; ++i) full->Update(x[static_cast<size_t>(i)]);
  const double full_rate = full_n / SecondsSince(start);
  std::printf("BOCD: %.2fM updates/s pruned (max %zu run lengths, %zu change points in %d samples);"
              " unpruned %.3fM updates/s over %d samples (%zu run lengths); speed-up %.0fx\n",
              pruned_rate / 1e6, pruned->max_active_run_lengths_seen(), reports, n,
              full_rate / 1e6, full_n, full->active_run_lengths(), pruned_rate / full_rate);
  std::printf("  budget BOCD >= 1M updates/s per core: %s (%.2fM/s, %.2fx the budget)\n",
              Verdict(pruned_rate >= 1e6), pruned_rate / 1e6, pruned_rate / 1e6);

  auto verified = FailSlowDetector::Create({});
  if (!verified.ok()) return 1;
  start = Clock::now();
  size_t events = 0;
  for (double v : x) events += verified->Update(v).events.size();
  const double verified_rate = n / SecondsSince(start);
  std::printf("BOCD+verification: %.2fM updates/s (%zu verified events)\n", verified_rate / 1e6,
              events);

  auto window = SlidingWindowDetector::Create({});
  if (!window.ok()) return 1;
  start = Clock::now();
  size_t flagged = 0;
  for (double v : x) flagged += window->Update(v).has_value();
  const double window_rate = n / SecondsSince(start);
  std::printf("sliding window (20): %.2fM updates/s (%zu events); BOCD+V costs %.1fx the "
              "sliding window per update\n",
              window_rate / 1e6, flagged, window_rate / verified_rate);
  return 0;
}
