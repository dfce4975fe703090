// Tests for controller/core/microbatch_plan.h.
//
// References: a brute force over every composition of M (small cases) and the naive
// greedy (one micro-batch at a time from all-ones to the replica that would finish it
// first, lowest index on a tie), which the .cc proves exact and which defines the plan
// among equal-makespan ones.
#include "controller/core/microbatch_plan.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace peregrine {
namespace {

int64_t CapOf(const std::vector<int64_t>& caps, size_t i, int64_t m) {
  return caps.empty() || caps[i] == 0 ? m : caps[i];
}

double Makespan(const std::vector<int64_t>& counts, const std::vector<double>& t) {
  double worst = 0.0;
  for (size_t i = 0; i < t.size(); ++i) worst = std::max(worst, static_cast<double>(counts[i]) * t[i]);
  return worst;
}

// The smallest makespan over every plan with 1 <= m_i <= c_i and sum M; nullopt when
// none exists.
std::optional<double> BruteForceMakespan(const std::vector<double>& t,
                                         const std::vector<int64_t>& caps, int64_t m) {
  std::optional<double> best;
  std::vector<int64_t> counts(t.size(), 0);
  std::function<void(size_t, int64_t)> place = [&](size_t i, int64_t left) {
    if (i + 1 == t.size()) {
      if (left < 1 || left > CapOf(caps, i, m)) return;
      counts[i] = left;
      const double makespan = Makespan(counts, t);
      if (!best || makespan < *best) best = makespan;
      return;
    }
    for (int64_t k = 1; k <= std::min(CapOf(caps, i, m), left - 1); ++k) {
      counts[i] = k;
      place(i + 1, left - k);
    }
  };
  place(0, m);
  return best;
}

// One micro-batch at a time from all-ones, O(M n): the plan the solver must return.
std::vector<int64_t> NaiveGreedy(const std::vector<double>& t, const std::vector<int64_t>& caps,
                                 int64_t m) {
  std::vector<int64_t> counts(t.size(), 1);
  for (int64_t assigned = static_cast<int64_t>(t.size()); assigned < m; ++assigned) {
    size_t pick = t.size();
    for (size_t i = 0; i < t.size(); ++i) {
      if (counts[i] >= CapOf(caps, i, m)) continue;
      if (pick == t.size() || static_cast<double>(counts[i] + 1) * t[i] <
                                  static_cast<double>(counts[pick] + 1) * t[pick]) {
        pick = i;
      }
    }
    REQUIRE(pick < t.size());
    ++counts[pick];
  }
  return counts;
}

void CheckPlanIsValid(const MicroBatchSplit& plan, const MicroBatchSplitInputs& in) {
  REQUIRE(plan.micro_batches.size() == in.seconds_per_micro_batch.size());
  int64_t sum = 0;
  for (size_t i = 0; i < plan.micro_batches.size(); ++i) {
    REQUIRE(plan.micro_batches[i] >= 1);
    REQUIRE(plan.micro_batches[i] <= CapOf(in.max_micro_batches, i, in.micro_batches));
    sum += plan.micro_batches[i];
  }
  REQUIRE(sum == in.micro_batches);
  REQUIRE(plan.makespan_seconds == Makespan(plan.micro_batches, in.seconds_per_micro_batch));
  const double n = static_cast<double>(in.seconds_per_micro_batch.size());
  REQUIRE(plan.gradient_scale == n / static_cast<double>(in.micro_batches));
}

TEST_CASE("PlanMicroBatches matches brute force on thousands of small random cases", "[unit]") {
  std::mt19937_64 rng(13);
  const std::vector<double> common = {0.5, 1.0, 1.0, 1.5, 2.0, 3.0};  // equal values on purpose
  int feasible = 0, infeasible = 0, uneven = 0;
  for (int round = 0; round < 6000; ++round) {
    const int n = 1 + static_cast<int>(rng() % 5);
    const int64_t m = n + static_cast<int64_t>(rng() % static_cast<uint64_t>(13 - n));
    MicroBatchSplitInputs in;
    in.micro_batches = m;
    for (int i = 0; i < n; ++i) {
      in.seconds_per_micro_batch.push_back(
          rng() % 2 ? common[rng() % common.size()]
                    : std::uniform_real_distribution<double>(0.01, 4.0)(rng));
    }
    if (rng() % 2) {
      for (int i = 0; i < n; ++i) in.max_micro_batches.push_back(static_cast<int64_t>(rng() % 6));
    }
    const std::optional<double> best =
        BruteForceMakespan(in.seconds_per_micro_batch, in.max_micro_batches, m);
    const absl::StatusOr<MicroBatchSplit> plan = PlanMicroBatches(in);
    INFO("round " << round << " n " << n << " M " << m);
    if (!best) {
      ++infeasible;
      REQUIRE(plan.status().code() == absl::StatusCode::kInvalidArgument);
      REQUIRE_THAT(std::string(plan.status().message()), Catch::Contains("max_micro_batches"));
      continue;
    }
    ++feasible;
    REQUIRE(plan.ok());
    CheckPlanIsValid(*plan, in);
    REQUIRE(plan->makespan_seconds == *best);
    REQUIRE(plan->micro_batches == NaiveGreedy(in.seconds_per_micro_batch, in.max_micro_batches, m));
    bool even_fits = true;  // the even split is a plan too unless it breaks a cap
    for (int i = 0; i < n; ++i) {
      even_fits = even_fits && m / n + (i < m % n ? 1 : 0) <= CapOf(in.max_micro_batches, i, m);
    }
    if (even_fits) REQUIRE(plan->makespan_seconds <= plan->even_split_makespan_seconds);
    if (plan->makespan_seconds < plan->even_split_makespan_seconds) ++uneven;
  }
  // The generator reaches every kind of case.
  REQUIRE(feasible > 3000);
  REQUIRE(infeasible > 300);
  REQUIRE(uneven > 1000);
}

TEST_CASE("PlanMicroBatches equals the naive greedy on large random cases with caps", "[unit]") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + static_cast<int>(rng() % 300);
    const int64_t m = n + static_cast<int64_t>(rng() % 4000);
    MicroBatchSplitInputs in;
    in.micro_batches = m;
    for (int i = 0; i < n; ++i) {
      double t = std::uniform_real_distribution<double>(0.9, 1.1)(rng);
      if (rng() % 20 == 0) t *= 2.0 + static_cast<double>(rng() % 2);  // a few 2-3x slow
      if (rng() % 50 == 0) t = 1.0;                                     // exact ties
      in.seconds_per_micro_batch.push_back(t);
    }
    if (round % 2) {
      const int64_t even = m / n + 1;
      for (int i = 0; i < n; ++i) {
        in.max_micro_batches.push_back(rng() % 4 == 0 ? 0 : even + static_cast<int64_t>(rng() % 3));
      }
    }
    const absl::StatusOr<MicroBatchSplit> plan = PlanMicroBatches(in);
    INFO("round " << round << " n " << n << " M " << m);
    REQUIRE(plan.ok());
    CheckPlanIsValid(*plan, in);
    REQUIRE(plan->micro_batches == NaiveGreedy(in.seconds_per_micro_batch, in.max_micro_batches, m));
  }
}

