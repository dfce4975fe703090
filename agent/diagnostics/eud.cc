// eud: dcgmi diag when present; otherwise, with a stand-in device plugged in (the local
// cluster), the stand-in GPU self-test. The stand-in knows the injected fault (an oracle):
// its results say "stand-in self-test" so nobody mistakes them for a device measurement.
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/diagnostics/dcgm_diag_json.h"
#include "agent/diagnostics/diagnostic_kinds.h"
#include "agent/diagnostics/diagnostic_kinds_run.h"
#include "agent/diagnostics/rank_processes.h"
#include "agent/supervisor.h"
#include "base/fnv1a.h"
#include "diagnosis/tools/standin_device.h"

namespace peregrine {
namespace {

constexpr int kSelfTestN = 64;
// Every stand-in result says what it is: the stand-in knows the fault it reports.
constexpr char kStandInLabel[] = " [stand-in self-test: an oracle of the injected faults]";

// The reference GEMM's inputs: small integers, so every product and sum is exact in fp32
// and the right answer is known independently of the floating-point path.
int RefA(int i, int k) { return (i * 7 + k * 3) % 17 - 8; }
int RefB(int k, int j) { return (k * 5 + j * 11) % 13 - 6; }

struct GpuSelfTest {
  bool passed = true;
  std::string detail;
  double compute_slowdown = 1.0;
};

// One stand-in GPU: the fixed GEMM in fp32, passed through the stand-in device's model of
// this GPU, compared bit for bit with the exact integer answer.
GpuSelfTest RunStandInSelfTest(const StandInDevice& device, int machine, int gpu, absl::Time deadline,
                               Clock* clock) {
  GpuSelfTest out;
  PeregrineStandInGpu fault = device.Gpu(machine, gpu);
  out.compute_slowdown = fault.compute_slowdown;
  if (fault.crash) {
    out.passed = false;
    out.detail = absl::StrCat("gpu", gpu, ": self-test aborted (illegal memory access)");
    return out;
  }
  while (fault.hang) {  // a hung kernel: wait until the fault clears or the deadline
    if (clock->Now() >= deadline) {
      out.passed = false;
      out.detail = absl::StrCat("gpu", gpu, ": self-test hung");
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fault = device.Gpu(machine, gpu);
  }
  const int n = kSelfTestN;
  std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
  std::vector<int64_t> exact(n * n, 0);
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      a[i * n + k] = static_cast<float>(RefA(i, k));
      b[i * n + k] = static_cast<float>(RefB(i, k));
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      for (int j = 0; j < n; ++j) {
        c[i * n + j] += a[i * n + k] * b[k * n + j];
        exact[i * n + j] += static_cast<int64_t>(RefA(i, k)) * RefB(k, j);
      }
    }
  }
  // The device's faults as the stand-in NCCL models them on its outputs.
  if (fault.nan) {
    for (float& x : c) x = std::nanf("");
  }
  if (fault.corrupt) {
    for (float& x : c) x = x * 1.001f;
  }
  uint64_t got = kFnv1aOffsetBasis, want = got;
  bool nan = false;
  for (int i = 0; i < n * n; ++i) {
    const float w = static_cast<float>(exact[i]);
    got = Fnv1aBytes(&c[i], sizeof(float), got);
    want = Fnv1aBytes(&w, sizeof(float), want);
    nan = nan || std::isnan(c[i]);
  }
  if (got != want) {
    out.passed = false;
    out.detail = absl::StrCat("gpu", gpu, ": reference GEMM digest differs", nan ? " (NaN)" : " (wrong values)");
  }
  return out;
}

DiagnosticResultOr RunDcgmi(const DiagnosticInvocation& inv, const std::string& dcgmi, int level) {
  v1::DiagnosticResult result = NewResult(inv);
  DiagnosticProcess p;
  p.argv = {dcgmi, "diag", "-r", absl::StrCat(level), "-j"};
  p.env = FlattenEnv(inv.env);
  RunProcessesOptions options;
  options.deadline = inv.deadline;
  options.clock = inv.clock;
  absl::StatusOr<DiagnosticProcessesOutcome> run = RunProcesses({p}, options);
  if (!run.ok()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("dcgmi could not start: ", run.status().message()));
    return result;
  }
  if (run->timed_out) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("dcgmi diag: ", inv.TimedOutDetail()));
    return result;
  }
  const DiagnosticProcessOutcome& o = run->processes[0];
  absl::StatusOr<DcgmDiagReport> report = ParseDcgmDiagJson(absl::StrJoin(o.lines, "\n"));
  if (!report.ok()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("dcgmi diag -r ", level, " (", o.Describe(), "): ", report.status().message()));
    return result;
  }
  result.mutable_figures()->insert({"tests", static_cast<double>(report->tests)});
  result.mutable_figures()->insert({"failures", static_cast<double>(report->failures.size())});
  if (report->passed()) return result;
  result.set_passed(false);
  std::vector<std::string> parts;
  if (!report->runtime_error.empty()) parts.push_back(absl::StrCat("runtime error: ", report->runtime_error));
  for (const DcgmDiagFailure& f : report->failures) {
    std::string part = absl::StrCat(f.gpu >= 0 ? absl::StrCat("gpu", f.gpu, ": ") : "", f.test, " failed");
    if (!f.warning.empty()) absl::StrAppend(&part, " (", f.warning, ")");
    parts.push_back(part);
  }
  result.set_detail(absl::StrCat("dcgmi diag -r ", level, ": ", absl::StrJoin(parts, "; ")));
  for (int gpu : report->FailedGpus()) result.add_failed_ranks(static_cast<uint32_t>(inv.rank_base + gpu));
  return result;
}

}  // namespace

