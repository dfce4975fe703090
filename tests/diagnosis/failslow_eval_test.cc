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
  trace.episodes = {{FailSlowKind::kCompute, 100, 200, 0.5, true, false},
                    {FailSlowKind::kCompute, 400, 450, 0.05, false, false},
                    {FailSlowKind::kCompute, 600, 700, 0.3, true, false}};
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

TEST_CASE("BOCD with verification beats sliding window and plain BOCD", "[unit]") {
  for (FailSlowKind kind : {FailSlowKind::kCompute, FailSlowKind::kCommunication}) {
    INFO(FailSlowKindName(kind));
    FailSlowTraceOptions options;
    options.kind = kind;
    options.length = 1500;
    DetectorSummary sw, bocd, bocdv;
    for (uint64_t t = 0; t < 60; ++t) {
      const LabelledTrace trace = GenerateFailSlowTrace(9000 + t, options);
      auto a = ReportedStarts(FailSlowDetectorKind::kSlidingWindow, trace.iteration_ms, trace.restarts);
      auto b = ReportedStarts(FailSlowDetectorKind::kBocd, trace.iteration_ms, trace.restarts);
      auto c = ReportedStarts(FailSlowDetectorKind::kBocdVerified, trace.iteration_ms, trace.restarts);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      REQUIRE(c.ok());
      sw.Add(ScoreDetections(trace, *a));
      bocd.Add(ScoreDetections(trace, *b));
      bocdv.Add(ScoreDetections(trace, *c));
    }
    INFO("SlidingWindow " << sw.ToString());
    INFO("BOCD          " << bocd.ToString());
    INFO("BOCD+V        " << bocdv.ToString());
    CHECK(bocdv.accuracy() > sw.accuracy());
    CHECK(bocdv.accuracy() > bocd.accuracy());
    CHECK(bocdv.fpr() < sw.fpr());
    CHECK(bocdv.fpr() < bocd.fpr());
    CHECK(bocdv.accuracy() >= 0.85);
    CHECK(bocdv.fpr() <= 0.05);
    CHECK(bocdv.fnr() <= 0.12);
  }
}

}  // namespace
}  // namespace peregrine
