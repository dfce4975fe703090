#include "diagnosis/failslow_trace.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

// The trace model and the scoring rules.
//
// A trace from GenerateFailSlowTrace has:
//  - a base iteration time and per-trace jitter (Gaussian, or uniform with probability 1/2),
//    occasional single-iteration spikes (checkpoint saves, GC: +30% to +100%);
//  - a warm-up of slower iterations decaying to the base level;
//  - fail-slow episodes separated by fault-free stretches: compute (a constant slowdown
//    factor) or communication (a slowdown that fluctuates iteration to iteration, the
//    congestion pattern), severities from min_severity to max_severity (5% to 300%),
//    durations from min_duration to max_duration iterations; an episode may ramp in over
//    a few iterations;
//  - restarts: with restart_probability an episode is ended by a restart (the label's end),
//    followed by a new warm-up and a small level shift of the base time (back to normal).
// Episodes with severity below labelled_severity (10%: GUARD's "monitor only" tier, and
// Falcon's verification threshold) are kept in the trace as sub-threshold degradations but
// are not labelled fail-slows: a detection inside one is neither a hit nor a false positive.
//
// ScoreDetections scores reported fail-slow starts against the labels of one trace:
//  - a labelled episode is detected when some reported start lies in
//    [start - pre_tolerance, end + post_tolerance);
//  - a false positive is a reported start outside every labelled (and sub-threshold)
//    episode's window;
//  - a trace is judged correct when every labelled episode is detected and there is no
//    false positive.
// Summaries aggregate: accuracy = correct traces / traces; FPR = false-positive reports /
// all reports; FNR = missed episodes / labelled episodes.