TEST_CASE("PlanMicroBatches is exact at the ends of the time range and when every cap binds", "[unit]") {
  MicroBatchSplitInputs wide;
  wide.seconds_per_micro_batch = {kMinSecondsPerMicroBatch, 1.0, kMaxSecondsPerMicroBatch, 3e-9};
  wide.micro_batches = 100000;
  absl::StatusOr<MicroBatchSplit> plan = PlanMicroBatches(wide);
  REQUIRE(plan.ok());
  CheckPlanIsValid(*plan, wide);
  REQUIRE(plan->micro_batches == NaiveGreedy(wide.seconds_per_micro_batch, {}, wide.micro_batches));
  REQUIRE(plan->makespan_seconds == kMaxSecondsPerMicroBatch);  // the slowest runs one

  MicroBatchSplitInputs full;
  full.seconds_per_micro_batch = {1.0, 2.0, 0.5};
  full.max_micro_batches = {3, 4, 5};
  full.micro_batches = 12;
  plan = PlanMicroBatches(full);
  REQUIRE(plan.ok());
  REQUIRE(plan->micro_batches == std::vector<int64_t>{3, 4, 5});
  REQUIRE(plan->makespan_seconds == 8.0);

  MicroBatchSplitInputs one;
  one.seconds_per_micro_batch = {0.25};
  one.micro_batches = 7;
  plan = PlanMicroBatches(one);
  REQUIRE(plan.ok());
  REQUIRE(plan->micro_batches == std::vector<int64_t>{7});
  REQUIRE(plan->makespan_seconds == 1.75);
  REQUIRE(plan->gradient_scale == 1.0 / 7.0);
}

