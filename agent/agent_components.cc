#include "agent/agent_components.h"

#include <time.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/launch_plan.h"
#include "agent/microbatch_plan_file.h"
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
  context.microbatch_plan_path = MicroBatchPlanPathFor(options.log_dir, options.pod_name);
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
    // A launch starts new series: every rank's detector is built with the job's settings.
    if (absl::Status s = failslow->SetDetectorOptions(DetectorOptionsFor(assignment)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.failSlow settings from the assignment: ", s.message()));
    }
  }
  return plan;
}

FailSlowDetectorOptions DetectorOptionsFor(const TrainingAssignment& assignment, FailSlowDetectorOptions base) {
  if (assignment.failslow_change_point_probability != 0) {
    base.bocd.report_threshold = assignment.failslow_change_point_probability;
  }
  if (assignment.failslow_verify_threshold != 0) base.verify_threshold = assignment.failslow_verify_threshold;
  return base;
}

checkpoint::AgentCheckpointsOptions CheckpointOptionsFor(const AgentOptions& options) {
  checkpoint::AgentCheckpointsOptions out;
  out.root = options.checkpoint_root;
  out.job_namespace = options.job_namespace;
  out.job_name = options.job_name;
  out.pod_name = options.pod_name;
  out.data_bind = options.data_bind;
  out.data_port = options.data_port;
  out.data_advertise = options.data_advertise;
  out.clock = options.clock;
  return out;
}

checkpoint::CheckpointLaunch CheckpointLaunchFor(const TrainingAssignment& assignment) {
  checkpoint::CheckpointLaunch launch;
  launch.slot = assignment.machine_index;
  for (const AssignedRank& r : assignment.ranks) launch.ranks.push_back(r.global_rank);
  launch.ranks_per_slot = assignment.layout.gpus_per_machine;
  launch.plan = assignment.checkpoint_plan;
  return launch;
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
  inspect.host_checks_on_node = options.host_inspections_on_node;
  // The kernel log counts from this agent's start on (the kernel's clock).
  timespec started{};
  clock_gettime(CLOCK_MONOTONIC, &started);
  inspect.kernel_log_since_us = static_cast<int64_t>(started.tv_sec) * 1000000 + started.tv_nsec / 1000;
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
