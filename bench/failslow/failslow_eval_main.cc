// failslow-eval: scores fail-slow detectors on generated labelled iteration-time traces,
// one table per fault kind, in the form of Falcon's Tables 4 (compute) and 5
// (communication), with the seed's figures printed beside ours and the difference.
//
// Detectors (rows):
//  - SlidingWindow: a sample > 10% above the median of the previous 20 (the seed's baseline);
//  - BOCD: classic Adams & MacKay BOCD (outlier probability 0, min run length 1), every
//    change point reported as a fail-slow (the seed's "classical BOCD");
//  - BOCD+V: classic BOCD + Falcon's verification (mean before/after differ >= 10%);
//  - BOCD-robust: Peregrine's BOCD (1% outlier mixture, min run length 3) without
//    verification;
//  - BOCD-robust+V: Peregrine's detector (FailSlowDetector with its defaults), what the
//    agent runs.
//
// Metrics, per trace (the seed's unit is a job; here a trace is a job):
//  - a trace is positive (P) when it holds a labelled fail-slow (>= 10%), negative (N)
//    otherwise; it is judged correct when every labelled episode is detected and nothing is
//    reported outside every episode (failslow_trace.h ScoreDetections);
//  - a wrong trace is a false negative (FN) when it misses a labelled episode, otherwise a
//    false positive (FP);
//  - accuracy = correct / traces; FPR = FP / (FP + N); FNR = FN / (FN + P). These are the
//    formulas the seed's counts follow: every denominator in Tables 4-5 is the wrong-job
//    count plus the constant healthy (386, 64) or fail-slow (6, 43) job count.
// Episode-level figures (false reports / all reports, missed / labelled episodes) follow
// each table.
//
//   failslow-eval [--traces=N] [--length=L] [--seed=S] [--fault-free=P]
// --fault-free: probability that a trace has no fail-slow episode at all (default 0.3);
// 0.985 gives Table 4's mix (386 of 392 jobs healthy), 0.6 roughly Table 5's (64 of 107).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "diagnosis/failslow_trace.h"

namespace {

using peregrine::DetectorSummary;
using peregrine::EvaluatedDetectors;
using peregrine::FailSlowDetectorKind;
using peregrine::FailSlowEpisodeKind;
using peregrine::TraceScore;
using peregrine::JobScoreSummary;

struct Flags {
  int traces = 1000;
  int length = 2000;
  uint64_t seed = 1;
  double fault_free = -1.0;  // < 0: the generator's default
};

bool ParseFlags(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t len = std::strlen(name);
      return arg.compare(0, len, name) == 0 ? arg.c_str() + len : nullptr;
    };
    if (const char* v = value("--traces=")) {
      flags.traces = std::atoi(v);
    } else if (const char* v = value("--length=")) {
      flags.length = std::atoi(v);
    } else if (const char* v = value("--seed=")) {
      flags.seed = std::strtoull(v, nullptr, 10);
    } else if (const char* v = value("--fault-free=")) {
      flags.fault_free = std::atof(v);
    } else {
      std::fprintf(stderr,
                   "unknown flag %s\nusage: failslow-eval [--traces=N] [--length=L] [--seed=S] [--fault-free=P]\n",
                   arg.c_str());
      return false;
    }
  }
  if (flags.traces < 1 || flags.length < 100) {
    std::fprintf(stderr, "--traces must be >= 1 and --length >= 100\n");
    return false;
  }
  if (flags.fault_free > 1.0) {
    std::fprintf(stderr, "--fault-free is a probability in [0, 1]\n");
    return false;
  }
  return true;
}

// One of the seed's figures: numerator / denominator as printed in Table 4 or 5.
struct Fraction {
  int num = 0;
  int den = 0;
  double percent() const { return den == 0 ? 0.0 : 100.0 * num / den; }
};

struct SeedRow {
  const char* name;
  Fraction accuracy, fpr, fnr;
};

// Falcon (USENIX ATC 2025), Table 4 (compute) and Table 5 (communication), verbatim.
constexpr SeedRow kSeedTable4[] = {
    {"SlideWindow", {390, 392}, {0, 386}, {2, 8}},
    {"BOCD", {305, 392}, {87, 473}, {0, 6}},
    {"BOCD+V", {392, 392}, {0, 386}, {0, 6}},
};
constexpr SeedRow kSeedTable5[] = {
    {"SlideWindow", {100, 107}, {1, 65}, {6, 49}},
    {"BOCD", {74, 107}, {33, 97}, {0, 43}},
    {"BOCD+V", {106, 107}, {0, 64}, {1, 44}},
};

// Fractions of one detector's per-job counts, for printing with numerator and denominator.
Fraction Accuracy(const JobScoreSummary& j) { return {j.correct, j.traces}; }
Fraction Fpr(const JobScoreSummary& j) { return {j.false_pos, j.false_pos + j.negative}; }
Fraction Fnr(const JobScoreSummary& j) { return {j.false_neg, j.false_neg + j.positive}; }

struct Row {
  const char* name;
  FailSlowDetectorKind kind;
  EvaluatedDetectors options;
  int seed_row;  // index into the seed's table
};

