// failslow-bench: cost of the fail-slow detectors, each against a baseline measured in the
// same run.
//  - ACF period detection over 4,096 calls (DESIGN budget < 1 ms) vs a naive O(n^2) ACF
//    (Falcon's formula over every lag, on numerically encoded calls);
//  - BOCD updates per second (budget >= 1M/s per core) vs BOCD without run-length pruning;
//  - sliding-window updates per second.
//
// Times are process CPU time (std::clock), so they are per-core figures even on a busy
// machine; std::clock's resolution is 1 us, so the ACF timings are best-of-N.
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
  }

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
