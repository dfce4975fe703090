#include "controller/core/microbatch_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

// The algorithm and why it is exact.
//
// Candidates. Replica i must run one micro-batch; running a k-th one (2 <= k <= c_i) ends
// it at v(i, k) = k * t_i (a double product: everything below, the optimum included, is
// about these computed values, which grow strictly with k because t_i >= 1e-9 and
// k <= 2^30 keep the gap t_i far above an ulp). A plan is a choice of R = M - n
// candidates closed downwards per replica (it takes (i, k) only with (i, k - 1)), and its
// makespan is max(max_i t_i, the largest value it takes).
//
// Exactness of the greedy. Order all candidates by (value, replica index); because the
// values of one replica grow with k, the first R candidates in this order are closed
// downwards, so they form a plan P. Any plan Q takes R candidates, so its largest value is
// at least the R-th smallest value of all candidates, which is P's largest value; hence
// makespan(Q) >= makespan(P) and P is optimal. P is what a min-heap keyed on
// (next finish time (m_i + 1) * t_i, index) builds by popping R times from all-ones (it
// merges the per-replica sorted lists): that is the baseline the bench measures, and the
// (value, index) order is what makes ties deterministic, lowest index first.
//
// Skipping most of the pops. For a level L let C(L) be the number of candidates with
// value <= L. The candidates with value <= L are a prefix of the order above (every
// candidate tied at a value <= L is in it), so if C(L) <= R, P starts with exactly them:
// start each replica at k_i = max(1, #{k <= c_i : k * t_i <= L}) and pop the remaining
// R - C(L) from the heap. The level comes from the continuous relaxation
//     f(x) = sum_i (clamp(x / t_i, 1, c_i) - 1)  >=  C(x),
// piecewise linear and non-decreasing in x with breakpoints t_i (replica i starts to
// count) and c_i * t_i (its cap binds). Walking the 2n sorted breakpoints with the
// current slope finds the largest x with f(x) <= R in O(n log n); C(x) <= f(x) <= R. At
// that x every replica whose cap does not bind loses less than one micro-batch to the
// floor, so C(x) >= R - n and the heap finishes in at most n pops: O(n log n) in all,
// independent of M. L is x less a relative 1e-12, so rounding in f cannot push C(L) above
// R; the start is then counted exactly from the products k * t_i <= L, and should it
// still exceed R (it cannot in exact arithmetic) the solver starts from all-ones, which
// is exact too, only slower.

namespace peregrine {
namespace {

struct HeapEntry {
  double finish;  // (m_i + 1) * t_i: when replica i would finish one more micro-batch
  int64_t index;
};

// std heaps keep the greatest on top; this puts the earliest finish, then the lowest
// index, there. A function object, so the heap operations inline it.
struct LaterThan {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    if (a.finish != b.finish) return a.finish > b.finish;
    return a.index > b.index;
  }
};

// The cap of replica i with "no cap" (0) as M: nobody can take more than M.
int64_t EffectiveCap(const std::vector<int64_t>& caps, size_t i, int64_t m) {
  if (caps.empty() || caps[i] == 0) return m;
  return std::min(caps[i], m);
}

absl::Status ValidatePlanInputs(const MicroBatchSplitInputs& in) {
  const auto& t = in.seconds_per_micro_batch;
  const int64_t n = static_cast<int64_t>(t.size());
  if (n == 0) {
    return absl::InvalidArgumentError(
        "seconds_per_micro_batch is empty: at least one data-parallel replica is needed");
  }
  if (n > kMaxDataParallelReplicas) {
    return absl::InvalidArgumentError(
        absl::StrFormat("seconds_per_micro_batch has %d replicas, more than the limit %d", n,
                        kMaxDataParallelReplicas));
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = t[static_cast<size_t>(i)];
    // The negated form also rejects NaN.
    if (!(v >= kMinSecondsPerMicroBatch && v <= kMaxSecondsPerMicroBatch)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "seconds_per_micro_batch[%d] must be a finite time in [%g, %g] seconds, got %g", i,
          kMinSecondsPerMicroBatch, kMaxSecondsPerMicroBatch, v));
    }
  }
  if (in.micro_batches < n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "micro_batches (%d) is less than the number of replicas (%d): every replica runs at "
        "least one",
        in.micro_batches, n));
  }
  if (in.micro_batches > kMaxMicroBatchesPerStep) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "micro_batches (%d) is more than the limit %d", in.micro_batches,
        kMaxMicroBatchesPerStep));
  }
  const auto& caps = in.max_micro_batches;
  if (caps.empty()) return absl::OkStatus();
  if (static_cast<int64_t>(caps.size()) != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_micro_batches has %d entries for %d replicas (one per replica, or none)",
        caps.size(), n));
  }
  int64_t capacity = 0;  // saturates at M
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = caps[static_cast<size_t>(i)];
    if (c < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "max_micro_batches[%d] must be >= 1, or 0 for no cap, got %d", i, c));
    }
    capacity = std::min(in.micro_batches,
                        capacity + EffectiveCap(caps, static_cast<size_t>(i), in.micro_batches));
  }
  if (capacity < in.micro_batches) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_micro_batches sum to %d, %d short of micro_batches (%d): no plan fits",
        capacity, in.micro_batches - capacity, in.micro_batches));
  }
  return absl::OkStatus();
}

