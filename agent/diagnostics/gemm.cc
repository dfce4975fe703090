// gemm: peregrine-gemm on each local GPU in turn; GPUs below min_ratio x the machine's
// median are flagged.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/diagnostics/diagnostic_kinds_run.h"
#include "agent/diagnostics/rank_processes.h"
#include "nlohmann/json.hpp"

namespace peregrine {
namespace {

struct GemmLine {
  bool found = false;
  bool cpu = false;
  double gflops = 0;
};

GemmLine ParseGemm(const std::vector<std::string>& lines) {
  GemmLine out;
  for (const std::string& line : lines) {
    if (line.empty() || line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    if (j.contains("fallback")) out.cpu = true;
    if (j.contains("gflops") && j["gflops"].is_number() && j.contains("device") && j["device"].is_string()) {
      out.found = true;
      out.gflops = j["gflops"].get<double>();
      out.cpu = out.cpu || j["device"].get<std::string>() == "cpu";
    }
  }
  return out;
}

}  // namespace

DiagnosticResultOr RunGemm(const DiagnosticInvocation& inv) {
  absl::StatusOr<GemmOptions> o = ParseGemmOptions(inv.Params());
  if (!o.ok()) return o.status();
  v1::DiagnosticResult result = NewResult(inv);
  absl::StatusOr<std::string> tool = ToolPath(inv, "peregrine-gemm");
  if (!tool.ok()) {
    result.set_passed(!inv.InStandInCluster());
    result.set_not_present(!inv.InStandInCluster());
    result.set_detail(absl::StrCat("gemm: ", tool.status().message()));
    return result;
  }
  std::vector<double> tflops(static_cast<size_t>(inv.gpus), -1.0);
  std::vector<std::string> problems;
  bool cpu = false;
  for (int g = 0; g < inv.gpus; ++g) {
    std::map<std::string, std::string> env = TrainingEnvironment(inv);
    env["LOCAL_RANK"] = absl::StrCat(g);
    env["PEREGRINE_MACHINE_ID"] = inv.machine_id;
    std::vector<std::string> argv = {*tool, "--device", absl::StrCat(g), "--dtype", GemmDtypeName(o->dtype), "--n",
                                     absl::StrCat(o->size), "--seconds", "0.2"};
    if (o->iterations > 0) {
      argv.push_back("--iterations");
      argv.push_back(absl::StrCat(o->iterations));
    }
    RunProcessesOptions options;
    options.deadline = inv.deadline;
    options.clock = inv.clock;
    absl::StatusOr<DiagnosticProcessesOutcome> run = RunProcesses({DiagnosticProcess{g, argv, FlattenEnv(env)}},
                                                                  options);
    if (!run.ok()) return run.status();
    if (run->timed_out) {
      problems.push_back(absl::StrCat(inv.TimedOutDetail(), " (gpu", g, ")"));
      result.add_failed_ranks(static_cast<uint32_t>(inv.rank_base + g));
      break;
    }
    const DiagnosticProcessOutcome& p = run->processes[0];
    GemmLine line = ParseGemm(p.lines);
    cpu = cpu || line.cpu;
    if (!line.found || !p.ok()) {
      problems.push_back(absl::StrCat("gpu", g, ": GEMM failed (", p.Describe(), ")"));
      result.add_failed_ranks(static_cast<uint32_t>(inv.rank_base + g));
      continue;
    }
    tflops[g] = line.gflops / 1000.0;
    (*result.mutable_figures())[absl::StrCat("gpu", g, "_tflops")] = tflops[g];
  }
  if (cpu && !inv.InStandInCluster()) {
    // A CPU GEMM says nothing about a GPU machine: no GPU and no stand-in cluster here.
    v1::DiagnosticResult absent = NewResult(inv);
    absent.set_not_present(true);
    absent.set_detail("gemm: no CUDA device (the CPU benchmark is only the stand-in cluster's GPU)");
    return absent;
  }
  std::vector<double> measured;
  for (double t : tflops) {
    if (t >= 0) measured.push_back(t);
  }
  if (!measured.empty()) {
    std::vector<double> sorted = measured;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted.size() % 2 == 1 ? sorted[sorted.size() / 2]
                                                 : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
    (*result.mutable_figures())["median_tflops"] = median;
    for (int g = 0; g < inv.gpus; ++g) {
      if (tflops[g] < 0 || tflops[g] >= o->min_ratio * median) continue;
      problems.push_back(absl::StrFormat("gpu%d: %.4g TFLOP/s is %.2f x the machine's median %.4g (min_ratio %.2f)", g,
                                         tflops[g], tflops[g] / median, median, o->min_ratio));
      result.add_failed_ranks(static_cast<uint32_t>(inv.rank_base + g));
    }
  }
  if (!problems.empty()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("gemm ", GemmDtypeName(o->dtype), " n=", o->size, ": ", absl::StrJoin(problems, "; ")));
  }
  return result;
}

}  // namespace peregrine
