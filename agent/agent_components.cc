#include "agent/agent_components.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/launch_plan.h"
#include "agent/proto_translation.h"
#include "agent/supervisor.h"

extern char** environ;

namespace peregrine {

absl::StatusOr<std::unique_ptr<FailSlowMonitor>> CreateFailSlowMonitor(const AgentOptions& options) {
  if (options.nccl_hook.empty()) return std::unique_ptr<FailSlowMonitor>();
  // Rings live in memory (/dev/shm, a tmpfs) in a directory private to this agent
  // process, unless the agent's environment names one (PEREGRINE_NCCL_RING_DIR): a
  // disk-backed log volume would put page-cache writeback and a full disk under the
  // training processes' NCCL calls. The hook reserves each ring in full at creation
  // and forwards unrecorded when it cannot (reported through TakeRingFailures).
  FailSlowMonitorOptions monitor;
  const char* ring_dir_env = std::getenv("PEREGRINE_NCCL_RING_DIR");
  std::error_code shm_ec;
  if (ring_dir_env != nullptr && *ring_dir_env != '\0') {
    monitor.ring_dir = ring_dir_env;
  } else if (std::filesystem::is_directory("/dev/shm", shm_ec)) {
    RemoveDeadAgentRingDirs("/dev/shm");  // of agents killed before they could clean up
    monitor.ring_dir = absl::StrCat("/dev/shm/peregrine-nccl-", options.pod_name, "-", ::getpid());
    monitor.remove_ring_dir_on_exit = true;
  } else {
    monitor.ring_dir = options.log_dir.empty() ? absl::StrCat("/tmp/peregrine-nccl-", options.pod_name)
                                               : absl::StrCat(options.log_dir, "/nccl-rings");
  }
  return FailSlowMonitor::Create(monitor);
}

absl::StatusOr<std::vector<ProcessSpec>> PrepareLaunch(const AgentOptions& options,
                                                       const TrainingAssignment& assignment,
                                                       FailSlowMonitor* failslow,
                                                       const checkpoint::ShardStore* store) {
  LaunchContext context;
  for (char** e = environ; *e != nullptr; ++e) context.agent_env.emplace_back(*e);
  context.machine_id = options.machine_id;
  context.run_id = absl::StrCat(options.job_namespace, "/", options.job_name);
  context.log_dir = options.log_dir;
  context.started_at = absl::FormatTime(absl::RFC3339_sec, options.clock->Now(), absl::UTCTimeZone());
  context.client_dir = ClientDirFor(options);
  if (store != nullptr) {
    context.checkpoint_area = store->area();
    context.checkpoint_allowance = store->AllowanceBytes();
  }
  absl::StatusOr<std::vector<ProcessSpec>> plan = BuildLaunchPlan(AssignmentToProto(assignment), context);
  if (!plan.ok()) return plan.status();
  if (failslow != nullptr) {
    for (ProcessSpec& spec : *plan) {
      AddNcclHookEnvironment(options.nccl_hook, failslow->ring_dir(), failslow->profiling(), failslow->trap(),
                             &spec.env);
    }
    failslow->Reset();
  }
  return plan;
}

absl::StatusOr<CheckpointParts> CreateCheckpointParts(const AgentOptions& options) {
  CheckpointParts parts;
  if (options.checkpoint_root.empty()) return parts;
  if (!options.token_file.empty()) {
    std::ifstream in(options.token_file);
    if (!in) return absl::FailedPreconditionError(absl::StrCat("token file ", options.token_file, " cannot be read"));
    std::stringstream text;
    text << in.rdbuf();
    parts.token = std::string(absl::StripAsciiWhitespace(text.str()));
  }
  checkpoint::ShardStoreOptions store_options;
  store_options.root = options.checkpoint_root;
  store_options.job_namespace = options.job_namespace;
  store_options.job_name = options.job_name;
  store_options.pod_name = options.pod_name;
  absl::StatusOr<std::unique_ptr<checkpoint::ShardStore>> store = checkpoint::ShardStore::Create(store_options);
  if (!store.ok()) return store.status();
  parts.store = std::move(*store);
  checkpoint::PeerServerOptions server_options;
  server_options.bind = options.data_bind;
  server_options.port = options.data_port;
  server_options.token = parts.token;
  server_options.store = parts.store.get();
  absl::StatusOr<std::unique_ptr<checkpoint::PeerServer>> server = checkpoint::PeerServer::Start(server_options);
  if (!server.ok()) return server.status();
  parts.server = std::move(*server);
  std::string host = options.data_advertise;
  if (host.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) == 0) host = name;
    if (host.empty()) host = "localhost";
  }
  parts.data_address = absl::StrCat(host.find(':') != std::string::npos ? "[" : "", host,
                                    host.find(':') != std::string::npos ? "]" : "", ":", parts.server->port());
  parts.sender = std::make_unique<checkpoint::BackupSender>(
      checkpoint::BackupSenderOptions{parts.store.get(), parts.token, options.clock});
  return parts;
}

std::string ClientDirFor(const AgentOptions& options) {
  if (!options.client_dir.empty()) return options.client_dir;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return self.parent_path().parent_path().string();
}

absl::StatusOr<std::unique_ptr<InspectionRunner>> CreateInspectionRunner(const AgentOptions& options) {
  if (!options.inspections) return std::unique_ptr<InspectionRunner>();
  std::string sim_dir;
  if (!options.sim_machine_root.empty()) {
    sim_dir = absl::StrCat(options.sim_machine_root, "/", options.machine_id);
    if (absl::Status s = PrepareStandInMachine(sim_dir); !s.ok()) return s;
  }
  InspectionRunnerOptions inspect;
  inspect.kmsg_path = options.kmsg_path;
  inspect.sysfs_root = options.sysfs_root;
  inspect.use_dmesg_fallback = sim_dir.empty();
  if (!options.log_dir.empty()) inspect.volumes.push_back(options.log_dir);
  return std::make_unique<InspectionRunner>(inspect);
}

DiagnosticRunnerOptions DiagnosticRunnerOptionsFor(const AgentOptions& options) {
  DiagnosticRunnerOptions diag;
  diag.helper_binary = options.diagnose_binary;
  if (diag.helper_binary.empty()) {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    diag.helper_binary = (ec ? std::filesystem::path(".") : self.parent_path()) / "peregrine-diagnose";
  }
  diag.scratch_dir = options.log_dir.empty() ? absl::StrCat("/tmp/peregrine-diagnostics-", options.pod_name)
                                             : absl::StrCat(options.log_dir, "/diagnostics");
  diag.clock = options.clock;
  diag.spawn = [clock = options.clock](const std::vector<std::string>& argv,
                                       absl::Duration timeout) -> absl::StatusOr<HelperRun> {
    absl::StatusOr<ToolRun> run = RunTool(argv, timeout, 1 << 20, clock);
    if (!run.ok()) return run.status();
    return HelperRun{run->exit_code, run->signal, run->timed_out, std::move(run->output)};
  };
  return diag;
}

DiagnosticRunRequest MakeDiagnosticRequest(const std::string& command_id, const std::string& machine_id,
                                        const DiagnosticTask& task) {
  DiagnosticRunRequest request;
  request.command_id = command_id;
  request.kind = task.kind;
  request.params = task.params;
  request.timeout_ms = task.timeout_ms;
  request.machine_id = machine_id;
  request.gpus = task.gpus;
  request.rank_base = task.rank_base;
  request.command = task.command;
  request.code_env = task.code_env;
  return request;
}

}  // namespace peregrine
