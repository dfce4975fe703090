// Micro-batch redistribution across data-parallel replicas (fail-slow mitigation S2): how
// many of a step's M micro-batches each replica should run so that the step's makespan
// max_i m_i * t_i is as small as possible, given each replica's measured time per
// micro-batch t_i and an optional memory cap c_i. The plan is exact (a minimum over all
// integer plans with 1 <= m_i <= c_i and sum m_i = M); among optimal plans it is the one
// the greedy "next micro-batch to the replica that would finish it first, lowest index on
// a tie" builds, so equal inputs give equal plans. The algorithm and its proof are in
// microbatch_plan.cc; the cost is O(n log n) for n replicas, independent of M.
//
// Gradient scale. The unmitigated step (M/n micro-batches per replica, each micro-batch
// gradient g_j the gradient of that micro-batch's mean loss) applies
//     g = (1/M) * sum_{j=1..M} g_j.
// A rank r that ran m_r micro-batches sums them into G_r and multiplies by a scale s_r;
// the data-parallel all-reduce AVERAGE then yields (1/n) * sum_r s_r * G_r. This equals g
// for every choice of the g_j exactly when s_r = n/M for every r: each micro-batch must
// carry weight 1/M whichever rank ran it. The usual rule "divide by the local number of
// accumulation steps" (s_r = 1/m_r) equals n/M only for the even split; with an uneven plan
// it weights a micro-batch of rank r by 1/(n * m_r), so the slow replica's few micro-batches
// count more than the fast replicas' many and the update is biased. The same n/M holds for
// the even split, so the trainer's scale does not change when a plan is applied.
//
// Limits (kInvalidArgument naming the field otherwise): 1 <= n <= 2^20 replicas,
// n <= M <= 2^30 micro-batches, every t_i finite in [1e-9, 1e9] seconds, every cap
// c_i >= 0 (0: no cap), and the caps must admit M (sum of caps >= M).
//
// Pure functions: no I/O, clocks or state; thread-safe. Depends on Abseil only.
#ifndef PEREGRINE_CONTROLLER_CORE_MICROBATCH_PLAN_H_
#define PEREGRINE_CONTROLLER_CORE_MICROBATCH_PLAN_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine {

inline constexpr int64_t kMaxDataParallelReplicas = int64_t{1} << 20;
inline constexpr int64_t kMaxMicroBatchesPerStep = int64_t{1} << 30;
inline constexpr double kMinSecondsPerMicroBatch = 1e-9;
inline constexpr double kMaxSecondsPerMicroBatch = 1e9;

struct MicroBatchSplitInputs {
  // t_i: measured seconds per micro-batch of data-parallel replica i; its size is n.
  std::vector<double> seconds_per_micro_batch;
  // c_i: the most micro-batches replica i's memory allows, 0 for no cap. Empty: no caps;
  // otherwise one per replica.
  std::vector<int64_t> max_micro_batches;
  // M: micro-batches per step across all replicas (the global batch in micro-batches).
  int64_t micro_batches = 0;
};

// The solver's answer. (The file that carries a plan to the ranks has its own struct,
// client/microbatch_plan_format.h MicroBatchPlan: counts, gradient_scale, M, plan id.)
struct MicroBatchSplit {
  std::vector<int64_t> micro_batches;  // m_i, one per replica; sum is M
  double makespan_seconds = 0.0;       // max_i m_i * t_i, the predicted step compute time
  // The makespan of today's even split: M / n each, the first M mod n replicas one more
  // (reported as measured even where it would exceed a cap).
  double even_split_makespan_seconds = 0.0;
  // n / M: what every rank multiplies its summed micro-batch gradients by before the
  // all-reduce AVERAGE (see the header comment).
  double gradient_scale = 0.0;
};

// The exact plan for `inputs`. Fails with kInvalidArgument naming the field
// (seconds_per_micro_batch[i], max_micro_batches[i], max_micro_batches, micro_batches)
// when an input is outside the limits above or the caps cannot hold M (the message says
// by how many micro-batches they fall short).
absl::StatusOr<MicroBatchSplit> PlanMicroBatches(const MicroBatchSplitInputs& inputs);

struct MicroBatchReplanInputs {
  // m_i the job runs now, one per replica (each >= 1); their sum is M.
  std::vector<int64_t> current_micro_batches;
  // Newly measured t_i, one per replica (same limits as MicroBatchSplitInputs).
  std::vector<double> seconds_per_micro_batch;
  // c_i as in MicroBatchSplitInputs (empty: no caps).
  std::vector<int64_t> max_micro_batches;
  // Apply only when the predicted makespan drops by more than this fraction of the
  // current one; in [0, 1). Callers pass the job's failSlow.verifyThreshold.
  double min_relative_improvement = 0.10;
};

struct MicroBatchReplan {
  MicroBatchSplit split;  // the exact plan for the new measurements
  double current_makespan_seconds = 0;  // max_i current_i * t_i under the new measurements
  // (current - split.makespan) / current: >= 0 when the current counts are within the
  // caps (the plan is optimal), possibly negative when they are not.
  double relative_improvement = 0.0;
  // A current count above its cap (the caps changed): the current plan cannot stay.
  bool current_exceeds_caps = false;
  // Worth applying: current_exceeds_caps, or relative_improvement >
  // min_relative_improvement.
  bool apply = false;
};

// Re-solves for the new measurements and decides whether the new plan is worth applying
// (a re-plan costs the trainer a reconfiguration, so a marginal gain is not). Fails with
// kInvalidArgument naming the field: current_micro_batches (empty, a count < 1, size
// differing from seconds_per_micro_batch, or a sum outside [n, 2^30]),
// min_relative_improvement (outside [0, 1) or NaN), or any error of PlanMicroBatches.
absl::StatusOr<MicroBatchReplan> EvaluateMicroBatchReplan(const MicroBatchReplanInputs& inputs);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_MICROBATCH_PLAN_H_
