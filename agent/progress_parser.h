// Training progress parsed from the training processes' output.
//
// A training process reports a completed iteration with a line
//   [peregrine] step=<n> loss=<x> grad_norm=<g> iter_ms=<t> mb=<m>
// Any text may precede "[peregrine]" (timestamps, logger prefixes). step is
// required (a non-negative integer); the other keys are optional and may come in
// any order; unknown keys are ignored; a malformed optional value is treated as
// missing. loss/grad_norm may be "nan" or "inf" (that is exactly what the
// controller wants to see). mb is the number of micro-batches the rank ran in that step
// (a positive integer), printed by trainers that take their share of the step from
// pg_microbatches: its presence tells that the trainer follows micro-batch plans. A
// trainer's closing line
//   [peregrine] final step=<n> weight_digest=<hex>
// is progress too (step <n> completed; the word "final" and the digest are ignored).
//
// RankProgress accumulates parsed records of one rank into what a heartbeat
// carries (IterationSummary): the last values plus the mean iteration time and
// step count over the window since the previous TakeWindow(). The mean uses
// iter_ms when every record in the window has it, otherwise the observed time
// between consecutive step lines divided by the steps they advanced. A record of the
// step already observed last (the final line after the step's own line) updates the
// last values but is no new iteration: the window's count and timing ignore it.
//
// Pure: no clocks (the observation time is passed in), no I/O.
// Thread safety: none (one owner). Ownership: plain values.
#ifndef PEREGRINE_AGENT_PROGRESS_PARSER_H_
#define PEREGRINE_AGENT_PROGRESS_PARSER_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/time/time.h"

namespace peregrine {

struct ProgressRecord {
  uint64_t step = 0;
  std::optional<double> loss;
  std::optional<double> grad_norm;
  std::optional<double> iter_ms;
  std::optional<uint32_t> micro_batches;  // mb
};

// Returns the record on a progress line, nullopt for any other line (including
// a "[peregrine]" line without a valid step).
std::optional<ProgressRecord> ParseProgressLine(std::string_view line);

struct ProgressWindow {
  bool has_progress = false;  // at least one record ever observed
  uint64_t last_completed_step = 0;
  double last_loss = 0;
  double last_grad_norm = 0;
  double mean_iteration_seconds = 0;  // 0 when the window holds no timing
  uint32_t steps_in_window = 0;
  absl::Time last_step_time = absl::InfinitePast();
  uint32_t last_micro_batches = 0;  // the latest mb= of a step (0: never reported)
};

class RankProgress {
 public:
  void Observe(const ProgressRecord& record, absl::Time now);
  // The summary since the previous call; starts a new window.
  ProgressWindow TakeWindow();
  // The latest values without closing the window.
  const ProgressWindow& Current() const { return current_; }

 private:
  ProgressWindow current_;
  // Window accumulators.
  double reported_seconds_sum_ = 0;
  uint32_t reported_count_ = 0;
  bool all_reported_ = true;
  double observed_seconds_sum_ = 0;
  uint64_t observed_steps_ = 0;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_PROGRESS_PARSER_H_
