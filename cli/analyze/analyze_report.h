// Report builders for `peregrinectl analyze`: plain structs computed from the parsed inputs
// (step_times.h, nccl_trace.h, stack_files.h) with the diagnosis/ algorithms. Nothing here
// prints; analyze_command.h renders the reports as text or JSON.
//
//  - steps: per worker, summary statistics; then the peer comparison (AnalyzePeerStragglers,
//    diagnosis/peer_stragglers.h): each step is normalised by the median and robust spread
//    of the workers that logged it, so a change every worker shares is one job-wide change
//    (change points of the per-step median), each worker's change points and slowdown
//    episodes are relative to its peers (FailSlowDetector on its ratio to the step median),
//    and a worker is persistently slow when its median z-score exceeds persistent_z and its
//    median excess exceeds min_relative_excess. Steps logged by fewer than 3 workers are not
//    compared; a worker with no compared step gets change points on its own times.
//  - nccl: per stream, the iteration period in calls (IterationTracker / DetectPeriod,
//    diagnosis/iteration_period.h), one period's call pattern, iteration times (from
//    ProfilerStep#N annotations when present, else from call timestamps one period
//    apart), their statistics and change points.
//  - stacks: AggregateStacks (diagnosis/stack_aggregation.h) over the per-rank files.
//
// Pure computation: no I/O, no clocks. Thread-compatible values.
#ifndef PEREGRINE_CLI_ANALYZE_ANALYZE_REPORT_H_
#define PEREGRINE_CLI_ANALYZE_ANALYZE_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cli/analyze/nccl_trace.h"
#include "cli/analyze/stack_files.h"
#include "cli/analyze/step_times.h"
#include "diagnosis/change_point.h"
#include "diagnosis/parallel_layout.h"
#include "diagnosis/peer_stragglers.h"
#include "diagnosis/stack_aggregation.h"

namespace peregrine {

struct SummaryStats {
  int64_t count = 0;
  double mean = 0, median = 0, stddev = 0, min = 0, max = 0;
  double p5 = 0, p95 = 0;  // linear interpolation between order statistics
};
// Statistics of `values` (all zero when empty).
SummaryStats Summarize(absl::Span<const double> values);

struct ChangeOptions {
  double verify_threshold = 0.10;  // --verify: relative mean/median change to accept
  double report_threshold = 0.90;  // --prob: BOCD posterior needed to report a change
};

// A verified change in the input's step numbering, slowdown episodes, and the number of
// BOCD reports that failed verification (diagnosis/peer_stragglers.h).
using StepChange = PeerChange;
using SlowdownEpisode = PeerEpisode;
using ChangeAnalysis = SeriesChanges;

// Runs a FailSlowDetector over `times` (steps[i] numbers times[i]). Fails with
// kInvalidArgument for options out of range or spans of different lengths.
absl::StatusOr<ChangeAnalysis> AnalyzeChanges(absl::Span<const int64_t> steps,
                                              absl::Span<const double> times,
                                              const ChangeOptions& options);

// ------------------------------------------------------------------- steps

struct StepsOptions {
  ChangeOptions change;
  // The persistent-straggler rule (PeerStragglerOptions): --straggler-z, --straggler-excess.
  double persistent_z = 3.0;
  double min_relative_excess = 0.05;
};

struct WorkerAnalysis {
  std::string worker;
  int64_t first_step = 0, last_step = 0;
  SummaryStats stats;
  // Compared with the peers at steps_compared steps: the median of its time / step median
  // and of its z-scores. Without a compared step: median / median of the workers' medians,
  // and peer_z 0.
  int64_t steps_compared = 0;
  double ratio_to_peers = 1.0;
  double peer_z = 0;
  bool persistently_slow = false;
  // Relative to the peers (the ratio series) when steps_compared > 0, else on its own times.
  bool changes_relative_to_peers = false;
  ChangeAnalysis change;
};

struct StepsReport {
  StepTableFormat format = StepTableFormat::kLong;
  std::string unit;
  // The rule used.
  int min_workers = 3;
  double persistent_z = 3.0;
  double min_relative_excess = 0.05;
  double min_relative_scale = 0.01;
  int64_t steps_total = 0;     // distinct steps in the table
  int64_t steps_compared = 0;  // of them, logged by at least min_workers workers
  double median_of_medians = 0;
  ChangeAnalysis job_wide;     // changes of the per-step median: shared by the workers
  std::vector<WorkerAnalysis> workers;
  std::vector<std::string> persistently_slow;  // worker names, in table order
  std::vector<std::string> with_slowdowns;     // workers with at least one episode (relative to peers)
  std::vector<std::string> notes;
};

absl::StatusOr<StepsReport> AnalyzeStepTimes(const StepTimesTable& table, const StepsOptions& options);

// ------------------------------------------------------------------- nccl

struct NcclStreamAnalysis {
  std::string label;
  int rank = -1;
  int64_t calls = 0;
  int64_t distinct_signatures = 0;
  int period = 0;  // calls per iteration; 0 when no period was found
  double period_acf = 0;
  int pattern_changes = 0;           // re-detections after the first (restarts, reconfiguration)
  std::vector<std::string> pattern;  // one period's calls, "AllReduce comm=0x.. count=.. dtype=.."
  std::string iteration_source;      // "ProfilerStep annotations", "NCCL call timestamps", "none"
  std::vector<int64_t> iteration_steps;
  std::vector<double> iteration_ms;
  double calls_per_profiler_step = 0;  // median NCCL calls inside a ProfilerStep span
  SummaryStats stats;                  // of iteration_ms
  ChangeAnalysis change;
  std::vector<std::string> notes;
};

struct NcclReport {
  NcclTraceFormat format = NcclTraceFormat::kPeregrineJsonl;
  std::vector<NcclStreamAnalysis> streams;
  std::vector<std::string> notes;
};

// With `rank`, only the stream of that rank (streams of unknown rank are numbered 0, 1, ...
// in order when no stream knows its rank); kNotFound naming the ranks present otherwise.
absl::StatusOr<NcclReport> AnalyzeNcclTrace(const NcclTrace& trace, std::optional<int> rank,
                                            const ChangeOptions& options);

// ------------------------------------------------------------------- stacks

struct StackFileSummary {
  std::string path;
  int rank = 0;
  std::string rank_rule;
  std::string tool;
  int processes = 0;
  int threads = 0;
};

struct StacksReport {
  std::string layout;  // ParallelLayout::DebugString
  int world_size = 0;
  std::vector<StackFileSummary> files;
  std::vector<int> missing_ranks;  // ranks without a file (they count as "no stack captured")
  StackAggregation aggregation;
  std::vector<std::vector<int>> machines_of_groups;  // per aggregation group, its machines
};

// Fails with kInvalidArgument naming the file when a rank is outside the layout.
absl::StatusOr<StacksReport> AnalyzeStacks(const ParallelLayout& layout,
                                           const std::vector<RankStackFile>& files,
                                           const StackAggregationOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_ANALYZE_REPORT_H_
