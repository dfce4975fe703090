#include "controller/local_mode.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "controller/controller_metrics.h"
#include "controller/http_server.h"
#include "controller/local_cluster.h"
#include "controller/recovery_policy.h"
#include "sim/fault/fault_control.h"

namespace peregrine {
namespace {

int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The per-job token agents present; kept across controller restarts.
absl::StatusOr<std::string> EnsureToken(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (in && std::getline(in, token) && !token.empty()) return token;
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd());
  token = absl::StrFormat("%016x%016x", gen(), gen());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    out << token << "\n";
  }
  chmod(tmp.c_str(), 0600);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError(absl::StrCat("cannot write ", path));
  return token;
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
  const std::string token_path = options.state_dir + "/token";
  auto token = EnsureToken(token_path);
  if (!token.ok()) return token.status();
  const std::string faults = options.state_dir + "/faults.bin";
  if (!std::filesystem::exists(faults)) {
    if (auto s = sim::CreateFaultTable(faults); !s.ok()) return s;
  }

  impl->metrics = std::make_unique<ControllerMetrics>();
  impl->metrics->SetLeader(true);  // local mode has one replica
  impl->registry = std::make_unique<AgentRegistry>(absl::StrCat("local-", getpid()));
  impl->registry->SetHeartbeatIntervalMs(static_cast<uint32_t>(options.heartbeat_ms));
  impl->service = std::make_unique<AgentServiceImpl>(impl->registry.get(), UnixNanos);

