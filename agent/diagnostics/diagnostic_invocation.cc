#include "agent/diagnostics/diagnostic_invocation.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/launch_plan.h"
#include "agent/supervisor.h"
#include "diagnosis/tools/standin_device.h"

namespace peregrine {

bool DiagnosticInvocation::InStandInCluster() const {
  auto it = env.find(kStandInDeviceEnv);
  return it != env.end() && !it->second.empty();
}

int DiagnosticInvocation::SimMachineNumber() const {
  int n = -1;
  if (!absl::SimpleAtoi(machine_id, &n) || n < 0) return -1;
  return n;
}

std::string DiagnosticInvocation::TimedOutDetail() const {
  return absl::StrCat("timed out after ", absl::ToInt64Milliseconds(timeout), " ms");
}

std::map<std::string, std::string> TrainingEnvironment(const DiagnosticInvocation& inv) {
  std::map<std::string, std::string> env = inv.env;
  for (const auto& [k, v] : inv.code_env) env[k] = v;
  return env;
}

int64_t NcclTimeoutMs(const DiagnosticInvocation& inv, absl::Time now) {
  return std::max<int64_t>(1000, absl::ToInt64Milliseconds(inv.deadline - now));
}

std::map<std::string, std::string> RankEnvironment(const DiagnosticInvocation& inv, const RankWorld& world, int gpu,
                                                   int64_t nccl_timeout_ms) {
  std::map<std::string, std::string> env = TrainingEnvironment(inv);
  SetTorchrunWorker({world.rank_base + gpu, gpu, world.world, inv.gpus, world.master_addr, world.master_port}, &env);
  env["PEREGRINE_MACHINE_ID"] = inv.machine_id;
  env["PEREGRINE_NCCL_TIMEOUT_MS"] = absl::StrCat(nccl_timeout_ms);
  return env;
}

absl::StatusOr<std::string> ToolPath(const DiagnosticInvocation& inv, const std::string& name) {
  if (!inv.tools_dir.empty()) {
    const std::string candidate = absl::StrCat(inv.tools_dir, "/", name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  auto it = inv.env.find("PATH");
  return ResolveExecutable(name, it != inv.env.end() ? it->second : "/usr/local/bin:/usr/bin:/bin");
}

std::vector<std::string> FlattenEnv(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

v1::DiagnosticResult NewResult(const DiagnosticInvocation& inv) {
  v1::DiagnosticResult r;
  r.set_kind(inv.kind);
  r.set_machine_id(inv.machine_id);
  r.set_passed(true);
  return r;
}

std::string Hex64(uint64_t v) { return absl::StrFormat("%016x", v); }

}  // namespace peregrine
