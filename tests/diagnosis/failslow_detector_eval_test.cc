// The fail-slow detector evaluation (bench/failslow/failslow_eval_main.cc, docs/failslow.md)
// on a smaller generated set: 120 traces of 1,500 iterations per fault kind. The bars are
// the figures measured over seeds 1..20 of `failslow-eval --traces=100 --length=1500`
// minus a margin (BOCD+V accuracy 95..100% measured, bar 90%; FNR at most 7.5% measured,
// bar 12%; FPR 0% measured, bar 3%), so another trace seed does not break them, while a
// detector that loses verification or starts alarming on jitter does.
//
// Metrics as in the seed's Tables 4-5: per trace, accuracy = correct / traces,
// FPR = FP / (FP + N), FNR = FN / (FN + P) (N, P: traces without / with a labelled
// fail-slow; a wrong trace is FN when it misses an episode, FP otherwise).
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "diagnosis/failslow_trace.h"

namespace peregrine {
namespace {

struct Evaluated {
  JobScoreSummary jobs;
  DetectorSummary episodes;
};

Evaluated Evaluate(FailSlowEpisodeKind kind, FailSlowDetectorKind detector,
                   const EvaluatedDetectors& options) {
  FailSlowTraceOptions trace_options;
  trace_options.kind = kind;
  trace_options.length = 1500;
  Evaluated out;
  for (uint64_t t = 0; t < 120; ++t) {
    const LabelledTrace trace = GenerateFailSlowTrace(
        7001 + 2 * t + (kind == FailSlowEpisodeKind::kCompute ? 0 : 1), trace_options);
    absl::StatusOr<std::vector<int64_t>> starts =
        ReportedStarts(detector, trace.iteration_ms, trace.restarts, options);
    REQUIRE(starts.ok());
    const TraceScore score = ScoreDetections(trace, *starts);
    out.jobs.Add(score);
    out.episodes.Add(score);
  }
  return out;
}

TEST_CASE("Evaluation: BOCD+V beats sliding window and classic BOCD for each fault kind",
          "[unit]") {
  EvaluatedDetectors classic;
  classic.bocd.bocd.outlier_probability = 0.0;  // Adams & MacKay, no outlier mixture
  classic.bocd.bocd.min_run_length = 1;
  const EvaluatedDetectors robust;  // Peregrine's defaults (what the agent runs)
  for (FailSlowEpisodeKind kind : {FailSlowEpisodeKind::kCompute, FailSlowEpisodeKind::kCommunication}) {
    INFO(FailSlowEpisodeKindName(kind));
    const Evaluated sw = Evaluate(kind, FailSlowDetectorKind::kSlidingWindow, {});
    const Evaluated bocd = Evaluate(kind, FailSlowDetectorKind::kBocd, classic);
    const Evaluated bocdv = Evaluate(kind, FailSlowDetectorKind::kBocdVerified, classic);
    const Evaluated robust_bocd = Evaluate(kind, FailSlowDetectorKind::kBocd, robust);
    const Evaluated robust_bocdv = Evaluate(kind, FailSlowDetectorKind::kBocdVerified, robust);
    INFO("SlidingWindow " << sw.jobs.ToString() << " | " << sw.episodes.ToString());
    INFO("BOCD          " << bocd.jobs.ToString() << " | " << bocd.episodes.ToString());
    INFO("BOCD+V        " << bocdv.jobs.ToString() << " | " << bocdv.episodes.ToString());
    INFO("BOCD-robust   " << robust_bocd.jobs.ToString() << " | "
                          << robust_bocd.episodes.ToString());
    INFO("BOCD-robust+V " << robust_bocdv.jobs.ToString() << " | "
                          << robust_bocdv.episodes.ToString());
    // The set is a mix: with these seeds 38 (compute) and 60 (communication) of 120 traces
    // hold no labelled fail-slow.
    CHECK(sw.jobs.negative >= 20);
    CHECK(sw.jobs.positive >= 40);

    for (const Evaluated* v : {&bocdv, &robust_bocdv}) {
      CHECK(v->jobs.accuracy() >= 0.90);
      CHECK(v->jobs.fpr() <= 0.03);
      CHECK(v->jobs.fnr() <= 0.12);
      CHECK(v->episodes.fpr() <= 0.02);  // false reports / all reports
      CHECK(v->episodes.fnr() <= 0.08);  // missed / labelled episodes
      CHECK(v->jobs.accuracy() >= sw.jobs.accuracy() + 0.40);
      CHECK(v->jobs.accuracy() >= bocd.jobs.accuracy() + 0.70);
    }
    // Without verification every jitter-level change point is a fail-slow: BOCD finds every
    // labelled episode but alarms on most traces (measured: accuracy <= 5%, FPR >= 69%).
    for (const Evaluated* v : {&bocd, &robust_bocd}) {
      CHECK(v->jobs.fnr() == 0.0);
      CHECK(v->jobs.fpr() >= 0.50);
      CHECK(v->jobs.accuracy() <= 0.15);
    }
    // The sliding window alarms on spikes and warm-ups (measured accuracy 18-41%, FPR >= 60%).
    CHECK(sw.jobs.fpr() >= 0.45);
    CHECK(sw.jobs.accuracy() <= 0.60);
  }
}

}  // namespace
}  // namespace peregrine
