#include "bench/controller_load/load_run.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/free_port.h"
#include "bench/controller_load/load_kubelet.h"
#include "bench/controller_load/proc_stats.h"
#include "controller/status_json.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/child_process.h"

// The phases of a run, and where each figure comes from:
//   1. start the fake API server (this process), the kubelet and the agent fleet, then
//      the controller process; submit the TrainingJob; wait until every agent is
//      connected, every slot is trained by an agent on one attempt and the job is Running
//      (`startup`); wait `settle` more.
//   2. steady window: the controller's CPU from /proc/<pid>/stat (sampled every 500 ms
//      by a thread, so the busiest interval is known too), its VmRSS at the end, the
//      API requests the server counted, this process's CPU for comparison.
//   3. burst: the recorder (fed by the server's write observer) is armed with the burst
//      time and the failed pods, then every burst machine fails (LoadKubelet::FailMachine).
//      The recorder timestamps, in the server, the first controller write that reacts:
//      a status write showing phase Recovering, a pod delete, a pod create (and Events);
//      `decision` is the first of those three. The run waits until every failed pod was
//      deleted, the status went back to Running, and every slot is held by a connected
//      agent on the newest attempt (`recovery`). CPU over [burst, recovery], requests
//      counted over the same span, VmHWM at the end.

namespace peregrine::loadtest {
namespace {

using nlohmann::json;
using testing::FakeKubeApiServer;

constexpr char kNs[] = "load";
constexpr char kJob[] = "load";
constexpr char kJobs[] = "trainingjobs.peregrine.dev";

// A work directory: given, or a temp dir removed at the end.
class WorkDir {
 public:
  static absl::StatusOr<std::unique_ptr<WorkDir>> Make(const std::string& given) {
    if (!given.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(given, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot create ", given, ": ", ec.message()));
      return std::unique_ptr<WorkDir>(new WorkDir(given, false));
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "peregrine-load-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("cannot create a temp dir");
    return std::unique_ptr<WorkDir>(new WorkDir(tmpl, true));
  }
  ~WorkDir() {
    std::error_code ec;
    if (remove_) std::filesystem::remove_all(path_, ec);
  }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }
  absl::StatusOr<std::string> Write(const std::string& name, const std::string& text) const {
    std::ofstream out(Path(name));
    out << text;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", Path(name)));
    return Path(name);
  }

 private:
  WorkDir(std::string path, bool remove) : path_(std::move(path)), remove_(remove) {}
  const std::string path_;
  const bool remove_;
};

// The controller's CPU time every 500 ms.
class CpuSampler {
 public:
  explicit CpuSampler(pid_t pid) : pid_(pid), thread_([this] { Loop(); }) {}
  ~CpuSampler() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  // Average and busiest interval over [from, to], as shares of one core.
  std::pair<double, double> Share(absl::Time from, absl::Time to) const {
    absl::MutexLock lock(&mu_);
    const Sample* first = nullptr;
    const Sample* last = nullptr;
    double max = 0;
    for (size_t i = 0; i < samples_.size(); ++i) {
      if (samples_[i].at < from || samples_[i].at > to) continue;
      if (first == nullptr) first = &samples_[i];
      if (last != nullptr) max = std::max(max, CoreShare(last->cpu, samples_[i].cpu, samples_[i].at - last->at));
      last = &samples_[i];
    }
    if (first == nullptr || last == first) return {0, 0};
    return {CoreShare(first->cpu, last->cpu, last->at - first->at), max};
  }

