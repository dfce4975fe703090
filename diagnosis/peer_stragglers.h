// Stragglers relative to their peers, from per-worker step (iteration) times.
//
// A straggler is a worker that is slow relative to the other workers at the same steps; a
// change that every worker shares (a slower data shard, a checkpoint, a shared storage or
// network slowdown) is one job-wide change, not N slowdowns. AnalyzePeerStragglers:
//  - normalises each step across the workers that logged it: the step's median and its
//    robust spread (1.4826 x MAD, floored at min_relative_scale x median), giving each
//    worker's ratio (time / median) and robust z-score per step;
//  - runs the change-point detector (diagnosis/change_point.h, FailSlowDetector) on the
//    per-step median series (job-wide changes) and on each worker's ratio series (that
//    worker's changes relative to its peers: onsets, ends and episodes);
//  - flags a worker as persistently slow when its median z over the steps compared exceeds
//    persistent_z AND its median relative excess exceeds min_relative_excess.
// PeerSpread and IsPersistentStraggler are the same rule on one cross-section (one value per
// worker), for callers that hold no per-step history (the controller).
// The rule, its defaults and why are described in peer_stragglers.cc.
//
// Pure computation: no I/O, no clocks; O(workers x steps) time and memory. Errors:
// kInvalidArgument naming the option or the worker (steps not strictly increasing, steps and
// times of different lengths, a negative or infinite time); a NaN time is a missing cell.
// Thread-compatible values.
#ifndef PEREGRINE_DIAGNOSIS_PEER_STRAGGLERS_H_
#define PEREGRINE_DIAGNOSIS_PEER_STRAGGLERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "diagnosis/change_point.h"

namespace peregrine {

struct PeerStragglerOptions {
  // A step is normalised only when at least this many workers logged it (a median and a
  // spread of two values cannot tell which one is slow).
  int min_workers = 3;
  // Floor of a step's robust standard deviation, relative to its median: timers and
  // synchronous training make the workers' times equal to the last digit, which would make
  // any difference "infinitely" far out.
  double min_relative_scale = 0.01;
  // Persistently slow: median z > persistent_z AND median (time / step median - 1) >
  // min_relative_excess, over at least min_steps normalised steps.
  double persistent_z = 3.0;
  double min_relative_excess = 0.05;
  int min_steps = 8;
  // Change points on the job-wide median series and on each worker's ratio series.
  FailSlowDetectorOptions detector;
};

// One worker's series: steps[i] numbers times[i]; steps strictly increasing.
struct PeerWorkerSeries {
  std::string worker;
  absl::Span<const int64_t> steps;
  absl::Span<const double> times;
};

// A verified change, in the input's step numbering (FailSlowEvent with steps).
struct PeerChange {
  FailSlowEventKind kind = FailSlowEventKind::kSlowdownStart;
  int64_t step = 0;            // first step at the new level
  int64_t confirmed_step = 0;  // step at which it was verified
  double posterior = 0;
  double mean_before = 0, mean_after = 0;
  double relative_change = 0;  // mean_after / mean_before - 1
  double severity = 0;         // FailSlowEvent::severity
};

// A slowdown from its onset to its end (absent while it lasts to the last step).
struct PeerEpisode {
  int64_t onset_step = 0;
  std::optional<int64_t> end_step;
  double severity = 0;  // the worst level during it relative to the level before it, minus 1
};

struct SeriesChanges {
  std::vector<PeerChange> changes;
  std::vector<PeerEpisode> episodes;
  int64_t rejected_change_points = 0;
};

// Runs a fresh FailSlowDetector over `values` (non-finite values are skipped) and maps its
// events to `steps`. kInvalidArgument for spans of different lengths or bad options.
absl::StatusOr<SeriesChanges> DetectSeriesChanges(absl::Span<const int64_t> steps,
                                                  absl::Span<const double> values,
                                                  const FailSlowDetectorOptions& options);

// The robust centre and spread of one cross-section (NaN entries are missing).
struct PeerSpread {
  int workers = 0;      // finite values
  double median = 0;
  double scale = 0;     // max(1.4826 x MAD, min_relative_scale x |median|)
};
PeerSpread SpreadOf(absl::Span<const double> values, double min_relative_scale);

// The peer rule on summary figures: z > persistent_z and excess > min_relative_excess.
bool IsPersistentStraggler(double median_z, double median_excess, const PeerStragglerOptions& options);

struct WorkerPeerVerdict {
  std::string worker;
  int64_t steps_compared = 0;   // steps of this worker that were normalised
  double median_ratio = 0;      // median over those steps of time / step median (NaN: none)
  double median_z = 0;          // median of (time - step median) / step scale
  double median_excess = 0;     // median_ratio - 1
  bool persistently_slow = false;
  std::vector<int64_t> steps;   // the normalised steps ...
  std::vector<double> ratios;   // ... and the worker's ratio at each
  SeriesChanges changes;        // on the ratio series: changes relative to the peers
};

struct PeerStragglerReport {
  std::vector<int64_t> steps;          // steps normalised (at least min_workers logged them)
  std::vector<double> step_median;     // their medians: the job-wide series
  std::vector<double> step_scale;      // their robust standard deviations
  SeriesChanges job_wide;              // changes of the job-wide series (shared by the workers)
  std::vector<WorkerPeerVerdict> workers;  // input order
  std::vector<std::string> persistently_slow;  // names, input order
  std::vector<std::string> stragglers;         // names with an episode relative to the peers
  int64_t steps_total = 0;             // distinct steps in the input
  int64_t steps_too_few_workers = 0;   // of them, logged by fewer than min_workers workers
};

absl::StatusOr<PeerStragglerReport> AnalyzePeerStragglers(absl::Span<const PeerWorkerSeries> workers,
                                                          const PeerStragglerOptions& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_PEER_STRAGGLERS_H_