TEST_CASE("One replica 3x slower with DP 4 and M 16 gets 1 micro-batch and the step is 2.4x faster", "[unit]") {
  MicroBatchSplitInputs in;
  in.seconds_per_micro_batch = {1.0, 1.0, 3.0, 1.0};
  in.micro_batches = 16;
  const absl::StatusOr<MicroBatchSplit> plan = PlanMicroBatches(in);
  REQUIRE(plan.ok());
  // Even split: 4 each, the slow one finishes at 12. Giving it 2 would end at 6; with 1 the
  // others take 15, 5 each, so the step ends at 5.
  REQUIRE(plan->micro_batches == std::vector<int64_t>{5, 5, 1, 5});
  REQUIRE(plan->makespan_seconds == 5.0);
  REQUIRE(plan->even_split_makespan_seconds == 12.0);
  REQUIRE(plan->even_split_makespan_seconds / plan->makespan_seconds == Approx(2.4));
  REQUIRE(plan->gradient_scale == 0.25);
}

TEST_CASE("PlanMicroBatches breaks ties toward the lowest index and reports the even split", "[unit]") {
  MicroBatchSplitInputs in;
  in.seconds_per_micro_batch = {1.0, 1.0, 1.0};
  in.micro_batches = 5;
  absl::StatusOr<MicroBatchSplit> plan = PlanMicroBatches(in);
  REQUIRE(plan.ok());
  REQUIRE(plan->micro_batches == std::vector<int64_t>{2, 2, 1});
  REQUIRE(plan->makespan_seconds == 2.0);
  REQUIRE(plan->even_split_makespan_seconds == 2.0);

  // The even split gives the first M mod n replicas one more: {2, 1, 1} on a slow first
  // replica ends at 6, the plan {1, 2, 1} at 3.
  in.seconds_per_micro_batch = {3.0, 1.0, 1.0};
  in.micro_batches = 4;
  plan = PlanMicroBatches(in);
  REQUIRE(plan.ok());
  REQUIRE(plan->micro_batches == std::vector<int64_t>{1, 2, 1});
  REQUIRE(plan->makespan_seconds == 3.0);
  REQUIRE(plan->even_split_makespan_seconds == 6.0);
}

absl::Status PlanStatus(const MicroBatchSplitInputs& in) { return PlanMicroBatches(in).status(); }

void RequireInvalid(const absl::Status& status, const std::string& field) {
  INFO(status.ToString());
  REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE_THAT(std::string(status.message()), Catch::Contains(field));
}

TEST_CASE("PlanMicroBatches rejects bad input naming the field", "[unit]") {
  MicroBatchSplitInputs good;
  good.seconds_per_micro_batch = {1.0, 2.0};
  good.micro_batches = 4;
  REQUIRE(PlanMicroBatches(good).ok());

  MicroBatchSplitInputs in = good;
  in.seconds_per_micro_batch.clear();
  RequireInvalid(PlanStatus(in), "seconds_per_micro_batch is empty");

  in = good;
  in.seconds_per_micro_batch.assign(static_cast<size_t>(kMaxDataParallelReplicas) + 1, 1.0);
  in.micro_batches = kMaxDataParallelReplicas + 1;
  RequireInvalid(PlanStatus(in), "seconds_per_micro_batch has 1048577 replicas");

  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e-10, 2e9}) {
    in = good;
    in.seconds_per_micro_batch[1] = bad;
    RequireInvalid(PlanStatus(in), "seconds_per_micro_batch[1]");
  }

  in = good;
  in.micro_batches = 1;
  RequireInvalid(PlanStatus(in), "micro_batches (1) is less than the number of replicas (2)");
  in.micro_batches = kMaxMicroBatchesPerStep + 1;
  RequireInvalid(PlanStatus(in), "micro_batches (1073741825) is more than the limit");

  in = good;
  in.max_micro_batches = {1};
  RequireInvalid(PlanStatus(in), "max_micro_batches has 1 entries for 2 replicas");
  in.max_micro_batches = {1, -2};
  RequireInvalid(PlanStatus(in), "max_micro_batches[1]");
  in.max_micro_batches = {1, 2};
  RequireInvalid(PlanStatus(in), "max_micro_batches sum to 3, 1 short of micro_batches (4)");
  in.max_micro_batches = {1, 0};  // no cap on the second
  REQUIRE(PlanMicroBatches(in).ok());
}