 private:
  struct Sample {
    absl::Time at;
    absl::Duration cpu;
  };
  void Loop() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      absl::StatusOr<absl::Duration> cpu = ProcessCpuTime(pid_);
      if (cpu.ok()) samples_.push_back(Sample{absl::Now(), *cpu});
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(500));
    }
  }
  const pid_t pid_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Timestamps the controller's writes that react to the burst, in the API server.
class RecoveryRecorder {
 public:
  void Arm(absl::Time burst, std::set<std::string> failed) {
    absl::MutexLock lock(&mu_);
    burst_ = burst;
    failed_ = std::move(failed);
  }
  void OnWrite(const FakeKubeApiServer::WriteRecord& w) {
    const absl::Time now = absl::Now();
    absl::MutexLock lock(&mu_);
    if (burst_ == absl::InfiniteFuture() || !absl::StartsWith(w.user_agent, "peregrine-controller")) return;
    const bool ok = w.code >= 200 && w.code < 300;
    if (w.resource == "pods" && w.verb == "delete" && ok) {
      Mark(first_delete_, now);
      if (failed_.count(w.name) > 0 && deleted_.insert(w.name).second && deleted_.size() == failed_.size()) {
        Mark(all_deleted_, now);
      }
    } else if (w.resource == "pods" && w.verb == "create" && ok) {
      Mark(first_create_, now);
    } else if (absl::StrContains(w.resource, "events") && w.verb == "create" && ok) {
      Mark(first_event_, now);
    } else if (w.resource == std::string(kJobs) + "/status" && ok && w.response != nullptr) {
      const json& status = w.response->contains("status") ? (*w.response)["status"] : json();
      const std::string phase = status.is_object() ? status.value("phase", "") : "";
      if (phase == "Recovering") Mark(first_recovering_, now);
      if (phase == "Running" && first_recovering_.has_value()) Mark(running_again_, now);
    }
  }
  void Fill(LoadReport& r) const {
    absl::MutexLock lock(&mu_);
    auto since = [this](const std::optional<absl::Time>& t) -> std::optional<absl::Duration> {
      if (!t.has_value()) return std::nullopt;
      return *t - burst_;
    };
    r.first_reacting_status = since(first_recovering_);
    r.first_event = since(first_event_);
    r.first_delete = since(first_delete_);
    r.first_create = since(first_create_);
    r.all_failed_deleted = since(all_deleted_);
    r.running_again = since(running_again_);
    r.failed_pods_deleted = static_cast<int>(deleted_.size());
    for (const auto& d : {r.first_reacting_status, r.first_delete, r.first_create}) {
      if (d.has_value() && (!r.decision.has_value() || *d < *r.decision)) r.decision = d;
    }
  }
  bool Recovered() const {
    absl::MutexLock lock(&mu_);
    return all_deleted_.has_value() && running_again_.has_value();
  }

 private:
  static void Mark(std::optional<absl::Time>& slot, absl::Time now) {
    if (!slot.has_value()) slot = now;
  }
  mutable absl::Mutex mu_;
  absl::Time burst_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::set<std::string> failed_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> deleted_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> first_recovering_ ABSL_GUARDED_BY(mu_), first_event_ ABSL_GUARDED_BY(mu_),
      first_delete_ ABSL_GUARDED_BY(mu_), first_create_ ABSL_GUARDED_BY(mu_), all_deleted_ ABSL_GUARDED_BY(mu_),
      running_again_ ABSL_GUARDED_BY(mu_);
};

json JobManifest(const LoadTestOptions& o) {
  json spec = {{"machines", o.machines},
               {"gpusPerMachine", o.gpus_per_machine},
               {"parallelism", {{"tensor", o.gpus_per_machine}, {"pipeline", 1}, {"data", o.machines}}},
               {"codeVersion", {{"image", "example.com/train:1"}, {"command", json::array({"python", "train.py"})}}},
               {"template",
                {{"spec", {{"containers", json::array({json{{"name", "trainer"}, {"image", "example.com/train:1"}}})}}}}}};
  if (o.standbys >= 0) spec["standby"] = {{"min", o.standbys}, {"max", o.standbys}};
  return json{{"apiVersion", "peregrine.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", kJob}, {"namespace", kNs}}},
              {"spec", std::move(spec)}};
}

double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double v = 0;
  in >> v;
  return v;
}

