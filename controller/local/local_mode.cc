#include "controller/local/local_mode.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/durable_file.h"
#include "base/secret_token.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "controller/controller_metrics.h"
#include "controller/http_server.h"
#include "controller/local/local_cluster.h"
#include "controller/local/local_node_health.h"
#include "controller/core/recovery_policy.h"
#include "sim/fault/fault_control.h"

namespace peregrine {
namespace {


// A secret (the agent key) in a 0600 file; kept across controller restarts. Created
// with mode 0600 from the start (never readable by others, even briefly) and durably.
absl::StatusOr<std::string> EnsureToken(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (in && std::getline(in, token) && !token.empty()) return token;
  absl::StatusOr<std::string> fresh = NewSecretToken();
  if (!fresh.ok()) return fresh.status();
  if (absl::Status s = WriteFileDurably(path, absl::StrCat(*fresh, "\n"), 0600); !s.ok()) return s;
  return *fresh;
}

int LoadPersistedPort(const std::string& path) {
  std::ifstream in(path);
  if (!in) return 0;
  try {
    return nlohmann::json::parse(in).value("grpcPort", 0);
  } catch (const std::exception&) {
    return 0;
  }
}

// The agents' checkpoint root (LocalModeOptions::checkpoint_root), created 0700. The default
// lives in /dev/shm, keyed by the state directory so a restarted controller finds it
// again, and <state_dir>/shm points at it so a reader of the state dir can find it.
absl::StatusOr<std::string> LocalCheckpointRoot(const LocalModeOptions& options) {
  std::string root = options.checkpoint_root;
  if (root.empty()) {
    const std::string state = std::filesystem::weakly_canonical(options.state_dir).string();
    if (std::filesystem::is_directory("/dev/shm")) {
      root = absl::StrFormat("/dev/shm/peregrine-local-%d-%016x", getuid(), std::hash<std::string>()(state));
    } else {
      root = state + "/shm-store";
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create the checkpoint root ", root, ": ", ec.message()));
  std::filesystem::permissions(root, std::filesystem::perms::owner_all, ec);
  const std::string link = options.state_dir + "/shm";
  if (root != link && !std::filesystem::exists(std::filesystem::symlink_status(link))) {
    std::filesystem::create_directory_symlink(root, link, ec);  // a convenience only
  }
  return root;
}

}  // namespace

struct LocalMode::Impl {
  TrainingJob job;
  LocalModeOptions options;
  std::string key;
  std::unique_ptr<ControllerMetrics> metrics;
  std::unique_ptr<AgentRegistry> registry;
  std::unique_ptr<AgentServiceImpl> service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<LocalCluster> cluster;
  std::unique_ptr<LocalNodeHealth> node_health;
  // Runs node health passes (due sweeps) every second until shut down.
  std::thread node_health_thread;
  absl::Mutex node_health_mu;
  absl::CondVar node_health_cv;
  bool node_health_stop = false;
  void StopNodeHealth() {
    if (!node_health_thread.joinable()) return;
    {
      absl::MutexLock lock(&node_health_mu);
      node_health_stop = true;
      node_health_cv.Signal();
    }
    // A running sweep would hold the join until its check ends (a hung GPU's self-test
    // runs to its timeout, minutes): interrupt it.
    if (node_health != nullptr) node_health->Cancel();
    node_health_thread.join();
  }
  ~Impl() { StopNodeHealth(); }
  std::unique_ptr<JobController> controller;
  std::unique_ptr<FaultInjector> injector;
  std::unique_ptr<HttpServer> http;
  int grpc_port = 0;
  int http_port = 0;
  bool shut_down = false;
};

LocalMode::LocalMode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalMode::~LocalMode() { Shutdown(false); }

absl::StatusOr<std::unique_ptr<LocalMode>> LocalMode::Start(const TrainingJob& job, LocalModeOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->job = job;
  impl->options = options;
  impl->key = JobKey(job.metadata.namespace_, job.metadata.name);
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", options.state_dir, ": ", ec.message()));
  // Persisted checkpoints default to <state dir>/checkpoints (absolute: the agents run
  // elsewhere); the directory is made here, since the agents write into an existing one.
  CheckpointSpec& checkpoint = impl->job.spec.checkpoint;
  if (checkpoint.persist_every_steps > 0 && checkpoint.persist_path.empty()) {
    checkpoint.persist_path = std::filesystem::absolute(options.state_dir + "/checkpoints").lexically_normal().string();
  }
  if (checkpoint.persist_every_steps > 0) {
    std::filesystem::create_directories(checkpoint.persist_path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("spec.checkpoint.persistPath: cannot create ", checkpoint.persist_path, ": ", ec.message()));
    }
  }
  // The agent key every agent's credential and the job's data-channel token derive from
  // (controller/agent_credentials.h); a 0600 file kept across controller restarts, so
  // agents started before a restart still register.
  auto agent_key = EnsureToken(options.state_dir + "/agent.key");
  if (!agent_key.ok()) return agent_key.status();
  const std::string faults = options.state_dir + "/faults.bin";
  if (!std::filesystem::exists(faults)) {
    if (auto s = sim::CreateFaultTable(faults); !s.ok()) return s;
  }

  impl->metrics = std::make_unique<ControllerMetrics>();
  impl->metrics->SetLeader(true);  // local mode has one replica
  impl->registry = std::make_unique<AgentRegistry>(absl::StrCat("local-", getpid()));
  impl->registry->SetHeartbeatIntervalMs(static_cast<uint32_t>(options.heartbeat_ms));
  if (absl::Status s = impl->registry->SetAgentKey(*agent_key); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(options.state_dir, "/agent.key: ", s.message()));
  }
  impl->service = std::make_unique<AgentServiceImpl>(impl->registry.get(), options.clock);

