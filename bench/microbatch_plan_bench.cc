// microbatch-plan-bench: cost of the exact micro-batch redistribution solver
// (controller/core/microbatch_plan.h, fail-slow mitigation S2) against a baseline measured
// in the same run.
//
// Baseline: the naive exact method, a min-heap on (next finish time, index) popped M - n
// times from all-ones (O(M log n)); the solver warm-starts from the continuous relaxation
// and pops at most n times (O(n log n)). Both return the same plan, which the bench checks.
//
// Instances: random per-replica times per micro-batch (uniform in [0.95, 1.05] s) with
// about 1 in 64 replicas 2-3x slow, no caps; 512 replicas / 4,096 micro-batches (budget
// < 1 ms, docs/failslow.md) and 8,192 / 65,536. Times are the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), so they are per-core figures on a shared machine; the median
// over the repetitions is reported. PASS/FAIL is information, not a test.
//
//   microbatch-plan-bench [--reps=N]   (N: repetitions of the solver; the baseline runs N/4)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "controller/core/microbatch_plan.h"

namespace {

double ThreadSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The naive exact method: one micro-batch at a time from all-ones to the replica that
// would finish it first (lowest index on a tie). No caps (the instances have none).
std::vector<int64_t> NaiveHeapPlan(const std::vector<double>& t, int64_t m) {
  struct Entry {
    double finish;
    int64_t index;
  };
  auto later = [](const Entry& a, const Entry& b) {
    return a.finish != b.finish ? a.finish > b.finish : a.index > b.index;
  };
  std::vector<int64_t> counts(t.size(), 1);
  std::vector<Entry> heap;
  heap.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) heap.push_back({2.0 * t[i], static_cast<int64_t>(i)});
  std::make_heap(heap.begin(), heap.end(), later);
  for (int64_t assigned = static_cast<int64_t>(t.size()); assigned < m; ++assigned) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Entry& top = heap.back();
    const size_t i = static_cast<size_t>(top.index);
    ++counts[i];
    top.finish = static_cast<double>(counts[i] + 1) * t[i];
    std::push_heap(heap.begin(), heap.end(), later);
  }
  return counts;
}

const char* Verdict(bool ok) { return ok ? "PASS" : "FAIL"; }

// Runs one instance; returns false when the two methods disagree or the solver fails.
bool RunInstance(int replicas, int64_t micro_batches, int reps, double budget_seconds,
                 uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> base(0.95, 1.05);
  std::uniform_real_distribution<double> slow(2.0, 3.0);
  peregrine::MicroBatchSplitInputs in;
  in.micro_batches = micro_batches;
  int slow_count = 0;
  for (int i = 0; i < replicas; ++i) {
    double t = base(rng);
    if (rng() % 64 == 0) {
      t *= slow(rng);
      ++slow_count;
    }
    in.seconds_per_micro_batch.push_back(t);
  }

  std::vector<double> solver_times, naive_times;
  absl::StatusOr<peregrine::MicroBatchSplit> plan;
  for (int r = 0; r < reps; ++r) {
    const double start = ThreadSeconds();
    plan = peregrine::PlanMicroBatches(in);
    solver_times.push_back(ThreadSeconds() - start);
    if (!plan.ok()) {
      std::printf("  solver failed: %s\n", plan.status().ToString().c_str());
      return false;
    }
  }
  std::vector<int64_t> naive;
  for (int r = 0; r < std::max(1, reps / 4); ++r) {
    const double start = ThreadSeconds();
    naive = NaiveHeapPlan(in.seconds_per_micro_batch, micro_batches);
    naive_times.push_back(ThreadSeconds() - start);
  }
  const bool same = naive == plan->micro_batches;
  const double solver = Median(solver_times);
  const double baseline = Median(naive_times);
  std::printf("%5d replicas, %6lld micro-batches (%d slow 2-3x):\n", replicas,
              static_cast<long long>(micro_batches), slow_count);
  std::printf("  PlanMicroBatches     %9.1f us (median of %zu)\n", solver * 1e6,
              solver_times.size());
  std::printf("  naive heap from ones %9.1f us (median of %zu)   speed-up %6.1fx   same plan: %s\n",
              baseline * 1e6, naive_times.size(), baseline / solver, same ? "yes" : "NO");
  std::printf("  step makespan %.3f s vs even split %.3f s (%.2fx faster)\n",
              plan->makespan_seconds, plan->even_split_makespan_seconds,
              plan->even_split_makespan_seconds / plan->makespan_seconds);
  if (budget_seconds > 0) {
    std::printf("  budget < %.0f ms: %s (%.3f of the budget)\n", budget_seconds * 1e3,
                Verdict(solver < budget_seconds), solver / budget_seconds);
  }
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 2000;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::atoi(argv[i] + 7);
    } else {
      std::fprintf(stderr, "usage: microbatch-plan-bench [--reps=N]\n");
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "--reps must be >= 1\n");
    return 2;
  }
  std::printf("microbatch-plan-bench: exact micro-batch redistribution, thread CPU time\n");
  bool ok = RunInstance(512, 4096, reps, 1e-3, 1);
  ok = RunInstance(8192, 65536, std::max(1, reps / 20), 0.0, 2) && ok;
  return ok ? 0 : 1;
}