TEST_CASE("The gradient scale n/M reproduces the unmitigated update after the all-reduce average", "[unit]") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int dims = 8;
  for (int round = 0; round < 50; ++round) {
    const int n = 2 + static_cast<int>(rng() % 7);
    MicroBatchSplitInputs in;
    const int64_t per_replica = 1 + static_cast<int64_t>(rng() % 6);
    in.micro_batches = n * per_replica + static_cast<int64_t>(rng() % n);
    for (int i = 0; i < n; ++i) {
      in.seconds_per_micro_batch.push_back(std::uniform_real_distribution<double>(0.5, 3.0)(rng));
    }
    const absl::StatusOr<MicroBatchSplit> plan = PlanMicroBatches(in);
    REQUIRE(plan.ok());
    // One gradient per micro-batch (the gradient of that micro-batch's mean loss).
    std::vector<std::vector<double>> grads(static_cast<size_t>(in.micro_batches),
                                           std::vector<double>(dims));
    for (auto& g : grads) {
      for (double& x : g) x = normal(rng);
    }
    // Unmitigated: the mean over all M micro-batch gradients.
    std::vector<double> want(dims, 0.0);
    for (const auto& g : grads) {
      for (int d = 0; d < dims; ++d) want[d] += g[d] / static_cast<double>(in.micro_batches);
    }
    // Mitigated: rank r sums its m_r gradients, scales, then AVERAGE over n ranks; the
    // same with the "divide by local accumulation steps" rule for comparison.
    std::vector<double> got(dims, 0.0), per_rank_rule(dims, 0.0);
    size_t next = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t mr = plan->micro_batches[static_cast<size_t>(r)];
      std::vector<double> sum(dims, 0.0);
      for (int64_t j = 0; j < mr; ++j, ++next) {
        for (int d = 0; d < dims; ++d) sum[d] += grads[next][d];
      }
      for (int d = 0; d < dims; ++d) {
        got[d] += plan->gradient_scale * sum[d] / n;
        per_rank_rule[d] += sum[d] / static_cast<double>(mr) / n;
      }
    }
    REQUIRE(next == grads.size());
    double rule_error = 0.0;
    for (int d = 0; d < dims; ++d) {
      REQUIRE(got[d] == Approx(want[d]).margin(1e-12));
      rule_error = std::max(rule_error, std::abs(per_rank_rule[d] - want[d]));
    }
    const bool even = std::all_of(plan->micro_batches.begin(), plan->micro_batches.end(),
                                  [&](int64_t k) { return k == plan->micro_batches[0]; });
    if (!even) REQUIRE(rule_error > 1e-6);  // the 1/m_r rule is wrong for uneven plans
  }
}