// The largest x with f(x) = sum_i (clamp(x / t_i, 1, cap_i) - 1) <= r (see the top of the
// file); +infinity when f never exceeds r (every cap binds and the caps sum to exactly M).
double RelaxedLevel(const std::vector<double>& t, const std::vector<int64_t>& cap, int64_t r) {
  struct Breakpoint {
    double x;
    // Replica index times 2, plus 1 where its cap binds (else it starts to count there).
    uint64_t replica_and_kind;
  };
  std::vector<Breakpoint> points;
  points.reserve(2 * t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    points.push_back({t[i], 2 * static_cast<uint64_t>(i)});
    // At M (no cap, or a cap >= M) f passes r before the cap would bind.
    if (cap[i] < std::numeric_limits<int64_t>::max()) {
      points.push_back({static_cast<double>(cap[i]) * t[i], 2 * static_cast<uint64_t>(i) + 1});
    }
  }
  std::sort(points.begin(), points.end(),
            [](const Breakpoint& a, const Breakpoint& b) { return a.x < b.x; });
  const long double target = static_cast<long double>(r);
  int64_t active = 0;          // replicas whose term grows at this x
  long double slope = 0.0L;    // the sum of their 1 / t_i
  long double offset = 0.0L;   // f = slope * x + offset until the next breakpoint
  for (const Breakpoint& p : points) {
    if (active > 0 && slope * p.x + offset > target) {
      return static_cast<double>((target - offset) / slope);
    }
    const size_t i = static_cast<size_t>(p.replica_and_kind / 2);
    if (p.replica_and_kind % 2 == 0) {  // from here x / t_i - 1
      ++active;
      slope += 1.0L / t[i];
      offset -= 1.0L;
    } else {  // from here c_i - 1
      --active;
      slope -= 1.0L / t[i];
      offset += static_cast<long double>(cap[i]);
    }
  }
  if (active > 0) return static_cast<double>((target - offset) / slope);
  return std::numeric_limits<double>::infinity();
}

}  // namespace