RequestCounts Minus(const RequestCounts& after, const RequestCounts& before) {
  RequestCounts out;
  for (const auto& [key, n] : after) {
    auto it = before.find(key);
    const int d = n - (it == before.end() ? 0 : it->second);
    if (d > 0) out[key] = d;
  }
  return out;
}

// Slots held: active agents that are connected on `attempt`.
struct SlotView {
  uint64_t max_attempt = 0;
  int held = 0;           // active, connected, on max_attempt
  int connected = 0;
  std::set<std::string> holders;
};
SlotView Slots(const AgentFleet& fleet) {
  SlotView v;
  std::vector<AgentSnapshot> agents = fleet.Snapshot();
  for (const AgentSnapshot& a : agents) v.max_attempt = std::max(v.max_attempt, a.attempt);
  for (const AgentSnapshot& a : agents) {
    v.connected += a.connected ? 1 : 0;
    if (a.active && a.connected && a.attempt == v.max_attempt && a.attempt > 0) {
      ++v.held;
      v.holders.insert(a.pod);
    }
  }
  return v;
}

// Polls `done` every 200 ms until it holds or `deadline` passes.
bool WaitFor(const std::function<bool()>& done, absl::Duration deadline) {
  const absl::Time end = absl::Now() + deadline;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(200));
  }
  return true;
}

}  // namespace

namespace {
std::string Seconds(const std::optional<absl::Duration>& d);
std::string MiB(uint64_t kib);
}  // namespace