  // The agents dial this port again after a controller restart, so it is persisted.
  const std::string ports_path = options.state_dir + "/controller.json";
  int port = options.grpc_port != 0 ? options.grpc_port : LoadPersistedPort(ports_path);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options.host, ":", port), grpc::InsecureServerCredentials(), &impl->grpc_port);
  builder.RegisterService(impl->service.get());
  ApplyAgentServerKeepalive(&builder);
  builder.AddChannelArgument(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 16 << 20);
  impl->grpc_server = builder.BuildAndStart();
  if (!impl->grpc_server || impl->grpc_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for agents on ", options.host, ":", port));
  }

  LocalClusterOptions copts;
  copts.state_dir = options.state_dir;
  copts.agent_binary = options.bin_dir + "/peregrine-agent";
  copts.controller_address = options.agent_controller_address.empty()
                                ? absl::StrCat(options.host, ":", impl->grpc_port)
                                : options.agent_controller_address;
  copts.agent_key = *agent_key;
  copts.path_prepend = {options.bin_dir};
  copts.pod_env["PEREGRINE_SIM_FAULTS"] = faults;
  // The stand-in device the validation tools and the GPU self-test use instead of a GPU.
  const std::string standin = options.bin_dir + "/../lib/sim/libperegrine_sim_device.so";
  if (!std::filesystem::exists(standin)) {
    return absl::FailedPreconditionError(absl::StrCat("local mode needs the stand-in device ", standin,
                                                      " (build the target peregrine_sim_device)"));
  }
  copts.pod_env["PEREGRINE_STANDIN_DEVICE"] = std::filesystem::weakly_canonical(standin).string();
  // Fail-slow tracking: agents preload the NCCL hook into training when the build has it.
  if (const std::string hook = options.bin_dir + "/../lib/libperegrine_nccl.so"; std::filesystem::exists(hook)) {
    copts.pod_env["PEREGRINE_NCCL_HOOK"] = std::filesystem::weakly_canonical(hook).string();
  }
  // Stand-in machines: each agent inspects its own kernel log and sysfs tree there.
  const std::string sim_machines = options.state_dir + "/machines";
  copts.pod_env["PEREGRINE_SIM_MACHINE_ROOT"] = sim_machines;
  copts.heartbeat_ms = options.heartbeat_ms;
  // In-memory checkpoints: the agents' stores in shared memory, their data channels on
  // loopback, and the client library and Python package of this build for the ranks.
  auto checkpoint_root = LocalCheckpointRoot(options);
  if (!checkpoint_root.ok()) return checkpoint_root.status();
  copts.checkpoint_root = *checkpoint_root;
  copts.pod_env["PEREGRINE_CHECKPOINT_ROOT"] = *checkpoint_root;
  copts.pod_env["PEREGRINE_DATA_BIND"] = options.host;
  copts.pod_env["PEREGRINE_DATA_ADVERTISE"] = options.host;
  copts.pod_env["PEREGRINE_CLIENT_DIR"] = std::filesystem::weakly_canonical(options.bin_dir + "/..").string();
  auto cluster = LocalCluster::Create(copts);
  if (!cluster.ok()) return cluster.status();
  impl->cluster = std::move(*cluster);
  // Node health: evicted machines are swept with peregrine-diagnose on the stand-in device
  // and come back to the pool (local_node_health.h).
  LocalNodeHealthOptions nh;
  nh.state_dir = options.state_dir;
  nh.diagnose_binary = options.bin_dir + "/peregrine-diagnose";
  nh.env = {{"PEREGRINE_SIM_FAULTS", copts.pod_env["PEREGRINE_SIM_FAULTS"]},
            {"PEREGRINE_STANDIN_DEVICE", copts.pod_env["PEREGRINE_STANDIN_DEVICE"]},
            {"PEREGRINE_SIM_MACHINE_ROOT", sim_machines}};
  nh.gpus_per_machine = std::max(1, job.spec.gpus_per_machine);
  nh.clock = options.clock;
  LocalCluster* local_cluster = impl->cluster.get();
  nh.on_returned = [local_cluster](const std::string& machine) { (void)local_cluster->ReturnMachine(machine); };
  auto node_health = LocalNodeHealth::Create(nh);
  if (!node_health.ok()) return node_health.status();
  impl->node_health = std::move(*node_health);
  impl->cluster->SetNodeHealth(impl->node_health.get());
  {
    Impl* self = impl.get();
    self->node_health_thread = std::thread([self] {
      absl::MutexLock lock(&self->node_health_mu);
      while (!self->node_health_stop) {
        self->node_health_mu.Unlock();
        (void)self->node_health->Pass();
        self->metrics->SetNodeHealthCounts(self->node_health->Counts());
        self->node_health_mu.Lock();
        const absl::Time deadline = self->options.clock->Now() + absl::Seconds(1);
        while (!self->node_health_stop &&
               !self->options.clock->WaitWithDeadline(self->node_health_cv, self->node_health_mu, deadline)) {
        }
      }
    });
  }

  JobController::Options jopts;
  jopts.decision = options.decision;
  jopts.clock = options.clock;
  impl->controller = std::make_unique<JobController>(impl->job, impl->cluster.get(), impl->registry.get(),
                                                     impl->metrics.get(), jopts);
  JobController* controller = impl->controller.get();
  impl->registry->SetChangeCallback([controller](const std::string&) { controller->Wake(); });
  if (auto s = controller->Start(); !s.ok()) return s;

  impl->injector = std::make_unique<FaultInjector>(impl->cluster.get(), faults, sim_machines);
  impl->http = std::make_unique<HttpServer>(std::vector<JobController*>{controller}, impl->metrics.get(),
                                            impl->injector.get());
  auto http_port = impl->http->Start(options.host, options.http_port);
  if (!http_port.ok()) return http_port.status();
  impl->http_port = *http_port;
  const std::string ports = nlohmann::json{{"grpcPort", impl->grpc_port},
                                           {"httpPort", impl->http_port},
                                           {"http", absl::StrCat("http://", options.host, ":", impl->http_port)},
                                           {"pid", getpid()}}
                                .dump(2);
  if (absl::Status s = WriteFileDurably(ports_path, ports); !s.ok()) return s;
  return std::unique_ptr<LocalMode>(new LocalMode(std::move(impl)));
}