  // The agents dial this port again after a controller restart, so it is persisted.
  const std::string ports_path = options.state_dir + "/controller.json";
  int port = options.grpc_port != 0 ? options.grpc_port : LoadPersistedPort(ports_path);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options.host, ":", port), grpc::InsecureServerCredentials(), &impl->grpc_port);
  builder.RegisterService(impl->service.get());
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 16 << 20);
  impl->grpc_server = builder.BuildAndStart();
  if (!impl->grpc_server || impl->grpc_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for agents on ", options.host, ":", port));
  }

  LocalClusterOptions copts;
  copts.state_dir = options.state_dir;
  copts.agent_binary = options.bin_dir + "/peregrine-agent";
  copts.controller_address = absl::StrCat(options.host, ":", impl->grpc_port);
  copts.token_file = token_path;
  copts.path_prepend = {options.bin_dir};
  copts.pod_env["PEREGRINE_SIM_FAULTS"] = faults;
  // Fail-slow tracking: agents preload the NCCL hook into training when the build has it.
  if (const std::string hook = options.bin_dir + "/../lib/libperegrine_nccl.so"; std::filesystem::exists(hook)) {
    copts.pod_env["PEREGRINE_NCCL_HOOK"] = std::filesystem::weakly_canonical(hook).string();
  }
  // Stand-in machines: each agent inspects its own kernel log and sysfs tree there.
  const std::string sim_machines = options.state_dir + "/machines";
  copts.pod_env["PEREGRINE_SIM_MACHINE_ROOT"] = sim_machines;
  copts.heartbeat_ms = options.heartbeat_ms;
  auto cluster = LocalCluster::Create(copts);
  if (!cluster.ok()) return cluster.status();
  impl->cluster = std::move(*cluster);

  JobController::Options jopts;
  jopts.decision = options.decision;
  jopts.now = UnixNanos;
  jopts.agent_token = *token;
  impl->controller = std::make_unique<JobController>(job, impl->cluster.get(), impl->registry.get(),
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
  {
    std::ofstream out(ports_path + ".tmp", std::ios::trunc);
    out << nlohmann::json{{"grpcPort", impl->grpc_port},
                          {"httpPort", impl->http_port},
                          {"http", absl::StrCat("http://", options.host, ":", impl->http_port)},
                          {"pid", getpid()}}
               .dump(2);
  }
  std::rename((ports_path + ".tmp").c_str(), ports_path.c_str());
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

void LocalMode::Shutdown(bool teardown) {
  if (!impl_ || impl_->shut_down) return;
  impl_->shut_down = true;
  if (impl_->http) impl_->http->Stop();
  if (impl_->controller) impl_->controller->Stop();
  if (teardown && impl_->cluster) impl_->cluster->TearDown(impl_->job.spec.fault_tolerance.restart_grace_seconds * 1000);
  if (impl_->grpc_server) {
    impl_->grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    impl_->grpc_server->Wait();
  }
}

namespace {

constexpr const char* kScenarioNames[] = {
    "kill-machine",        "crash",
    "crash-once",          "code-update-rollback",
    "nan",                 "sdc",
    "xid",                 "nic-flap",
    "nic-flap-twice",      "failslow-slow-rank",
    "failslow-congested-link", "failslow-rank-and-link",
    "failslow-two-slow-ranks", "failslow-jitter",
    "hang-pp-stage"};

ScenarioStep AtStep(std::vector<FaultRequest> faults) {
  ScenarioStep step;
  step.faults = std::move(faults);
  return step;
}

}  // namespace

std::string ScenarioNames() { return absl::StrJoin(kScenarioNames, ", "); }

absl::StatusOr<Scenario> ScenarioByName(const std::string& name, const TrainingJob& job) {
  const int machines = job.spec.machines;
  Scenario s;
  s.name = name;
  if (name == "kill-machine") {
    FaultRequest kill;
    kill.kind = "kill";
    kill.slot = machines > 2 ? 2 : machines - 1;
    s.steps.push_back(AtStep({kill}));
    return s;
  }
  if (name == "failslow-slow-rank") {  // one GPU computes 3x slower: detected, localized, no restart
    FaultRequest slow;
    slow.kind = "slow";
    slow.slot = machines > 1 ? 1 : 0;
    slow.local_rank = 0;
    slow.factor = 3;
    s.steps.push_back(AtStep({slow}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-congested-link") {  // 20 ms per message between the machines of DP groups 0 and 1
    FaultRequest link;
    link.kind = "link";
    link.slot = 0;
    link.peer_slot = machines > 1 ? 1 : 0;
    link.delay_us = 20000;
    s.steps.push_back(AtStep({link}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-rank-and-link") {  // a 3x slower GPU and a congested link at once: both named
    FaultRequest slow;
    slow.kind = "slow";
    slow.slot = machines > 2 ? 2 : 0;
    slow.local_rank = 1;
    slow.factor = 3;
    FaultRequest link;
    link.kind = "link";
    link.slot = 0;
    link.peer_slot = machines > 1 ? 1 : 0;
    link.delay_us = 20000;
    s.steps.push_back(AtStep({slow, link}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-two-slow-ranks") {  // two GPUs on different machines, sharing no group, 3x slower
    FaultRequest first;
    first.kind = "slow";
    first.slot = machines > 1 ? 1 : 0;
    first.local_rank = 1;
    first.factor = 3;
    FaultRequest second = first;
    second.slot = machines > 2 ? 2 : 0;
    second.local_rank = 0;
    s.steps.push_back(AtStep({first, second}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-jitter") {  // every GPU's compute +-5% per iteration: no fail-slow may be reported
    std::vector<FaultRequest> all;
    for (int m = 0; m < machines; ++m) {
      FaultRequest jitter;
      jitter.kind = "jitter";
      jitter.slot = m;
      jitter.fraction = 0.05;
      all.push_back(jitter);
    }
    s.steps.push_back(AtStep(all));
    s.at_step = 10;
    return s;
  }
  if (name == "xid") {  // a fatal Xid (79, GPU fallen off the bus) on one machine's GPU 0
    FaultRequest xid;
    xid.kind = "xid";
    xid.slot = machines > 1 ? 1 : 0;
    xid.local_rank = 0;
    xid.xid = 79;
    s.steps.push_back(AtStep({xid}));
    return s;
  }
  if (name == "nic-flap" || name == "nic-flap-twice") {
    // One NIC flap is tolerated; a second flap episode of the same NIC within
    // networkAlarmWindowSeconds evicts the machine.
    FaultRequest flap;
    flap.kind = "nic-flap";
    flap.slot = machines > 2 ? 2 : machines - 1;
    s.steps.push_back(AtStep({flap}));
    if (name == "nic-flap-twice") {
      ScenarioStep second = AtStep({flap});
      second.trigger = ScenarioStep::Trigger::kNetworkAlarmEnded;
      s.steps.push_back(second);
    }
    return s;
  }
  // One machine of the last pipeline stage hangs in its compute (demo layout: slot 2 holds
  // stage 1 of dp 0): its stage-0 peers wait for gradients in recv, the other pipeline waits
  // in the DP all-reduce, whatever compute the hang hits; stack aggregation evicts the pipeline group.
  if (name == "hang-pp-stage") {
    FaultRequest hang;
    hang.kind = "hang";
    hang.slot = machines > 2 ? 2 : machines - 1;
    hang.local_rank = -1;
    s.steps.push_back(AtStep({hang}));
    return s;
  }
  if (name == "crash" || name == "crash-once") {
    FaultRequest crash;
    crash.kind = "crash";
    crash.slot = machines > 1 ? 1 : 0;
    crash.local_rank = 0;
    s.steps.push_back(AtStep({crash}));
    if (name == "crash-once") {  // one-off: cleared once the incident opened
      FaultRequest clear = crash;
      clear.kind = "clear";
      ScenarioStep step = AtStep({clear});
      step.trigger = ScenarioStep::Trigger::kIncidentOpened;
      s.steps.push_back(step);
    }
    return s;
  }
  // An urgent update to a broken revision: the job's own command with a flag it does not
  // know, so every rank exits at start-up (sim-trainer and argparse programs alike).
  if (name == "code-update-rollback") {
    CodeUpdateRequest broken;
    broken.revision = absl::StrCat(job.spec.code.revision.empty() ? "v1" : job.spec.code.revision, "-broken");
    broken.command = job.spec.code.command;
    broken.command->push_back("--no-such-flag");
    broken.urgent = true;
    ScenarioStep step;
    step.code_update = broken;
    s.steps.push_back(step);
    return s;
  }
  if (name == "nan") {  // one machine's GPUs contribute NaN to every collective
    FaultRequest nan;
    nan.kind = "nan";
    nan.slot = machines > 1 ? 1 : 0;
    nan.local_rank = -1;
    s.steps.push_back(AtStep({nan}));
    return s;
  }
  if (name == "sdc") {  // one machine's backward kernel silently corrupts gradients: replay finds it
    FaultRequest sdc;
    sdc.kind = "sdc";
    sdc.slot = machines > 1 ? 1 : 0;
    sdc.local_rank = -1;
    s.steps.push_back(AtStep({sdc}));
    return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--scenario: unknown scenario '", name, "' (known: ", ScenarioNames(), ")"));
}

absl::StatusOr<LocalMode::ScenarioRun> LocalMode::RunScenario(const std::optional<Scenario>& scenario,
                                                               const ScenarioRunOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  JobController& controller = *impl_->controller;
  ScenarioRun run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  size_t next = 0;
  uint64_t printed_step = 0;
  // Trigger state: incidents opened so far at the previous step; the previous step's
  // machine and whether its agent was seen reporting a network alarm since.
  uint64_t incident_id_at_step = 0;
  std::string step_machine;
  bool alarm_seen = false;
  auto network_alarm_active = [&]() {
    for (const AgentObservation& a : impl_->registry->Observe(impl_->key)) {
      if (a.machine_id != step_machine || !a.connected) continue;
      for (const InspectionObservation& o : a.inspections) {
        if (IsNetworkAlarm(o)) return true;
      }
    }
    return false;
  };
  auto trigger_holds = [&](const ScenarioStep& step, const JobStatus& st) {
    switch (step.trigger) {
      case ScenarioStep::Trigger::kAtStep:
        return st.phase == JobPhase::kRunning && st.last_completed_step >= scenario->at_step &&
               (!step.code_update ||
                (!st.version_history.empty() && st.version_history.back().outcome == "Healthy"));
      case ScenarioStep::Trigger::kIncidentOpened:
        return st.next_incident_id > incident_id_at_step;
      case ScenarioStep::Trigger::kNetworkAlarmEnded: {
        const bool recorded = std::any_of(st.network_alarms.begin(), st.network_alarms.end(),
                                          [&](const NetworkAlarmRecord& r) { return r.machine_id == step_machine; });
        const bool active = network_alarm_active();
        alarm_seen = alarm_seen || active;
        return recorded && alarm_seen && !active && st.phase == JobPhase::kRunning;
      }
    }
    return false;
  };
  while (true) {
    run.status = controller.Snapshot();
    const JobStatus& st = run.status;
    if (st.last_completed_step >= printed_step + 20 || (st.last_completed_step > 0 && printed_step == 0)) {
      printed_step = st.last_completed_step;
      say(absl::StrFormat("step %d  phase %s  attempt %d  standby %d/%d  ETTR %.3f", st.last_completed_step,
                          JobPhaseName(st.phase), st.attempt, st.standby_ready, st.standby_desired, st.ettr));
    }
    if (scenario && next < scenario->steps.size() && trigger_holds(scenario->steps[next], st)) {
      const ScenarioStep& step = scenario->steps[next];
      std::vector<std::string> done;
      std::string machine;
      for (const FaultRequest& f : step.faults) {
        if (machine.empty()) {
          machine = f.slot >= 0 && f.slot < static_cast<int>(st.slots.size()) ? st.slots[f.slot].machine_id : f.machine;
        }
        auto result = Inject(f);
        if (!result.ok()) {
          return absl::Status(result.status().code(), absl::StrFormat("scenario %s step %d: inject %s: %s", scenario->name,
                                                                      next + 1, f.kind, result.status().message()));
        }
        done.push_back(*result);
      }
      if (step.code_update) {
        auto accepted = controller.UpdateJob(ApplyCodeUpdate(controller.job(), *step.code_update));
        if (!accepted.ok()) {
          return absl::Status(accepted.status().code(), absl::StrFormat("scenario %s step %d: code update: %s",
                                                                        scenario->name, next + 1,
                                                                        accepted.status().message()));
        }
        done.push_back(absl::StrFormat("urgent code update to revision %s (generation %d)",
                                       step.code_update->revision, *accepted));
        controller.Note(absl::StrCat("Scenario: ", done.back()));
      }
      const std::string description = absl::StrJoin(done, "; ");
      say(absl::StrFormat("scenario %s step %d at step %d: %s", scenario->name, next + 1, st.last_completed_step,
                          description));
      run.steps.push_back(ScenarioStepRecord{st, description});
      incident_id_at_step = st.next_incident_id;
      step_machine = machine;
      alarm_seen = false;
      ++next;
      continue;
    }
    if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) {
      run.finished = true;
      return run;
    }
    if (options.stop_requested && options.stop_requested()) return run;
    if (std::chrono::steady_clock::now() > deadline) return run;
    // A network-alarm trigger watches the agents, not the status: look again soon.
    const bool watching_agents = scenario && next < scenario->steps.size() &&
                                 scenario->steps[next].trigger == ScenarioStep::Trigger::kNetworkAlarmEnded;
    const uint64_t step_now = st.last_completed_step;
    const JobPhase phase_now = st.phase;
    const uint64_t incidents_now = st.next_incident_id;
    controller.WaitFor(
        [&](const JobStatus& s) {
          return s.last_completed_step != step_now || s.phase != phase_now || s.next_incident_id != incidents_now;
        },
        watching_agents ? 100 : 250);
  }
}

std::string FormatTimeline(const std::vector<TimelineEntry>& timeline, const JobStatus& st, int64_t origin) {
  std::string out = "== timeline ==\n";
  for (const TimelineEntry& e : timeline) {
    absl::StrAppendFormat(&out, "  +%7.2fs  %s\n", static_cast<double>(e.at - origin) / 1e9, e.what);
  }
  out += "== incidents ==\n";
  for (const Incident& inc : st.incidents) {
    absl::StrAppendFormat(&out, "  #%d %s: %s\n", inc.id, inc.kind, inc.signal);
    absl::StrAppendFormat(&out, "     detected +%.2fs, decided +%.2fs (%s), training resumed +%.2fs\n",
                          static_cast<double>(inc.detected_at - origin) / 1e9,
                          static_cast<double>(inc.decided_at - origin) / 1e9, inc.decision,
                          inc.resumed_at ? static_cast<double>(inc.resumed_at - origin) / 1e9 : 0.0);
    for (const std::string& a : inc.actions) absl::StrAppendFormat(&out, "     - %s\n", a);
    for (const DiagnosisStageRecord& r : inc.diagnosis) {
      absl::StrAppendFormat(&out, "     diagnosis %s +%.2fs..+%.2fs: %s%s%s\n", r.stage,
                            static_cast<double>(r.started_at - origin) / 1e9,
                            static_cast<double>(r.finished_at - origin) / 1e9, r.verdict.empty() ? "running" : r.verdict,
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