absl::StatusOr<LoadReport> RunControllerLoad(const LoadTestOptions& o) {
  auto say = [&o](const std::string& line) {
    if (o.progress) o.progress(line);
  };
  if (o.machines < 1 || o.gpus_per_machine < 1) return absl::InvalidArgumentError("machines and gpus per machine must be >= 1");
  if (!(o.burst_fraction > 0 && o.burst_fraction <= 1)) return absl::InvalidArgumentError("burst fraction must be in (0, 1]");
  LoadReport r;
  r.machines = o.machines;
  r.gpus_per_machine = o.gpus_per_machine;
  r.streams_per_connection = o.streams_per_connection;
  r.ticker_threads = o.ticker_threads;
  r.load_average_start = LoadAverage();
  absl::StatusOr<std::unique_ptr<WorkDir>> dir = WorkDir::Make(o.work_dir);
  if (!dir.ok()) return dir.status();

  testing::FakeKubeApiServerOptions server_options;
  server_options.history_limit = o.api_history_limit;
  server_options.worker_threads = 64;
  FakeKubeApiServer server(server_options);
  for (const auto& [plural, kind] : {std::pair{"secrets", "Secret"}, std::pair{"configmaps", "ConfigMap"}}) {
    testing::KubeResourceType type;
    type.version = "v1";
    type.plural = plural;
    type.kind = kind;
    server.RegisterResource(type);
  }
  if (absl::Status s = server.Start(); !s.ok()) return absl::InternalError(absl::StrCat("fake API server: ", s.ToString()));
  absl::StatusOr<int> grpc_port = PickFreePort();
  if (!grpc_port.ok()) return grpc_port.status();
  const std::string target = absl::StrCat("127.0.0.1:", *grpc_port);

  AgentFleetOptions fleet_options;
  fleet_options.target = target;
  fleet_options.ticker_threads = o.ticker_threads;
  fleet_options.streams_per_connection = o.streams_per_connection;
  fleet_options.step_time = o.step_time;
  fleet_options.seed = o.seed;
  AgentFleet fleet(fleet_options);
  LoadKubelet kubelet(&server, &fleet, kNs);
  RecoveryRecorder recorder;
  server.SetWriteObserverForTest([&kubelet, &recorder](const FakeKubeApiServer::WriteRecord& w) {
    kubelet.OnWrite(w);
    recorder.OnWrite(w);
  });
  // Whatever happens below, the observer goes before the kubelet and the recorder do.
  struct Unobserve {
    FakeKubeApiServer* server;
    ~Unobserve() { server->SetWriteObserverForTest(nullptr); }
  } unobserve{&server};

  absl::StatusOr<std::string> kubeconfig = (*dir)->Write(
      "kubeconfig", absl::StrCat("apiVersion: v1\nkind: Config\n"
                                 "clusters: [{name: fake, cluster: {server: \"", server.base_url(), "\"}}]\n"
                                 "users: [{name: load, user: {token: load}}]\n"
                                 "contexts: [{name: fake, context: {cluster: fake, user: load}}]\n"
                                 "current-context: fake\n"));
  if (!kubeconfig.ok()) return kubeconfig.status();
  absl::StatusOr<std::string> key =
      (*dir)->Write("agent.key", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n");
  if (!key.ok()) return key.status();
  testing::ChildProcess::Options co;
  co.argv = {o.controller_binary, "--kubeconfig", *kubeconfig, "--namespace", kNs, "--agent-image",
             "example.com/peregrine-agent:test", "--agent-key-file", *key, "--controller-address", target,
             "--grpc-port", absl::StrCat(*grpc_port), "--http-port", "0", "--metrics-port", "0", "--log-level",
             o.log_level};
  co.stderr_path = (*dir)->Path("controller.log");
  std::unique_ptr<testing::ChildProcess> controller = testing::ChildProcess::Start(co);
  if (controller == nullptr) return absl::InternalError(absl::StrCat("cannot start ", o.controller_binary));
  const pid_t pid = controller->pid();
  CpuSampler sampler(pid);
  auto controller_log_tail = [&]() {
    std::ifstream in(co.stderr_path);
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    return s.size() > 2000 ? s.substr(s.size() - 2000) : s;
  };
  auto alive = [&]() { return ::kill(pid, 0) == 0 && !controller->Wait(std::chrono::milliseconds(0)).has_value(); };

  // 1. Startup.
  const absl::Time submitted = absl::Now();
  if (auto created = server.CreateForTest(kJobs, kNs, JobManifest(o)); !created.ok()) {
    return absl::InternalError(absl::StrCat("submit the TrainingJob: ", created.status().ToString()));
  }
  say(absl::StrCat("submitted a TrainingJob of ", o.machines, " machines x ", o.gpus_per_machine, " GPUs"));
  std::string job_phase;
  absl::Time last_say = absl::Now();
  const bool started = WaitFor(
      [&]() {
        if (!alive()) return true;
        absl::StatusOr<json> job = server.GetForTest(kJobs, kNs, kJob);
        job_phase = job.ok() && (*job)["status"].is_object() ? (*job)["status"].value("phase", "") : "";
        const SlotView v = Slots(fleet);
        const FleetCounts c = fleet.Counts();
        if (absl::Now() - last_say > absl::Seconds(15)) {
          last_say = absl::Now();
          say(absl::StrCat("  startup: ", kubelet.PodsStarted(), " pods running, ", c.connected, "/", c.agents,
                           " agents connected, ", v.held, "/", o.machines, " slots trained, job ",
                           job_phase.empty() ? "-" : job_phase));
        }
        return job_phase == "Running" && v.held == o.machines && c.connected == c.agents;
      },
      o.startup_deadline);
  if (!alive()) return absl::InternalError(absl::StrCat("the controller exited during startup:\n", controller_log_tail()));
  if (!started) {
    const FleetCounts c = fleet.Counts();
    return absl::DeadlineExceededError(absl::StrCat("startup: after ", absl::FormatDuration(o.startup_deadline), " ",
                                                    kubelet.PodsStarted(), " pods running, ", c.connected, "/",
                                                    c.agents, " agents connected, ", Slots(fleet).held, "/",
                                                    o.machines, " slots trained, job phase '", job_phase, "'"));
  }
  r.startup = absl::Now() - submitted;
  r.standbys = fleet.Counts().agents - o.machines;
  say(absl::StrCat("every agent connected and training after ", absl::FormatDuration(absl::Trunc(r.startup, absl::Milliseconds(100))),
                   " (", r.standbys, " standbys); settling ", absl::FormatDuration(o.settle)));
  absl::SleepFor(o.settle);

  // 2. Steady window.
  const RequestCounts requests_before = server.RequestCountsForTest();
  const uint64_t heartbeats_before = fleet.Counts().heartbeats;
  absl::StatusOr<absl::Duration> self_before = ProcessCpuTime(::getpid());
  const absl::Time steady_start = absl::Now();
  absl::SleepFor(o.steady);
  const absl::Time steady_end = absl::Now();
  absl::StatusOr<absl::Duration> self_after = ProcessCpuTime(::getpid());
  r.steady_window = steady_end - steady_start;
  std::tie(r.steady_cpu_cores, r.steady_cpu_max_cores) = sampler.Share(steady_start, steady_end);
  if (self_before.ok() && self_after.ok()) r.generator_cpu_cores = CoreShare(*self_before, *self_after, r.steady_window);
  r.steady_requests = Minus(server.RequestCountsForTest(), requests_before);
  r.heartbeats_per_second = static_cast<uint64_t>(
      static_cast<double>(fleet.Counts().heartbeats - heartbeats_before) / absl::ToDoubleSeconds(r.steady_window));
  if (absl::StatusOr<ProcMemory> m = ProcessMemory(pid); m.ok()) r.steady_rss_kib = m->rss_kib;
  say(absl::StrCat("steady window done: controller at ", absl::StrFormat("%.2f", r.steady_cpu_cores), " cores"));

  // 3. Burst: every k-th slot's machine, k = 1 / fraction.
  const SlotView before = Slots(fleet);
  r.connected_before_burst = before.connected;
  r.burst_machines = std::max(1, static_cast<int>(std::lround(o.machines * o.burst_fraction)));
  std::vector<std::string> holders(before.holders.begin(), before.holders.end());
  std::set<std::string> failed;
  const double stride = static_cast<double>(holders.size()) / r.burst_machines;
  for (int i = 0; i < r.burst_machines; ++i) failed.insert(holders[static_cast<size_t>(i * stride)]);
  const RequestCounts requests_at_burst = server.RequestCountsForTest();
  const absl::Time burst = absl::Now();
  recorder.Arm(burst, failed);
  for (const std::string& pod : failed) {
    if (absl::Status s = kubelet.FailMachine(pod); !s.ok()) return absl::InternalError(absl::StrCat("fail ", pod, ": ", s.ToString()));
  }
  r.burst_apply = absl::Now() - burst;
  say(absl::StrCat("failed ", failed.size(), " machines in ", absl::FormatDuration(r.burst_apply)));
  const bool recovered = WaitFor(
      [&]() {
        if (!alive() || !recorder.Recovered()) return !alive();
        const SlotView v = Slots(fleet);
        if (v.held != o.machines || v.max_attempt <= before.max_attempt) return false;
        for (const std::string& pod : failed) {
          if (v.holders.count(pod) > 0) return false;
        }
        return true;
      },
      o.recovery_deadline);
  const absl::Time recovered_at = absl::Now();
  if (!alive()) return absl::InternalError(absl::StrCat("the controller exited during the recovery:\n", controller_log_tail()));
  recorder.Fill(r);
  const SlotView after = Slots(fleet);
  if (!recovered) {
    return absl::DeadlineExceededError(absl::StrCat(
        "recovery: after ", absl::FormatDuration(o.recovery_deadline), " ", r.failed_pods_deleted, "/", failed.size(),
        " failed pods deleted, ", after.held, "/", o.machines, " slots held on attempt ", after.max_attempt,
        (r.running_again.has_value() ? ", status Running again" : ", status not Running again")));
  }
  r.recovery = recovered_at - burst;
  std::tie(r.burst_cpu_cores, r.burst_cpu_max_cores) = sampler.Share(burst, recovered_at);
  r.recovery_requests = Minus(server.RequestCountsForTest(), requests_at_burst);
  for (const std::string& pod : after.holders) r.replaced += before.holders.count(pod) == 0 ? 1 : 0;
  if (absl::StatusOr<ProcMemory> m = ProcessMemory(pid); m.ok()) {
    r.peak_rss_kib = m->peak_kib;
    r.end_rss_kib = m->rss_kib;
  }
  if (absl::StatusOr<json> job = server.GetForTest(kJobs, kNs, kJob); job.ok() && job->contains("status")) {
    if (absl::StatusOr<JobStatus> st = JobStatusFromJson((*job)["status"].dump()); st.ok()) {
      r.evictions = static_cast<int>(st->evicted.size());
      r.job_recoveries = st->recoveries;
    }
  }
  r.kubelet_errors = static_cast<int>(kubelet.Errors().size());
  r.fleet = fleet.Counts();
  r.load_average_end = LoadAverage();
  // The headline figures before the shutdown, so a run whose shutdown fails keeps them.
  say(absl::StrFormat(
      "recovered: steady %.2f cores (busiest %.2f) for %d heartbeats/s, %.1f us of controller CPU per heartbeat; "
      "RSS %s steady, %s peak; burst -> decision %s, every slot held %.3f s",
      r.steady_cpu_cores, r.steady_cpu_max_cores, r.heartbeats_per_second,
      r.heartbeats_per_second > 0 ? r.steady_cpu_cores * 1e6 / static_cast<double>(r.heartbeats_per_second) : 0.0,
      MiB(r.steady_rss_kib), MiB(r.peak_rss_kib), Seconds(r.decision), absl::ToDoubleSeconds(r.recovery)));
  say("recovered; stopping the agents and the controller");

  fleet.Shutdown();
  r.open_streams_after_shutdown = fleet.Counts().open_streams;
  ::kill(pid, SIGTERM);
  if (!controller->Wait(std::chrono::seconds(30)).has_value()) say("the controller did not exit 30 s after SIGTERM: killed");
  controller.reset();  // SIGKILLs its process group if still there, reaps it
  return r;
}

namespace {

std::string Seconds(const std::optional<absl::Duration>& d) {
  return d.has_value() ? absl::StrFormat("%.3f s", absl::ToDoubleSeconds(*d)) : "never";
}
std::string MiB(uint64_t kib) { return absl::StrFormat("%.0f MiB", static_cast<double>(kib) / 1024); }
std::string Verdict(bool ok) { return ok ? "within" : "OVER"; }

std::string Requests(const RequestCounts& counts, double per_seconds) {
  std::string out;
  for (const auto& [key, n] : counts) {
    absl::StrAppend(&out, "    ", absl::StrFormat("%-8s %-40s %7d", key.first, key.second, n));
    if (per_seconds > 0) absl::StrAppend(&out, absl::StrFormat("  (%.2f/s)", n / per_seconds));
    absl::StrAppend(&out, "\n");
  }
  return out.empty() ? "    none\n" : out;
}

}  // namespace

std::string FormatLoadReport(const LoadReport& r) {
  std::string out;
  absl::StrAppend(&out, absl::StrFormat(
      "controller load test: %d agents (%d GPUs, %d per machine) + %d standbys in one TrainingJob; %d machines failed at once\n",
      r.machines, r.machines * r.gpus_per_machine, r.gpus_per_machine, r.standbys, r.burst_machines));
  absl::StrAppend(&out, absl::StrFormat(
      "  agents: %d per gRPC connection, %d ticker threads + gRPC's callback pool; load average %.1f at start, %.1f at end\n",
      r.streams_per_connection, r.ticker_threads, r.load_average_start, r.load_average_end));
  absl::StrAppend(&out, absl::StrFormat("  startup: every agent connected and training %.1f s after the job was submitted\n",
                                        absl::ToDoubleSeconds(r.startup)));
  absl::StrAppend(&out, absl::StrFormat("  %-48s %-14s %s\n", "figure", "measured", "budget"));
  auto row = [&out](const std::string& name, const std::string& value, const std::string& budget) {
    absl::StrAppend(&out, absl::StrFormat("  %-48s %-14s %s\n", name, value, budget));
  };
  row(absl::StrFormat("controller CPU, steady (%.0f s window)", absl::ToDoubleSeconds(r.steady_window)),
      absl::StrFormat("%.2f cores", r.steady_cpu_cores),
      absl::StrCat("< 1 core: ", Verdict(r.steady_cpu_cores < 1.0)));
  row("controller CPU, steady, busiest ~0.5 s", absl::StrFormat("%.2f cores", r.steady_cpu_max_cores), "");
  row(absl::StrFormat("controller CPU, burst -> recovered (%.1f s)", absl::ToDoubleSeconds(r.recovery)),
      absl::StrFormat("%.2f cores", r.burst_cpu_cores), "");
  row("controller CPU, burst, busiest ~0.5 s", absl::StrFormat("%.2f cores", r.burst_cpu_max_cores), "");
  row("controller RSS, steady (VmRSS)", MiB(r.steady_rss_kib), absl::StrCat("< 1 GiB: ", Verdict(r.steady_rss_kib < 1024 * 1024)));
  row("controller RSS, peak (VmHWM)", MiB(r.peak_rss_kib), absl::StrCat("< 1 GiB: ", Verdict(r.peak_rss_kib < 1024 * 1024)));
  row("burst -> decision (first reacting API write)", Seconds(r.decision),
      absl::StrCat("< 2 s: ", Verdict(r.decision.has_value() && *r.decision < absl::Seconds(2))));
  row("  status write showing Recovering", Seconds(r.first_reacting_status), "");
  row("  first Event", Seconds(r.first_event), "");
  row("  first pod delete", Seconds(r.first_delete), "");
  row("  first pod create", Seconds(r.first_create), "");
  row("  every failed pod deleted", Seconds(r.all_failed_deleted), "");
  row("  status Running again", Seconds(r.running_again), "");
  row("  every slot held on the new attempt", Seconds(r.recovery), "");
  row("burst applied (pods failed) within", Seconds(r.burst_apply), "");
  row("load generator CPU, steady (agents + fake API)", absl::StrFormat("%.2f cores", r.generator_cpu_cores), "");
  row("heartbeats sent per second, steady", absl::StrCat(r.heartbeats_per_second), "");
  absl::StrAppend(&out, absl::StrFormat("  API requests during the recovery (%.1f s, burst -> every slot held):\n",
                                        absl::ToDoubleSeconds(r.recovery)));
  absl::StrAppend(&out, Requests(r.recovery_requests, 0));
  absl::StrAppend(&out, absl::StrFormat("  API requests in the steady window (%.0f s):\n", absl::ToDoubleSeconds(r.steady_window)));
  absl::StrAppend(&out, Requests(r.steady_requests, absl::ToDoubleSeconds(r.steady_window)));
  absl::StrAppend(&out, absl::StrFormat(
      "  checks: %d/%d connected before the burst; %d/%d failed pods deleted; %d slots held by replacements; "
      "%d evictions, %d recoveries in status; %d kubelet errors; streams started %d, ended by errors %d, "
      "heartbeats dropped %d, rejects %d; %d streams open after shutdown\n",
      r.connected_before_burst, r.machines + r.standbys, r.failed_pods_deleted, r.burst_machines, r.replaced, r.evictions,
      r.job_recoveries, r.kubelet_errors, r.fleet.streams_started, r.fleet.streams_failed, r.fleet.dropped_heartbeats,
      r.fleet.rejects, r.open_streams_after_shutdown));
  return out;
}

}  // namespace peregrine::loadtest