JobController& LocalMode::controller() { return *impl_->controller; }
LocalCluster& LocalMode::cluster() { return *impl_->cluster; }
int LocalMode::grpc_port() const { return impl_->grpc_port; }
int LocalMode::http_port() const { return impl_->http_port; }

absl::StatusOr<std::string> LocalMode::Inject(const FaultRequest& request) {
  auto result = impl_->injector->Inject(request, impl_->controller->Snapshot());
  if (result.ok()) impl_->controller->Note(absl::StrCat("Fault injected: ", *result));
  return result;
}

std::vector<AgentObservation> LocalMode::ObserveAgents() { return impl_->registry->Observe(impl_->key); }

void LocalMode::Shutdown(bool teardown) {
  if (!impl_ || impl_->shut_down) return;
  impl_->shut_down = true;
  if (impl_->http) impl_->http->Stop();
  if (impl_->controller) impl_->controller->Stop();
  impl_->StopNodeHealth();
  if (teardown && impl_->cluster) impl_->cluster->TearDown(impl_->job.spec.fault_tolerance.restart_grace_seconds * 1000);
  if (impl_->grpc_server) {
    impl_->grpc_server->Shutdown(absl::ToChronoTime(impl_->options.clock->Now() + absl::Seconds(1)));
    impl_->grpc_server->Wait();
  }
}