namespace peregrine {
namespace {

// SplitMix64: tiny, fast, and fully specified, so traces are identical everywhere.
class TraceRandom {
 public:
  explicit TraceRandom(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  double LogUniform(double lo, double hi) {
    return std::exp(Uniform(std::log(lo), std::log(hi)));
  }
  int64_t Int(int64_t lo, int64_t hi) {  // inclusive
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Bernoulli(double p) { return Uniform() < p; }
  double Normal() {
    const double u1 = std::max(Uniform(), 1e-300);
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2);
  }

 private:
  uint64_t state_;
};

void AddWarmup(std::vector<double>& mult, int64_t from, int64_t length, double amplitude) {
  for (int64_t i = 0; i < length && from + i < static_cast<int64_t>(mult.size()); ++i) {
    const double left = 1.0 - static_cast<double>(i) / static_cast<double>(length);
    mult[static_cast<size_t>(from + i)] *= 1.0 + amplitude * left * left;
  }
}

}  // namespace

const char* FailSlowEpisodeKindName(FailSlowEpisodeKind kind) {
  return kind == FailSlowEpisodeKind::kCompute ? "compute" : "communication";
}

LabelledTrace GenerateFailSlowTrace(uint64_t seed, const FailSlowTraceOptions& o) {
  TraceRandom rng(seed ^ 0x5deece66dULL);
  LabelledTrace trace;
  trace.seed = seed;
  const int64_t n = std::max(o.length, 1);
  std::vector<double> level(static_cast<size_t>(n), 1.0);  // base-level multiplier
  std::vector<double> mult(static_cast<size_t>(n), 1.0);   // fault and warm-up multiplier
  const double base = rng.LogUniform(o.min_base_ms, o.max_base_ms);
  const double jitter = rng.Uniform(o.min_jitter, o.max_jitter);
  const bool uniform_noise = rng.Bernoulli(0.5);

  const int64_t warmup = rng.Int(0, std::max(o.max_warmup, 0));
  AddWarmup(mult, 0, warmup, rng.Uniform(0.3, 2.0));

  auto restart_at = [&](int64_t at) {
    trace.restarts.push_back(at);
    AddWarmup(mult, at, rng.Int(3, 10), rng.Uniform(0.2, 1.0));
    const double shift = rng.Uniform(0.97, 1.03);
    for (int64_t i = at; i < n; ++i) level[static_cast<size_t>(i)] *= shift;
  };

  int64_t cursor = warmup + o.min_gap + rng.Int(0, 200);
  if (!rng.Bernoulli(o.fault_free_probability)) {
    const int64_t episodes = rng.Int(1, std::max(o.max_episodes, 1));
    for (int64_t e = 0; e < episodes; ++e) {
      const int64_t duration = rng.Int(o.min_duration, std::max(o.min_duration, o.max_duration));
      if (cursor + duration + o.min_gap > n) break;
      FailSlowEpisode ep;
      ep.kind = o.kind;
      ep.start = cursor;
      ep.end = cursor + duration;
      ep.severity = rng.LogUniform(o.min_severity, o.max_severity);
      ep.labelled = ep.severity >= o.labelled_severity;
      const int64_t ramp = rng.Bernoulli(0.3) ? rng.Int(2, 10) : 0;
      for (int64_t i = ep.start; i < ep.end; ++i) {
        double s = ep.severity;
        if (o.kind == FailSlowEpisodeKind::kCommunication) s *= rng.Uniform(0.6, 1.4);
        if (i - ep.start < ramp) {
          s *= static_cast<double>(i - ep.start + 1) / static_cast<double>(ramp + 1);
        }
        mult[static_cast<size_t>(i)] *= 1.0 + s;
      }
      if (rng.Bernoulli(o.restart_probability)) {
        ep.ended_by_restart = true;
        restart_at(ep.end);
      }
      trace.episodes.push_back(ep);
      cursor = ep.end + o.min_gap + rng.Int(0, 300);
    }
  }
  // A restart that is not caused by a fail-slow (preemption, crash elsewhere).
  if (rng.Bernoulli(o.restart_probability)) {
    const int64_t at = rng.Int(std::min<int64_t>(n - 1, warmup + 1), n - 1);
    bool inside = false;
    for (const FailSlowEpisode& ep : trace.episodes) {
      inside = inside || (at >= ep.start - o.min_gap / 2 && at < ep.end + o.min_gap / 2);
    }
    if (!inside) restart_at(at);
  }
  std::sort(trace.restarts.begin(), trace.restarts.end());

  trace.iteration_ms.resize(static_cast<size_t>(n));
  const double half_width = jitter * std::sqrt(3.0);
  for (int64_t i = 0; i < n; ++i) {
    double noise = uniform_noise ? 1.0 + rng.Uniform(-half_width, half_width)
                                 : 1.0 + jitter * rng.Normal();
    noise = std::max(noise, 0.5);
    double spike = rng.Bernoulli(o.spike_probability) ? rng.Uniform(1.3, 2.0) : 1.0;
    trace.iteration_ms[static_cast<size_t>(i)] =
        base * level[static_cast<size_t>(i)] * mult[static_cast<size_t>(i)] * noise * spike;
  }
  return trace;
}

TraceScore ScoreDetections(const LabelledTrace& trace, absl::Span<const int64_t> starts,
                           const EpisodeScoreOptions& options) {
  TraceScore score;
  std::vector<char> detected(trace.episodes.size(), 0);
  for (const FailSlowEpisode& ep : trace.episodes) score.labelled_episodes += ep.labelled;
  for (int64_t s : starts) {
    ++score.reports;
    bool in_window = false;
    for (size_t e = 0; e < trace.episodes.size(); ++e) {
      const FailSlowEpisode& ep = trace.episodes[e];
      if (s >= ep.start - options.pre_tolerance && s < ep.end + options.post_tolerance) {
        in_window = true;
        if (ep.labelled) detected[e] = 1;
      }
    }
    if (!in_window) ++score.false_positives;
  }
  for (size_t e = 0; e < trace.episodes.size(); ++e) {
    score.detected_episodes += trace.episodes[e].labelled && detected[e];
  }
  score.correct =
      score.false_positives == 0 && score.detected_episodes == score.labelled_episodes;
  return score;
}

void JobScoreSummary::Add(const TraceScore& s) {
  ++traces;
  correct += s.correct;
  (s.labelled_episodes > 0 ? positive : negative)++;
  if (s.correct) return;
  (s.detected_episodes < s.labelled_episodes ? false_neg : false_pos)++;
}

double JobScoreSummary::accuracy() const { return traces == 0 ? 0.0 : static_cast<double>(correct) / traces; }

double JobScoreSummary::fpr() const {
  return false_pos == 0 ? 0.0 : static_cast<double>(false_pos) / (false_pos + negative);
}

double JobScoreSummary::fnr() const {
  return false_neg == 0 ? 0.0 : static_cast<double>(false_neg) / (false_neg + positive);
}

std::string JobScoreSummary::ToString() const {
  return absl::StrCat("correct ", correct, "/", traces, " FP ", false_pos, " (N ", negative, ") FN ", false_neg,
                      " (P ", positive, ")");
}

void DetectorSummary::Add(const TraceScore& s) {
  ++traces;
  correct_traces += s.correct;
  labelled_episodes += s.labelled_episodes;
  detected_episodes += s.detected_episodes;
  reports += s.reports;
  false_positives += s.false_positives;
}

double DetectorSummary::accuracy() const {
  return traces == 0 ? 0.0 : static_cast<double>(correct_traces) / traces;
}
double DetectorSummary::fpr() const {
  return reports == 0 ? 0.0 : static_cast<double>(false_positives) / reports;
}
double DetectorSummary::fnr() const {
  return labelled_episodes == 0
             ? 0.0
             : static_cast<double>(labelled_episodes - detected_episodes) / labelled_episodes;
}

std::string DetectorSummary::ToString() const {
  return absl::StrFormat("accuracy %5.1f%% (%d/%d)  FPR %5.1f%% (%d/%d)  FNR %5.1f%% (%d/%d)",
                         100.0 * accuracy(), correct_traces, traces, 100.0 * fpr(),
                         false_positives, reports, 100.0 * fnr(),
                         labelled_episodes - detected_episodes, labelled_episodes);
}

const char* FailSlowDetectorKindName(FailSlowDetectorKind kind) {
  switch (kind) {
    case FailSlowDetectorKind::kSlidingWindow:
      return "SlidingWindow";
    case FailSlowDetectorKind::kBocd:
      return "BOCD";
    case FailSlowDetectorKind::kBocdVerified:
      return "BOCD+V";
  }
  return "unknown";
}

namespace {

absl::StatusOr<std::vector<int64_t>> SegmentStarts(FailSlowDetectorKind kind,
                                                   absl::Span<const double> samples,
                                                   const EvaluatedDetectors& options) {
  std::vector<int64_t> starts;
  switch (kind) {
    case FailSlowDetectorKind::kSlidingWindow: {
      absl::StatusOr<std::vector<SlidingWindowEvent>> events =
          DetectSlidingWindow(samples, options.sliding_window);
      if (!events.ok()) return events.status();
      for (const SlidingWindowEvent& e : *events) starts.push_back(e.index);
      break;
    }
    case FailSlowDetectorKind::kBocd: {
      absl::StatusOr<std::vector<ChangePointCandidate>> cps =
          DetectChangePoints(samples, options.bocd.bocd);
      if (!cps.ok()) return cps.status();
      for (const ChangePointCandidate& c : *cps) starts.push_back(c.index);
      break;
    }
    case FailSlowDetectorKind::kBocdVerified: {
      absl::StatusOr<std::vector<FailSlowEvent>> events = DetectFailSlows(samples, options.bocd);
      if (!events.ok()) return events.status();
      for (const FailSlowEvent& e : *events) {
        if (e.kind == FailSlowEventKind::kSlowdownStart) starts.push_back(e.index);
      }
      break;
    }
  }
  return starts;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ReportedStarts(FailSlowDetectorKind kind,
                                                    absl::Span<const double> samples,
                                                    absl::Span<const int64_t> restarts,
                                                    const EvaluatedDetectors& options) {
  std::vector<int64_t> cuts = {0};
  for (int64_t r : restarts) {
    if (r > cuts.back() && r < static_cast<int64_t>(samples.size())) cuts.push_back(r);
  }
  cuts.push_back(static_cast<int64_t>(samples.size()));
  std::vector<int64_t> starts;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    absl::StatusOr<std::vector<int64_t>> segment = SegmentStarts(
        kind, samples.subspan(static_cast<size_t>(cuts[i]), static_cast<size_t>(cuts[i + 1] - cuts[i])),
        options);
    if (!segment.ok()) return segment.status();
    for (int64_t s : *segment) starts.push_back(cuts[i] + s);
  }
  return starts;
}

}  // namespace peregrine