absl::StatusOr<MicroBatchSplit> PlanMicroBatches(const MicroBatchSplitInputs& inputs) {
  if (absl::Status status = ValidatePlanInputs(inputs); !status.ok()) return status;
  const std::vector<double>& t = inputs.seconds_per_micro_batch;
  const size_t n = t.size();
  const int64_t m = inputs.micro_batches;
  const int64_t r = m - static_cast<int64_t>(n);

  std::vector<int64_t> cap(n);
  for (size_t i = 0; i < n; ++i) cap[i] = EffectiveCap(inputs.max_micro_batches, i, m);

  // Warm start: every candidate with value <= level (see the top of the file).
  std::vector<int64_t> counts(n, 1);
  int64_t assigned = static_cast<int64_t>(n);
  if (r > 0) {
    std::vector<int64_t> relax_caps(n);
    for (size_t i = 0; i < n; ++i) {
      relax_caps[i] = cap[i] >= m ? std::numeric_limits<int64_t>::max() : cap[i];
    }
    const double x = RelaxedLevel(t, relax_caps, r);
    const double level = x * (1.0 - 1e-12);
    int64_t warm = 0;
    for (size_t i = 0; i < n; ++i) {
      // A level that rounding made meaningless (NaN, <= 0) starts the replica at 1.
      const double q = level > 0.0 ? std::floor(level / t[i]) : 1.0;
      int64_t k = q >= static_cast<double>(cap[i]) ? cap[i]
                                                    : std::max<int64_t>(1, static_cast<int64_t>(q));
      // Count exactly on the products the greedy compares.
      while (k > 1 && static_cast<double>(k) * t[i] > level) --k;
      while (k < cap[i] && static_cast<double>(k + 1) * t[i] <= level) ++k;
      counts[i] = k;
      warm += k;
    }
    if (warm <= m) {
      assigned = warm;
    } else {
      std::fill(counts.begin(), counts.end(), 1);  // unreachable in exact arithmetic
    }
  }

  std::vector<HeapEntry> heap;
  heap.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (counts[i] < cap[i]) {
      heap.push_back({static_cast<double>(counts[i] + 1) * t[i], static_cast<int64_t>(i)});
    }
  }
  std::make_heap(heap.begin(), heap.end(), LaterThan());
  for (; assigned < m; ++assigned) {
    // Validation guarantees the caps hold M, so the heap is not empty here.
    std::pop_heap(heap.begin(), heap.end(), LaterThan());
    HeapEntry& top = heap.back();
    const size_t i = static_cast<size_t>(top.index);
    ++counts[i];
    if (counts[i] < cap[i]) {
      top.finish = static_cast<double>(counts[i] + 1) * t[i];
      std::push_heap(heap.begin(), heap.end(), LaterThan());
    } else {
      heap.pop_back();
    }
  }

  MicroBatchSplit plan;
  const int64_t base = m / static_cast<int64_t>(n);
  const int64_t extra = m % static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    plan.makespan_seconds =
        std::max(plan.makespan_seconds, static_cast<double>(counts[i]) * t[i]);
    const int64_t even = base + (static_cast<int64_t>(i) < extra ? 1 : 0);
    plan.even_split_makespan_seconds =
        std::max(plan.even_split_makespan_seconds, static_cast<double>(even) * t[i]);
  }
  plan.micro_batches = std::move(counts);
  plan.gradient_scale = static_cast<double>(n) / static_cast<double>(m);
  return plan;
}

absl::StatusOr<MicroBatchReplan> EvaluateMicroBatchReplan(const MicroBatchReplanInputs& inputs) {
  const auto& current = inputs.current_micro_batches;
  const auto& t = inputs.seconds_per_micro_batch;
  if (current.empty()) {
    return absl::InvalidArgumentError("current_micro_batches is empty");
  }
  if (current.size() != t.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "current_micro_batches has %d entries but seconds_per_micro_batch has %d",
        current.size(), t.size()));
  }
  int64_t total = 0;
  for (size_t i = 0; i < current.size(); ++i) {
    if (current[i] < 1 || current[i] > kMaxMicroBatchesPerStep) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "current_micro_batches[%d] must be in [1, %d], got %d", i, kMaxMicroBatchesPerStep,
          current[i]));
    }
    total += current[i];  // <= 2^20 * 2^30: no overflow
  }
  if (total > kMaxMicroBatchesPerStep) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "current_micro_batches sum to %d, more than the limit %d", total,
        kMaxMicroBatchesPerStep));
  }
  const double threshold = inputs.min_relative_improvement;
  if (!(threshold >= 0.0 && threshold < 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_relative_improvement must be in [0, 1), got %g", threshold));
  }

  MicroBatchSplitInputs plan_inputs;
  plan_inputs.seconds_per_micro_batch = t;
  plan_inputs.max_micro_batches = inputs.max_micro_batches;
  plan_inputs.micro_batches = total;
  absl::StatusOr<MicroBatchSplit> plan = PlanMicroBatches(plan_inputs);
  if (!plan.ok()) return plan.status();

  MicroBatchReplan out;
  const auto& caps = inputs.max_micro_batches;
  for (size_t i = 0; i < current.size(); ++i) {
    out.current_makespan_seconds =
        std::max(out.current_makespan_seconds, static_cast<double>(current[i]) * t[i]);
    if (!caps.empty() && caps[i] != 0 && current[i] > caps[i]) out.current_exceeds_caps = true;
  }
  out.relative_improvement =
      (out.current_makespan_seconds - plan->makespan_seconds) / out.current_makespan_seconds;
  out.apply = out.current_exceeds_caps || out.relative_improvement > threshold;
  out.split = *std::move(plan);
  return out;
}

}  // namespace peregrine
