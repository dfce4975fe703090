// Labelled iteration-time traces and an episode-level scorer, to evaluate fail-slow
// detectors the way Falcon's Tables 4-5 do (sliding window vs BOCD vs BOCD+verification).
//
// GenerateFailSlowTrace(seed, options) is deterministic in (seed, options) on every
// platform (own SplitMix64 generator, no <random> distributions) and returns a trace with
// its labelled fail-slow episodes and restarts. ScoreDetections scores a detector's
// reported starts against one trace's labels: a labelled episode is detected when a start
// lies within its window (with tolerances); a start outside every episode is a false
// positive. ReportedStarts runs a detector over a trace and fails only on invalid options.
// The trace model and the scoring rules are described in failslow_trace.cc.
//
// Pure computation; thread-safe.
#ifndef PEREGRINE_DIAGNOSIS_FAILSLOW_TRACE_H_
#define PEREGRINE_DIAGNOSIS_FAILSLOW_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "diagnosis/change_point.h"
#include "diagnosis/sliding_window.h"

namespace peregrine {

// What slows an episode of a synthetic trace (not the controller's finding kind).
enum class FailSlowEpisodeKind { kCompute, kCommunication };
const char* FailSlowEpisodeKindName(FailSlowEpisodeKind kind);

struct FailSlowEpisode {
  FailSlowEpisodeKind kind = FailSlowEpisodeKind::kCompute;
  int64_t start = 0;  // first slow iteration
  int64_t end = 0;    // first iteration after the episode (exclusive)
  double severity = 0.0;  // mean slowdown: 0.5 means 1.5x the healthy time
  bool labelled = true;   // severity >= labelled_severity
  bool ended_by_restart = false;
};

struct FailSlowTraceOptions {
  int length = 2000;
  // Which kind of episodes the trace contains (one kind per trace, like Tables 4 and 5).
  FailSlowEpisodeKind kind = FailSlowEpisodeKind::kCompute;
  double fault_free_probability = 0.3;  // the whole trace has no episode
  int max_episodes = 3;
  double min_severity = 0.05;
  double max_severity = 3.0;
  int min_duration = 30;
  int max_duration = 400;
  int min_gap = 80;  // healthy iterations between episodes
  double labelled_severity = 0.10;
  double min_base_ms = 50.0;
  double max_base_ms = 2000.0;
  double min_jitter = 0.005;  // relative standard deviation (Gaussian) or half-width/sqrt(3)
  double max_jitter = 0.03;
  double spike_probability = 0.001;
  int max_warmup = 30;
  double restart_probability = 0.2;
};

struct LabelledTrace {
  uint64_t seed = 0;
  std::vector<double> iteration_ms;
  std::vector<FailSlowEpisode> episodes;  // in time order
  std::vector<int64_t> restarts;          // iteration indices where training restarted
};

LabelledTrace GenerateFailSlowTrace(uint64_t seed, const FailSlowTraceOptions& options = {});

struct EpisodeScoreOptions {
  int64_t pre_tolerance = 2;
  int64_t post_tolerance = 10;
};

struct TraceScore {
  int labelled_episodes = 0;
  int detected_episodes = 0;
  int reports = 0;
  int false_positives = 0;
  bool correct = false;
};

// `starts`: indices where the detector reported the start of a fail-slow, any order.
TraceScore ScoreDetections(const LabelledTrace& trace, absl::Span<const int64_t> starts,
                           const EpisodeScoreOptions& options = {});

struct DetectorSummary {
  int traces = 0;
  int correct_traces = 0;
  int labelled_episodes = 0;
  int detected_episodes = 0;
  int reports = 0;
  int false_positives = 0;

  void Add(const TraceScore& s);
  double accuracy() const;  // correct_traces / traces
  double fpr() const;       // false_positives / reports (0 without reports)
  double fnr() const;       // missed / labelled episodes (0 without episodes)
  // "accuracy 99.5% (995/1000)  FPR 0.0% (0/812)  FNR 1.2% (9/750)"
  std::string ToString() const;
};

// Per-job (per-trace) counts the way Falcon's Tables 4-5 score detectors: a trace is
// positive when it holds a labelled fail-slow; a wrong trace is a false negative when it
// missed an episode, else a false positive; FPR = FP / (FP + N), FNR = FN / (FN + P) (every
// cell of the seed's tables fits these, e.g. Table 4's 87/473 = 87/(87 + 386)).
struct JobScoreSummary {
  int traces = 0, correct = 0, positive = 0, negative = 0, false_pos = 0, false_neg = 0;

  void Add(const TraceScore& s);
  double accuracy() const;  // correct / traces (0 without traces)
  double fpr() const;       // false_pos / (false_pos + negative) (0 without false positives)
  double fnr() const;       // false_neg / (false_neg + positive) (0 without false negatives)
  // "correct 987/1000 FP 0 (N 363) FN 13 (P 637)"
  std::string ToString() const;
};

// The detectors compared in Falcon's Tables 4-5, as functions from a trace to the indices
// where they report the start of a fail-slow:
//  - kSlidingWindow: SlidingWindowDetector start events;
//  - kBocd: every BOCD change point (BOCD without verification reports a fail-slow at
//    each change point, whatever its direction);
//  - kBocdVerified: FailSlowDetector kSlowdownStart events (BOCD + verification).
// A restart begins a new incarnation of the job: every detector is started afresh at each
// index in `restarts` (as the agent does when the training processes restart), so the
// post-restart warm-up is judged against the new incarnation only.
enum class FailSlowDetectorKind { kSlidingWindow, kBocd, kBocdVerified };
const char* FailSlowDetectorKindName(FailSlowDetectorKind kind);

struct EvaluatedDetectors {
  SlidingWindowOptions sliding_window;
  FailSlowDetectorOptions bocd;  // .bocd also configures kBocd
};

// Fails only when the options are invalid.
absl::StatusOr<std::vector<int64_t>> ReportedStarts(FailSlowDetectorKind kind,
                                                    absl::Span<const double> samples,
                                                    absl::Span<const int64_t> restarts,
                                                    const EvaluatedDetectors& options = {});

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_FAILSLOW_TRACE_H_
