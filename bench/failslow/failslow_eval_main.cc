// failslow-eval: scores the sliding-window baseline, BOCD and BOCD + verification on
// generated labelled iteration-time traces, one table per fault kind (Falcon Tables 4-5).
//
//   failslow-eval [--traces=N] [--length=L] [--seed=S]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "diagnosis/failslow_trace.h"

namespace {

struct Flags {
  int traces = 1000;
  int length = 2000;
  uint64_t seed = 1;
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
    } else {
      std::fprintf(stderr, "unknown flag %s\nusage: failslow-eval [--traces=N] [--length=L] [--seed=S]\n",
                   arg.c_str());
      return false;
    }
  }
  if (flags.traces < 1 || flags.length < 100) {
    std::fprintf(stderr, "--traces must be >= 1 and --length >= 100\n");
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace peregrine;
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) return 2;
  const FailSlowDetectorKind detectors[] = {FailSlowDetectorKind::kSlidingWindow,
                                            FailSlowDetectorKind::kBocd,
                                            FailSlowDetectorKind::kBocdVerified};
  for (FailSlowKind kind : {FailSlowKind::kCompute, FailSlowKind::kCommunication}) {
    FailSlowTraceOptions options;
    options.kind = kind;
    options.length = flags.length;
    DetectorSummary summaries[3];
    int labelled = 0, sub_threshold = 0;
    for (int t = 0; t < flags.traces; ++t) {
      const uint64_t seed = flags.seed * 1000003ULL + static_cast<uint64_t>(t) * 2 +
                            (kind == FailSlowKind::kCompute ? 0 : 1);
      const LabelledTrace trace = GenerateFailSlowTrace(seed, options);
      for (const FailSlowEpisode& e : trace.episodes) (e.labelled ? labelled : sub_threshold)++;
      for (int d = 0; d < 3; ++d) {
        absl::StatusOr<std::vector<int64_t>> starts =
            ReportedStarts(detectors[d], trace.iteration_ms, trace.restarts);
        if (!starts.ok()) {
          std::fprintf(stderr, "%s\n", starts.status().ToString().c_str());
          return 1;
        }
        summaries[d].Add(ScoreDetections(trace, *starts));
      }
    }
    std::printf("%s fail-slows: %d traces x %d iterations, %d labelled episodes (>= 10%%), "
                "%d sub-threshold\n",
                FailSlowKindName(kind), flags.traces, flags.length, labelled, sub_threshold);
    for (int d = 0; d < 3; ++d) {
      std::printf("  %-14s %s\n", FailSlowDetectorKindName(detectors[d]),
                  summaries[d].ToString().c_str());
    }
  }
  return 0;
}