TEST_CASE("EvaluateMicroBatchReplan applies a plan only when it improves by more than the threshold", "[unit]") {
  MicroBatchReplanInputs in;
  in.current_micro_batches = {4, 4, 4, 4};
  in.seconds_per_micro_batch = {1.0, 1.0, 3.0, 1.0};
  in.min_relative_improvement = 0.10;
  absl::StatusOr<MicroBatchReplan> replan = EvaluateMicroBatchReplan(in);
  REQUIRE(replan.ok());
  REQUIRE(replan->apply);
  REQUIRE(replan->current_makespan_seconds == 12.0);
  REQUIRE(replan->split.micro_batches == std::vector<int64_t>{5, 5, 1, 5});
  REQUIRE(replan->relative_improvement == Approx(7.0 / 12.0));
  REQUIRE_FALSE(replan->current_exceeds_caps);

  // Already the plan: nothing to gain.
  in.current_micro_batches = {5, 5, 1, 5};
  replan = EvaluateMicroBatchReplan(in);
  REQUIRE(replan.ok());
  REQUIRE_FALSE(replan->apply);
  REQUIRE(replan->relative_improvement == 0.0);

  // A 5% slowdown of one replica: the even split is still the best plan (moving one
  // micro-batch off it makes a fast replica end at 5 > 4.2), so there is nothing to apply.
  in.current_micro_batches = {4, 4, 4, 4};
  in.seconds_per_micro_batch = {1.0, 1.0, 1.05, 1.0};
  replan = EvaluateMicroBatchReplan(in);
  REQUIRE(replan.ok());
  REQUIRE(replan->split.micro_batches == std::vector<int64_t>{4, 4, 4, 4});
  REQUIRE_FALSE(replan->apply);
  in.seconds_per_micro_batch = {1.0, 1.0, 1.5, 1.0};
  in.current_micro_batches = {6, 6, 6, 6};
  replan = EvaluateMicroBatchReplan(in);
  REQUIRE(replan.ok());
  // Current 9; the plan {7, 7, 4, 6} ends at 7: 2/9 = 22% better, above 10%, below 25%.
  REQUIRE(replan->split.micro_batches == std::vector<int64_t>{7, 7, 4, 6});
  REQUIRE(replan->split.makespan_seconds == 7.0);
  REQUIRE(replan->apply);
  in.min_relative_improvement = 0.25;
  replan = EvaluateMicroBatchReplan(in);
  REQUIRE(replan.ok());
  REQUIRE_FALSE(replan->apply);
}

TEST_CASE("EvaluateMicroBatchReplan applies a plan when the current counts exceed new caps", "[unit]") {
  MicroBatchReplanInputs in;
  in.current_micro_batches = {5, 3};
  in.seconds_per_micro_batch = {1.0, 1.0};
  in.max_micro_batches = {4, 0};
  const absl::StatusOr<MicroBatchReplan> replan = EvaluateMicroBatchReplan(in);
  REQUIRE(replan.ok());
  REQUIRE(replan->current_exceeds_caps);
  REQUIRE(replan->apply);
  REQUIRE(replan->split.micro_batches == std::vector<int64_t>{4, 4});
}

TEST_CASE("EvaluateMicroBatchReplan rejects bad input naming the field", "[unit]") {
  MicroBatchReplanInputs good;
  good.current_micro_batches = {2, 2};
  good.seconds_per_micro_batch = {1.0, 1.0};
  REQUIRE(EvaluateMicroBatchReplan(good).ok());

  MicroBatchReplanInputs in = good;
  in.current_micro_batches.clear();
  RequireInvalid(EvaluateMicroBatchReplan(in).status(), "current_micro_batches is empty");
  in.current_micro_batches = {2, 2, 2};
  RequireInvalid(EvaluateMicroBatchReplan(in).status(),
                 "current_micro_batches has 3 entries but seconds_per_micro_batch has 2");
  in.current_micro_batches = {2, 0};
  RequireInvalid(EvaluateMicroBatchReplan(in).status(), "current_micro_batches[1]");
  in.current_micro_batches = {kMaxMicroBatchesPerStep, 1};
  RequireInvalid(EvaluateMicroBatchReplan(in).status(), "current_micro_batches sum to");
  for (const double bad : {-0.1, 1.0, std::nan("")}) {
    in = good;
    in.min_relative_improvement = bad;
    RequireInvalid(EvaluateMicroBatchReplan(in).status(), "min_relative_improvement");
  }
  in = good;
  in.seconds_per_micro_batch[0] = -1.0;
  RequireInvalid(EvaluateMicroBatchReplan(in).status(), "seconds_per_micro_batch[0]");
  in = good;
  in.max_micro_batches = {1, 1};
  RequireInvalid(EvaluateMicroBatchReplan(in).status(), "max_micro_batches sum to 2, 2 short");
}

}  // namespace
}  // namespace peregrine