std::vector<Row> Rows() {
  EvaluatedDetectors classic;
  classic.bocd.bocd.outlier_probability = 0.0;
  classic.bocd.bocd.min_run_length = 1;
  return {
      {"SlidingWindow", FailSlowDetectorKind::kSlidingWindow, {}, 0},
      {"BOCD", FailSlowDetectorKind::kBocd, classic, 1},
      {"BOCD+V", FailSlowDetectorKind::kBocdVerified, classic, 2},
      {"BOCD-robust", FailSlowDetectorKind::kBocd, {}, 1},
      {"BOCD-robust+V", FailSlowDetectorKind::kBocdVerified, {}, 2},
  };
}

std::string Cell(const Fraction& f) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%5.1f (%d/%d)", f.percent(), f.num, f.den);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace peregrine;
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) return 2;
  const std::vector<Row> rows = Rows();
  for (FailSlowEpisodeKind kind : {FailSlowEpisodeKind::kCompute, FailSlowEpisodeKind::kCommunication}) {
    FailSlowTraceOptions options;
    options.kind = kind;
    options.length = flags.length;
    if (flags.fault_free >= 0.0) options.fault_free_probability = flags.fault_free;
    std::vector<JobScoreSummary> jobs(rows.size());
    std::vector<DetectorSummary> episodes(rows.size());
    int labelled = 0, sub_threshold = 0, fault_free = 0, with_restart = 0, restarts = 0;
    double min_sev = 1e9, max_sev = 0.0;
    int64_t min_dur = INT64_MAX, max_dur = 0;
    for (int t = 0; t < flags.traces; ++t) {
      const uint64_t seed = flags.seed * 1000003ULL + static_cast<uint64_t>(t) * 2 +
                            (kind == FailSlowEpisodeKind::kCompute ? 0 : 1);
      const LabelledTrace trace = GenerateFailSlowTrace(seed, options);
      fault_free += trace.episodes.empty();
      with_restart += !trace.restarts.empty();
      restarts += static_cast<int>(trace.restarts.size());
      for (const FailSlowEpisode& e : trace.episodes) {
        (e.labelled ? labelled : sub_threshold)++;
        if (!e.labelled) continue;
        min_sev = std::min(min_sev, e.severity);
        max_sev = std::max(max_sev, e.severity);
        min_dur = std::min(min_dur, e.end - e.start);
        max_dur = std::max(max_dur, e.end - e.start);
      }
      for (size_t d = 0; d < rows.size(); ++d) {
        absl::StatusOr<std::vector<int64_t>> starts =
            ReportedStarts(rows[d].kind, trace.iteration_ms, trace.restarts, rows[d].options);
        if (!starts.ok()) {
          std::fprintf(stderr, "%s: %s\n", rows[d].name, starts.status().ToString().c_str());
          return 1;
        }
        const TraceScore score = ScoreDetections(trace, *starts);
        jobs[d].Add(score);
        episodes[d].Add(score);
      }
    }
    const bool compute = kind == FailSlowEpisodeKind::kCompute;
    const SeedRow* seed_table = compute ? kSeedTable4 : kSeedTable5;
    std::printf("%s fail-slows (Falcon Table %d): %d traces x %d iterations, seed %llu\n",
                FailSlowEpisodeKindName(kind), compute ? 4 : 5, flags.traces, flags.length,
                static_cast<unsigned long long>(flags.seed));
    std::printf("  traces: %d with a labelled fail-slow (P), %d without (N; %d fault-free, the "
                "rest sub-threshold only), %d with restarts (%d restarts)\n",
                jobs[0].positive, jobs[0].negative, fault_free, with_restart, restarts);
    std::printf("  episodes: %d labelled (severity %.0f%%..%.0f%%, %lld..%lld iterations), %d "
                "sub-threshold (%.0f%%..10%%, neutral); every trace: warm-up of 0..%d slower "
                "iterations, jitter %.1f%%..%.1f%% relative sd (Gaussian or uniform), spikes "
                "p=%.3f\n",
                labelled, 100.0 * (labelled ? min_sev : 0.0), 100.0 * max_sev,
                static_cast<long long>(labelled ? min_dur : 0), static_cast<long long>(max_dur),
                sub_threshold, 100.0 * options.min_severity, options.max_warmup,
                100.0 * options.min_jitter, 100.0 * options.max_jitter, options.spike_probability);
    std::printf("  %-14s %-18s %-18s %-18s| %-11s %-18s %-18s %-18s| %s\n", "detector",
                "accuracy %", "FPR %", "FNR %", "seed", "accuracy %", "FPR %", "FNR %",
                "ours - seed (points: acc FPR FNR)");
    for (size_t d = 0; d < rows.size(); ++d) {
      const JobScoreSummary& j = jobs[d];
      const SeedRow& s = seed_table[rows[d].seed_row];
      std::printf("  %-14s %-18s %-18s %-18s| %-11s %-18s %-18s %-18s| %+6.1f %+6.1f %+6.1f\n",
                  rows[d].name, Cell(Accuracy(j)).c_str(), Cell(Fpr(j)).c_str(),
                  Cell(Fnr(j)).c_str(), s.name, Cell(s.accuracy).c_str(), Cell(s.fpr).c_str(),
                  Cell(s.fnr).c_str(), Accuracy(j).percent() - s.accuracy.percent(),
                  Fpr(j).percent() - s.fpr.percent(), Fnr(j).percent() - s.fnr.percent());
    }
    std::printf("  episode level (FPR here = false reports / all reports, FNR = missed / "
                "labelled episodes):\n");
    for (size_t d = 0; d < rows.size(); ++d) {
      std::printf("    %-14s %s\n", rows[d].name, episodes[d].ToString().c_str());
    }
  }
  return 0;
}
