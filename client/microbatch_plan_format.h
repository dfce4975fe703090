// The micro-batch plan file: how the agent tells the training ranks of its pod to split
// each step's global micro-batches unevenly over the data-parallel replicas (fail-slow
// mitigation S2). The agent writes it (agent/microbatch_plan_file.h), the client library
// reads it (pg_microbatches in client/peregrine_client.h); this is the one definition of
// its text and of what a valid plan is, compiled into both.
//
// Text, one "key=value" per line, '#' starts a comment line, keys in any order, each once:
//   version=1
//   plan_id=<uint64 >= 1>
//   from_step=<uint64>                the first step the plan applies to
//   global_micro_batches=<uint32>     M, micro-batches per step over all replicas
//   gradient_scale=<double>           finite, > 0 (n/M for n replicas)
//   counts=<c0>,<c1>,...              one per DP replica in DP index order, each >= 1,
//                                     summing to M
// Replica r runs the global micro-batches [c0 + ... + c(r-1), that + c(r)) of the step, sums
// their gradients and multiplies the sum by gradient_scale before the DP all-reduce.
//
// An empty plan (no counts, plan_id 0) means "no plan" (the even split); it is never
// written: the agent removes the file instead.
//
// Pure functions, thread-safe. Errors: InvalidArgument naming the field (and the line).
#ifndef PEREGRINE_CLIENT_MICROBATCH_PLAN_FORMAT_H_
#define PEREGRINE_CLIENT_MICROBATCH_PLAN_FORMAT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace peregrine {

struct MicroBatchPlan {
  uint64_t plan_id = 0;
  uint64_t from_step = 0;
  std::vector<uint32_t> counts;  // per DP replica, DP index order
  double gradient_scale = 0;
  uint32_t global_micro_batches = 0;

  // No counts and plan_id 0: clears any plan (back to the even split).
  bool empty() const { return counts.empty() && plan_id == 0; }
  bool operator==(const MicroBatchPlan&) const = default;
};

// OK for a usable plan: plan_id >= 1, counts non-empty with every count >= 1, their sum
// == global_micro_batches, gradient_scale finite and > 0. Else InvalidArgument naming
// the first field that is wrong ("counts[2]: ...", "gradient_scale: ..."). An empty plan
// is not usable (check empty() first).
absl::Status ValidateMicroBatchPlan(const MicroBatchPlan& plan);

// The file's text for a valid plan (gradient_scale printed to round-trip exactly).
std::string FormatMicroBatchPlan(const MicroBatchPlan& plan);

// The plan in `text`, validated. InvalidArgument naming the line and key for a line that is
// not key=value, an unknown or repeated key, a value that does not parse, a missing key or
// a plan ValidateMicroBatchPlan refuses. Never reads more than `text`.
absl::StatusOr<MicroBatchPlan> ParseMicroBatchPlan(std::string_view text);

// The part of the step that DP replica `dp_rank` runs under `plan` (valid), when the plan
// applies: the index of its first micro-batch in the step's global sequence and how many.
struct MicroBatchShare {
  uint32_t first = 0;
  uint32_t count = 0;
};
// InvalidArgument when dp_rank is not a replica of the plan.
absl::StatusOr<MicroBatchShare> ShareOf(const MicroBatchPlan& plan, uint32_t dp_rank);

}  // namespace peregrine

#endif  // PEREGRINE_CLIENT_MICROBATCH_PLAN_FORMAT_H_
