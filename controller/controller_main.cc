// peregrine-controller: the Peregrine operator.
//
//   peregrine-controller --local JOB.yaml [--scenario NAME [--at-step N]] [--state-dir DIR]
//
// --local runs the embedded local cluster: every machine of the job is a local process
// group running peregrine-agent, training is sim-trainer on the CPU stand-in for NCCL.
// The job runs to completion; the timeline of incidents is printed at the end.
// SIGINT (Ctrl-C) stops the job and every pod; SIGTERM stops only the controller and
// leaves training running, as a controller restart would (run it again with the same
// --state-dir to pick the job up where it is).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "controller/job_parser.h"
#include "controller/kube/kube_command.h"
#include "controller/local/final_digests.h"
#include "controller/local/local_mode.h"
#include "controller/local/scenario.h"

namespace {

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

constexpr char kUsage[] =
    "usage: peregrine-controller --local JOB.yaml [options]\n"
    "  --local FILE        run the TrainingJob in FILE on the embedded local cluster\n"
    "  --state-dir DIR     persisted state (default .peregrine/<namespace>-<name>)\n"
    "  --bin-dir DIR       where peregrine-agent and sim-trainer are (default: this binary's dir)\n"
    "  --scenario NAME     inject a fault (or a broken code update) mid-run: kill-machine, crash,\n"
    "                      crash-once, code-update-rollback, nan, sdc, xid, nic-flap, nic-flap-twice,\n"
    "                      failslow-slow-rank, failslow-congested-link, failslow-rank-and-link,\n"
    "                      failslow-two-slow-ranks, failslow-jitter, hang-pp-stage\n"
    "  --at-step N         the scenario's first step once every rank completed step N (default 30)\n"
    "  --grpc-port N       agents' port (default: the persisted one, or any free port)\n"
    "  --http-port N       /healthz, /metrics and the peregrinectl API (default: any free port)\n"
    "  --heartbeat-ms N    agent heartbeat interval (default 500)\n"
    "  --timeout-s N       give up (exit 1) if the job has not finished after N seconds (default 600)\n"
    "Without --local the controller runs against the Kubernetes API (see --help without --local).\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "peregrine-controller: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Abseil's deadlock detection (on in Debian's build of the library) keeps a lock-order
  // graph over every absl::Mutex the process takes, gRPC's included: a few percent of the
  // controller's CPU with thousands of agent streams, for a debugging aid.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Without --local: the Kubernetes operator (controller/kube_command.h).
  if (std::none_of(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--local"; })) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (std::find(args.begin(), args.end(), "--help") != args.end() || std::find(args.begin(), args.end(), "-h") != args.end()) {
      std::fputs(peregrine::KubeMainUsage().c_str(), stdout);
      std::fputs(kUsage, stdout);
      return 0;
    }
    auto options = peregrine::ParseKubeMainFlags(args, [](std::string_view name) -> std::optional<std::string> {
      const char* v = std::getenv(std::string(name).c_str());
      return v == nullptr ? std::nullopt : std::optional<std::string>(v);
    });
    if (!options.ok()) return Fail(absl::StrCat(options.status().message(), "\n", peregrine::KubeMainUsage()));
    signal(SIGINT, OnSignal);
    signal(SIGTERM, OnSignal);
    signal(SIGPIPE, SIG_IGN);
    return peregrine::RunKubeMain(*options, g_signal);
  }
  std::string job_file, state_dir, bin_dir, scenario_name;
  int at_step = 30, grpc_port = 0, http_port = 0, heartbeat_ms = 500, timeout_s = 600;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Fail(absl::StrCat(arg, ": needs a value (or unknown flag)\n", kUsage));
    const std::string value = argv[++i];
    auto number = [&](int* out) { return absl::SimpleAtoi(value, out) && *out >= 0; };
    if (arg == "--local") {
      job_file = value;
    } else if (arg == "--state-dir") {
      state_dir = value;
    } else if (arg == "--bin-dir") {
      bin_dir = value;
    } else if (arg == "--scenario") {
      scenario_name = value;
    } else if (arg == "--at-step") {
      if (!number(&at_step)) return Fail(absl::StrCat("--at-step: not a step number: ", value));
    } else if (arg == "--grpc-port") {
      if (!number(&grpc_port)) return Fail(absl::StrCat("--grpc-port: not a port: ", value));
    } else if (arg == "--http-port") {
      if (!number(&http_port)) return Fail(absl::StrCat("--http-port: not a port: ", value));
    } else if (arg == "--heartbeat-ms") {
      if (!number(&heartbeat_ms) || heartbeat_ms == 0) return Fail(absl::StrCat("--heartbeat-ms: ", value));
    } else if (arg == "--timeout-s") {
      if (!number(&timeout_s) || timeout_s == 0) return Fail(absl::StrCat("--timeout-s: ", value));
    } else {
      return Fail(absl::StrCat("unknown flag ", arg, "\n", kUsage));
    }
  }
  if (job_file.empty()) return Fail(absl::StrCat("--local is required\n", kUsage));

  auto job = peregrine::LoadTrainingJobFile(job_file);
  if (!job.ok()) return Fail(std::string(job.status().message()));
  if (state_dir.empty()) state_dir = absl::StrCat(".peregrine/", job->metadata.namespace_, "-", job->metadata.name);
  if (bin_dir.empty()) bin_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  std::optional<peregrine::Scenario> scenario;
  if (!scenario_name.empty()) {
    auto s = peregrine::ScenarioByName(scenario_name, *job);
    if (!s.ok()) return Fail(std::string(s.status().message()));
    s->at_step = static_cast<uint64_t>(at_step);
    scenario = *s;
  }

  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);

  peregrine::LocalModeOptions options;
  options.state_dir = state_dir;
  options.bin_dir = bin_dir;
  options.grpc_port = grpc_port;
  options.http_port = http_port;
  options.heartbeat_ms = heartbeat_ms;
  auto local = peregrine::LocalMode::Start(*job, options);
  if (!local.ok()) return Fail(local.status().ToString());
  peregrine::LocalMode& mode = **local;
  std::printf("peregrine-controller: job %s/%s (%d machines x %d GPUs, TP=%d PP=%d DP=%d) in local mode\n",
              job->metadata.namespace_.c_str(), job->metadata.name.c_str(), job->spec.machines,
              job->spec.gpus_per_machine, job->spec.parallelism.tensor, job->spec.parallelism.pipeline,
              job->spec.parallelism.data);
  std::printf("  agents: 127.0.0.1:%d   http: http://127.0.0.1:%d (/metrics, peregrinectl)   state: %s\n",
              mode.grpc_port(), mode.http_port(), state_dir.c_str());
  std::fflush(stdout);

  peregrine::ScenarioRunOptions run_options;
  run_options.progress = [](const std::string& line) {
    std::printf("  %s\n", line.c_str());
    std::fflush(stdout);
  };
  run_options.stop_requested = [] { return g_signal.load() != 0; };
  run_options.timeout_ms = static_cast<int64_t>(timeout_s) * 1000;
  auto run = peregrine::RunScenario(mode, scenario, run_options);
  if (!run.ok()) std::fprintf(stderr, "peregrine-controller: %s\n", run.status().ToString().c_str());
  const int sig = g_signal.load();
  const bool keep_training = sig == SIGTERM;
  const peregrine::JobStatus st = mode.controller().Snapshot();
  std::fputs(peregrine::FormatTimeline(mode.controller().Timeline(), st, st.started_at).c_str(), stdout);
  if (st.phase == peregrine::JobPhase::kSucceeded) {
    const auto digests = peregrine::ReadFinalDigests(state_dir);
    if (!digests.empty()) std::printf("== final state ==\n%s", peregrine::FormatFinalDigests(digests).c_str());
  }
  std::fflush(stdout);
  mode.Shutdown(/*teardown=*/!keep_training);
  if (keep_training) {
    std::printf("peregrine-controller: stopped; training keeps running (run again with --state-dir %s)\n",
                state_dir.c_str());
    return 0;
  }
  return st.phase == peregrine::JobPhase::kSucceeded ? 0 : 1;
}
