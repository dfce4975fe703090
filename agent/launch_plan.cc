#include "agent/launch_plan.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

using EnvMap = std::map<std::string, std::string>;

EnvMap MachineEnvironment(const peregrine::v1::Assignment& a, const LaunchContext& context) {
  EnvMap env;
  for (const std::string& entry : context.agent_env) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [key, value] : a.code().env()) env[key] = value;
  const auto& layout = a.layout();
  const uint32_t nnodes = a.world_size() / layout.gpus_per_machine();
  // torchrun's machine-wide variables (torch.distributed.elastic's worker environment).
  env["GROUP_RANK"] = absl::StrCat(a.machine_index());
  env["GROUP_WORLD_SIZE"] = absl::StrCat(nnodes);
  env["ROLE_NAME"] = "default";
  env["ROLE_WORLD_SIZE"] = absl::StrCat(a.world_size());
  env["TORCHELASTIC_RESTART_COUNT"] = absl::StrCat(a.attempt() > 0 ? a.attempt() - 1 : 0);
  env["TORCHELASTIC_RUN_ID"] = context.run_id;
  env["TORCHELASTIC_MAX_RESTARTS"] = absl::StrCat(context.max_restarts);
  env["NODE_RANK"] = absl::StrCat(a.machine_index());
  env["NNODES"] = absl::StrCat(nnodes);
  env["PEREGRINE_TP"] = absl::StrCat(layout.tensor());
  env["PEREGRINE_PP"] = absl::StrCat(layout.pipeline());
  env["PEREGRINE_DP"] = absl::StrCat(layout.data());
  env["PEREGRINE_RESUME_STEP"] = absl::StrCat(a.resume_step());
  env["PEREGRINE_ATTEMPT"] = absl::StrCat(a.attempt());
  env["PEREGRINE_MACHINE_ID"] = context.machine_id;
  if (!context.client_dir.empty()) {
    env["PEREGRINE_CLIENT_LIB"] = absl::StrCat(context.client_dir, "/lib/libperegrine_client.so");
    const std::string python = absl::StrCat(context.client_dir, "/python");
    auto it = env.find("PYTHONPATH");
    env["PYTHONPATH"] = it == env.end() || it->second.empty() ? python : absl::StrCat(python, ":", it->second);
  }
  if (a.checkpoint().interval_steps() > 0 && !context.checkpoint_area.empty()) {
    env["PEREGRINE_CHECKPOINT_INTERVAL"] = absl::StrCat(a.checkpoint().interval_steps());
    env["PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES"] = absl::StrCat(context.checkpoint_allowance);
  }
  if (!context.microbatch_plan_path.empty()) env["PEREGRINE_MICROBATCH_PLAN"] = context.microbatch_plan_path;
  return env;
}

std::vector<std::string> Flatten(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [key, value] : env) out.push_back(absl::StrCat(key, "=", value));
  return out;
}

}  // namespace

void SetTorchrunWorker(const TorchrunWorker& worker, std::map<std::string, std::string>* env) {
  (*env)["RANK"] = absl::StrCat(worker.rank);
  (*env)["LOCAL_RANK"] = absl::StrCat(worker.local_rank);
  (*env)["WORLD_SIZE"] = absl::StrCat(worker.world_size);
  (*env)["LOCAL_WORLD_SIZE"] = absl::StrCat(worker.local_world_size);
  (*env)["MASTER_ADDR"] = worker.master_addr;
  (*env)["MASTER_PORT"] = absl::StrCat(worker.master_port);
}

absl::StatusOr<std::vector<ProcessSpec>> BuildLaunchPlan(const peregrine::v1::Assignment& a,
                                                         const LaunchContext& context) {
  if (a.code().command().empty() || a.code().command(0).empty()) {
    return absl::InvalidArgumentError("assignment.code.command is empty");
  }
  if (a.ranks().empty()) return absl::InvalidArgumentError("assignment.ranks is empty");
  const auto& layout = a.layout();
  if (layout.tensor() == 0 || layout.pipeline() == 0 || layout.data() == 0 || layout.gpus_per_machine() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "assignment.layout: every size must be >= 1 (tensor ", layout.tensor(), ", pipeline ", layout.pipeline(),
        ", data ", layout.data(), ", gpus_per_machine ", layout.gpus_per_machine(), ")"));
  }
  const uint64_t product = static_cast<uint64_t>(layout.tensor()) * layout.pipeline() * layout.data();
  if (product != a.world_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment.world_size ", a.world_size(), " != tensor*pipeline*data ", product));
  }
  if (a.world_size() % layout.gpus_per_machine() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("assignment.layout.gpus_per_machine ", layout.gpus_per_machine(),
                                                   " does not divide world_size ", a.world_size()));
  }
  const EnvMap machine_env = MachineEnvironment(a, context);
  std::vector<ProcessSpec> specs;
  for (const auto& rank : a.ranks()) {
    if (rank.global_rank() >= a.world_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("assignment rank ", rank.global_rank(), " is outside world_size ", a.world_size()));
    }
    EnvMap env = machine_env;
    SetTorchrunWorker({rank.global_rank(), rank.local_rank(), a.world_size(), a.ranks_size(), a.master_addr(),
                       a.master_port()},
                      &env);
    env["ROLE_RANK"] = absl::StrCat(rank.global_rank());
    env["PEREGRINE_TP_RANK"] = absl::StrCat(rank.tp());
    env["PEREGRINE_PP_RANK"] = absl::StrCat(rank.pp());
    env["PEREGRINE_DP_RANK"] = absl::StrCat(rank.dp());
    if (a.checkpoint().interval_steps() > 0 && !context.checkpoint_area.empty()) {
      env["PEREGRINE_CHECKPOINT_DIR"] = absl::StrCat(context.checkpoint_area, "/own/rank-", rank.global_rank());
    }
    ProcessSpec spec;
    spec.global_rank = static_cast<int>(rank.global_rank());
    spec.argv.assign(a.code().command().begin(), a.code().command().end());
    spec.env = Flatten(env);
    if (!context.log_dir.empty()) {
      spec.log_path = absl::StrCat(context.log_dir, "/rank-", rank.global_rank(), ".log");
      spec.log_header = absl::StrCat("===== peregrine attempt ", a.attempt(), " rank ", rank.global_rank(),
                                     " resume_step ", a.resume_step(), " revision ",
                                     a.code().revision().empty() ? "-" : a.code().revision(),
                                     " started ", context.started_at, " =====");
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

}  // namespace peregrine
