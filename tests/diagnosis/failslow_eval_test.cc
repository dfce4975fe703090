#include <catch2/catch.hpp>
#include <vector>

#include "diagnosis/failslow_trace.h"

namespace peregrine {
namespace {

TEST_CASE("Generated traces are deterministic and consistently labelled", "[unit]") {
  FailSlowTraceOptions options;
  const LabelledTrace a = GenerateFailSlowTrace(123, options);
  const LabelledTrace b = GenerateFailSlowTrace(123, options);
  const LabelledTrace c = GenerateFailSlowTrace(124, options);
  CHECK(a.iteration_ms == b.iteration_ms);
  CHECK(a.iteration_ms != c.iteration_ms);
  int with_episodes = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const LabelledTrace t = GenerateFailSlowTrace(seed, options);
    REQUIRE(t.iteration_ms.size() == static_cast<size_t>(options.length));
    for (double v : t.iteration_ms) CHECK(v > 0.0);
    int64_t previous_end = 0;
    for (const FailSlowEpisode& e : t.episodes) {
      CHECK(e.start >= previous_end + options.min_gap);
      CHECK(e.end - e.start >= options.min_duration);
      CHECK(e.end <= options.length);
      CHECK(e.severity >= options.min_severity);
      CHECK(e.severity <= options.max_severity);
      CHECK(e.labelled == (e.severity >= options.labelled_severity));
      previous_end = e.end;
    }
    with_episodes += !t.episodes.empty();
  }
  CHECK(with_episodes > 100);
  CHECK(with_episodes < 180);
}

TEST_CASE("ScoreDetections counts hits, misses and false positives by episode", "[unit]") {
  LabelledTrace trace;
  trace.iteration_ms.assign(1000, 1.0);
  trace.episodes = {{FailSlowEpisodeKind::kCompute, 100, 200, 0.5, true, false},
                    {FailSlowEpisodeKind::kCompute, 400, 450, 0.05, false, false},
                    {FailSlowEpisodeKind::kCompute, 600, 700, 0.3, true, false}};
  struct Case {
    std::vector<int64_t> starts;
    int detected;
    int false_positives;
    bool correct;
  };
  const std::vector<Case> cases = {
      {{}, 0, 0, false},
      {{100, 600}, 2, 0, true},
      {{98, 705}, 2, 0, true},        // within the tolerances
      {{97, 600}, 1, 1, false},       // too early
      {{150, 420, 650}, 2, 0, true},  // a sub-threshold episode is neutral
      {{150, 300, 650}, 2, 1, false},
  };
  for (const Case& c : cases) {
    const TraceScore s = ScoreDetections(trace, c.starts);
    CHECK(s.labelled_episodes == 2);
    CHECK(s.detected_episodes == c.detected);
    CHECK(s.false_positives == c.false_positives);
    CHECK(s.correct == c.correct);
    CHECK(s.reports == static_cast<int>(c.starts.size()));
  }
}

TEST_CASE("JobScoreSummary scores jobs as Falcon's Table 4 does", "[unit]") {
  // Table 4, BOCD: 392 jobs, 6 with a fail-slow (all found), 87 of 386 healthy alarmed.
  JobScoreSummary bocd;
  for (int i = 0; i < 6; ++i) bocd.Add(TraceScore{1, 1, 1, 0, true});
  for (int i = 0; i < 87; ++i) bocd.Add(TraceScore{0, 0, 1, 1, false});
  for (int i = 0; i < 386 - 87; ++i) bocd.Add(TraceScore{0, 0, 0, 0, true});
  CHECK(bocd.traces == 392);
  CHECK(bocd.correct == 305);
  CHECK(bocd.accuracy() == Approx(305.0 / 392));
  CHECK(bocd.fpr() == Approx(87.0 / 473));  // FP / (FP + N): the seed's 18.4%
  CHECK(bocd.fnr() == 0.0);
  // A missed episode is a false negative even when the trace also has a false report.
  JobScoreSummary missed;
  missed.Add(TraceScore{2, 1, 2, 1, false});
  missed.Add(TraceScore{1, 1, 1, 0, true});
  CHECK(missed.false_neg == 1);
  CHECK(missed.false_pos == 0);
  CHECK(missed.fnr() == Approx(1.0 / 3));  // FN / (FN + P)
  CHECK(JobScoreSummary{}.accuracy() == 0.0);
}

}  // namespace
}  // namespace peregrine