DiagnosticResultOr RunEud(const DiagnosticInvocation& inv) {
  absl::StatusOr<EudOptions> options = ParseEudOptions(inv.Params());
  if (!options.ok()) return options.status();
  auto path_it = inv.env.find("PATH");
  absl::StatusOr<std::string> dcgmi =
      ResolveExecutable("dcgmi", path_it != inv.env.end() ? path_it->second : "/usr/local/bin:/usr/bin:/bin");
  if (dcgmi.ok()) return RunDcgmi(inv, *dcgmi, options->level);
  v1::DiagnosticResult result = NewResult(inv);
  if (!inv.InStandInCluster()) {
    result.set_not_present(true);
    result.set_detail("eud: dcgmi is not installed and this is not the stand-in cluster");
    return result;
  }
  std::string error;
  std::unique_ptr<StandInDevice> device = StandInDevice::Load(inv.env.at(kStandInDeviceEnv), &error);
  if (device == nullptr) {
    result.set_passed(false);
    result.set_detail(absl::StrCat("eud: ", error));
    return result;
  }
  result.mutable_figures()->insert({"standin", 1.0});
  const int machine = inv.SimMachineNumber();
  std::vector<GpuSelfTest> tests(static_cast<size_t>(inv.gpus));
  {
    std::vector<std::thread> threads;
    for (int g = 0; g < inv.gpus; ++g) {
      threads.emplace_back([&, g] { tests[g] = RunStandInSelfTest(*device, machine, g, inv.deadline, inv.clock); });
    }
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::string> failures;
  bool hung = false;
  for (int g = 0; g < inv.gpus; ++g) {
    (*result.mutable_figures())[absl::StrCat("gpu", g, "_compute_slowdown")] = tests[g].compute_slowdown;
    if (tests[g].passed) continue;
    hung = hung || tests[g].detail.find("hung") != std::string::npos;
    failures.push_back(tests[g].detail);
    result.add_failed_ranks(static_cast<uint32_t>(inv.rank_base + g));
  }
  if (!failures.empty()) {
    result.set_passed(false);
    result.set_detail(absl::StrCat(hung ? absl::StrCat(inv.TimedOutDetail(), ": ") : "", absl::StrJoin(failures, "; "),
                                   kStandInLabel));
  } else {
    result.set_detail(absl::StrCat("every GPU passed", kStandInLabel));
  }
  return result;
}

}  // namespace peregrine