std::string FormatTimeline(const std::vector<TimelineEntry>& timeline, const JobStatus& st, int64_t origin) {
  std::string out = "== timeline ==\n";
  for (const TimelineEntry& e : timeline) {
    absl::StrAppendFormat(&out, "  +%7.2fs  %s\n", static_cast<double>(e.at - origin) / 1e9, e.what);
  }
  out += "== incidents ==\n";
  for (const Incident& inc : st.incidents) {
    absl::StrAppendFormat(&out, "  #%d %s: %s\n", inc.id, ToString(inc.kind), inc.signal);
    absl::StrAppendFormat(&out, "     detected +%.2fs, decided +%.2fs (%s), training resumed +%.2fs\n",
                          static_cast<double>(inc.detected_at - origin) / 1e9,
                          static_cast<double>(inc.decided_at - origin) / 1e9, inc.decision,
                          inc.resumed_at ? static_cast<double>(inc.resumed_at - origin) / 1e9 : 0.0);
    for (const std::string& a : inc.actions) absl::StrAppendFormat(&out, "     - %s\n", a);
    for (const DiagnosisStageRecord& r : inc.diagnosis) {
      absl::StrAppendFormat(&out, "     diagnosis %s +%.2fs..+%.2fs: %s%s%s\n", r.stage,
                            static_cast<double>(r.started_at - origin) / 1e9,
                            static_cast<double>(r.finished_at - origin) / 1e9, r.verdict == StageVerdict::kPending ? "running" : ToString(r.verdict),
                            r.failed_machines.empty() ? "" : absl::StrCat(" (", absl::StrJoin(r.failed_machines, ", "), ")"),
                            r.note.empty() ? "" : absl::StrCat("; ", r.note));
      for (const std::string& line : r.results) absl::StrAppendFormat(&out, "       %s\n", line);
    }
    absl::StrAppendFormat(&out, "     training time lost: %.2f s (resumed after step %d; failure at step %d)\n",
                          inc.training_time_lost_seconds, inc.resume_step, inc.step_at_failure);
  }
  absl::StrAppendFormat(&out, "== %s: step %d, %d attempt(s), %d incident(s), %.2f s lost, ETTR %.3f, %.1f s wall ==\n",
                        JobPhaseName(st.phase), st.last_completed_step, st.attempt, st.incidents.size(),
                        st.training_time_lost_seconds, st.ettr,
                        static_cast<double>((st.finished_at ? st.finished_at : origin) - origin) / 1e9);
  return out;
}

}  // namespace peregrine
