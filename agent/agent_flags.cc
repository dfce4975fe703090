#include "agent/agent_flags.h"

#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace peregrine {
namespace {

struct FlagDef {
  const char* name;
  const char* env;
};

constexpr FlagDef kFlags[] = {
    {"controller", "PEREGRINE_CONTROLLER"}, {"job", "PEREGRINE_JOB"},
    {"pod", "PEREGRINE_POD"},               {"machine-id", "PEREGRINE_MACHINE_ID"},
    {"role", "PEREGRINE_ROLE"},
    {"credential-file", "PEREGRINE_CREDENTIAL_FILE"},
    {"tls-ca", "PEREGRINE_TLS_CA"},         {"log-dir", "PEREGRINE_LOG_DIR"},
    {"heartbeat-ms", "PEREGRINE_HEARTBEAT_MS"}, {"grace-ms", "PEREGRINE_GRACE_MS"},
    {"nccl-hook", "PEREGRINE_NCCL_HOOK"},
    {"kmsg-path", "PEREGRINE_KMSG_PATH"},   {"sysfs-root", "PEREGRINE_SYSFS_ROOT"},
    {"host-inspections", "PEREGRINE_HOST_INSPECTIONS"},
    {"sim-machine-root", "PEREGRINE_SIM_MACHINE_ROOT"},
    {"diagnose-bin", "PEREGRINE_DIAGNOSE_BIN"}, {"gpus-per-machine", "PEREGRINE_GPUS_PER_MACHINE"},
    {"checkpoint-root", "PEREGRINE_CHECKPOINT_ROOT"}, {"data-port", "PEREGRINE_DATA_PORT"},
    {"data-bind", "PEREGRINE_DATA_BIND"},   {"data-advertise", "PEREGRINE_DATA_ADVERTISE"},
    {"client-dir", "PEREGRINE_CLIENT_DIR"},
};

const FlagDef* FindFlag(std::string_view name) {
  for (const FlagDef& def : kFlags) {
    if (name == def.name) return &def;
  }
  return nullptr;
}

absl::StatusOr<uint32_t> ParseMillis(const std::string& source, const std::string& text) {
  uint32_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a positive integer of milliseconds, got \"", text, "\""));
  }
  return value;
}

}  // namespace

std::string AgentUsage() {
  std::string usage =
      "usage: peregrine-agent --controller HOST:PORT --job NAMESPACE/NAME --pod NAME [options]\n"
      "Supervises the training processes of one pod and reports to the Peregrine controller.\n"
      "Each flag may also be given by its environment variable:\n";
  for (const FlagDef& def : kFlags) absl::StrAppend(&usage, "  --", def.name, " [", def.env, "]\n");
  return usage;
}

absl::StatusOr<ParsedAgentFlags> ParseAgentFlags(const std::vector<std::string>& args, const EnvLookup& env) {
  ParsedAgentFlags parsed;
  std::map<std::string, std::pair<std::string, std::string>> values;  // name -> (source, value)
  for (const FlagDef& def : kFlags) {
    if (std::optional<std::string> value = env(def.env); value && !value->empty()) {
      values[def.name] = {absl::StrCat("$", def.env), *value};
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      parsed.help = true;
      return parsed;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\" (flags start with --)"));
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (FindFlag(name) == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      value = args[++i];
    }
    values[name] = {absl::StrCat("--", name), value};
  }
  AgentOptions& o = parsed.options;
  auto get = [&](const char* name) -> std::string {
    auto it = values.find(name);
    return it == values.end() ? "" : it->second.second;
  };
  auto source = [&](const char* name) { return values.at(name).first; };
  o.controller = get("controller");
  if (o.controller.empty()) return absl::InvalidArgumentError("--controller (or $PEREGRINE_CONTROLLER) is required");
  std::string job = get("job");
  if (job.empty()) return absl::InvalidArgumentError("--job (or $PEREGRINE_JOB) is required");
  size_t slash = job.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == job.size() || job.find('/', slash + 1) != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(source("job"), ": expected NAMESPACE/NAME, got \"", job, "\""));
  }
  o.job_namespace = job.substr(0, slash);
  o.job_name = job.substr(slash + 1);
  o.pod_name = get("pod");
  if (o.pod_name.empty()) return absl::InvalidArgumentError("--pod (or $PEREGRINE_POD) is required");
  o.machine_id = get("machine-id");
  if (o.machine_id.empty()) o.machine_id = o.pod_name;
  std::string role = get("role");
  if (role.empty() || role == "active") {
    o.role = AgentRoleOption::kActive;
  } else if (role == "standby") {
    o.role = AgentRoleOption::kStandby;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(source("role"), ": expected active or standby, got \"", role, "\""));
  }
  o.credential_file = get("credential-file");
  o.tls_ca_file = get("tls-ca");
  o.log_dir = get("log-dir");
  o.nccl_hook = get("nccl-hook");
  if (values.contains("heartbeat-ms")) {
    absl::StatusOr<uint32_t> ms = ParseMillis(source("heartbeat-ms"), get("heartbeat-ms"));
    if (!ms.ok()) return ms.status();
    o.heartbeat_ms = *ms;
  }
  if (values.contains("grace-ms")) {
    absl::StatusOr<uint32_t> ms = ParseMillis(source("grace-ms"), get("grace-ms"));
    if (!ms.ok()) return ms.status();
    o.grace_ms = *ms;
  }
  if (values.contains("kmsg-path")) o.kmsg_path = get("kmsg-path");
  if (values.contains("sysfs-root")) o.sysfs_root = get("sysfs-root");
  if (values.contains("host-inspections")) {
    const std::string where = get("host-inspections");
    if (where != "pod" && where != "node") {
      return absl::InvalidArgumentError(
          absl::StrCat(source("host-inspections"), ": expected \"pod\" or \"node\", got \"", where, "\""));
    }
    o.host_inspections_on_node = where == "node";
  }
  o.diagnose_binary = get("diagnose-bin");
  if (values.contains("gpus-per-machine")) {
    if (!absl::SimpleAtoi(get("gpus-per-machine"), &o.gpus_per_machine) || o.gpus_per_machine < 1 ||
        o.gpus_per_machine > 1024) {
      return absl::InvalidArgumentError(absl::StrCat(source("gpus-per-machine"), ": expected an integer in [1, 1024], got \"",
                                                     get("gpus-per-machine"), "\""));
    }
  }
  if (values.contains("checkpoint-root")) o.checkpoint_root = get("checkpoint-root");
  if (o.checkpoint_root == "off") o.checkpoint_root.clear();
  if (values.contains("data-port")) {
    if (!absl::SimpleAtoi(get("data-port"), &o.data_port) || o.data_port < 0 || o.data_port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat(source("data-port"), ": expected a port in [0, 65535], got \"", get("data-port"), "\""));
    }
  }
  if (values.contains("data-bind")) o.data_bind = get("data-bind");
  o.data_advertise = get("data-advertise");
  o.client_dir = get("client-dir");
  o.sim_machine_root = get("sim-machine-root");
  if (!o.sim_machine_root.empty()) {
    const std::string dir = absl::StrCat(o.sim_machine_root, "/", o.machine_id);
    if (!values.contains("kmsg-path")) o.kmsg_path = dir + "/kmsg";
    if (!values.contains("sysfs-root")) o.sysfs_root = dir + "/sys";
  }
  return parsed;
}

}  // namespace peregrine
