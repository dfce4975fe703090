// Chaos for the operator: the real peregrine-controller binary (a separate process)
// reconciles a TrainingJob against FakeKubeApiServer, which lives in the test process
// and so survives the controller; the test plays scheduler, kubelet and agents
// (tests/e2e/kube/harness.h). The controller is SIGKILLed
//   - at random moments (seeded; PEREGRINE_CHAOS_SEED, PEREGRINE_CHAOS_KILLS), while a
//     machine fails in the middle, and
//   - right after the k-th write request the API server handles once a machine failed
//     (the write happened, its response is never read), for each k of the recovery
//     (PEREGRINE_CHAOS_MAX_WRITE_KILLS bounds k),
// restarted each time, and must then finish the job with: each failed machine evicted
// exactly once, at most one delete per pod, only failed machines' nodes cordoned, and no
// standby churn (no pods beyond the slots, the pool and one replacement per eviction).
// The counts are printed ("chaos: ...") for scripts/chaos.sh.
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/free_port.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "tests/e2e/kube/harness.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::e2e {
namespace {

using testing::FakeKubeApiServer;

constexpr char kNs[] = "train";
constexpr char kJobs[] = "trainingjobs.peregrine.dev";
constexpr char kJob[] = "chaos";
constexpr int kMachines = 3;
constexpr char kKubeletAgent[] = "chaos-test-kubelet";  // User-Agent of the test's own client

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int n = 0;
  return v != nullptr && absl::SimpleAtoi(v, &n) ? n : fallback;
}

// The controller's --log-level (PEREGRINE_CHAOS_LOG_LEVEL, default error).
std::string LogLevel() {
  const char* v = std::getenv("PEREGRINE_CHAOS_LOG_LEVEL");
  return v != nullptr && *v != '\0' ? v : "error";
}

json Manifest() {
  return json{{"apiVersion", "peregrine.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", kJob}, {"namespace", kNs}}},
              {"spec",
               {{"machines", kMachines},
                {"gpusPerMachine", 1},
                {"parallelism", {{"tensor", 1}, {"pipeline", 1}, {"data", kMachines}}},
                {"codeVersion", {{"image", "example.com/train:1"}, {"command", json::array({"python", "train.py"})}}},
                {"template",
                 {{"spec", {{"containers", json::array({json{{"name", "trainer"}, {"image", "example.com/train:1"}}})}}}}},
                {"standby", {{"min", 1}, {"max", 1}}},
                {"faultTolerance", {{"restartGraceSeconds", 1}}}}}};
}

// What one chaos run counted.
struct Counts {
  int kills = 0, restarts = 0, deletes = 0, evictions = 0, cordons = 0, violations = 0;
  std::vector<std::string> problems;
  void Violation(std::string what) {
    ++violations;
    problems.push_back(std::move(what));
  }
  void Add(const Counts& o) {
    kills += o.kills, restarts += o.restarts, deletes += o.deletes, evictions += o.evictions;
    cordons += o.cordons, violations += o.violations;
    problems.insert(problems.end(), o.problems.begin(), o.problems.end());
  }
  std::string Line(const std::string& what) const {
    return absl::StrCat("chaos: ", what, ": kills=", kills, " restarts=", restarts, " deletes=", deletes,
                        " evictions=", evictions, " cordons=", cordons, " violations=", violations);
  }
};

// The API server, the kubelet and agents (in this process) and the controller process.
class ChaosEnv {
 public:
  ChaosEnv() {
    testing::KubeResourceType secrets;
    secrets.version = "v1";
    secrets.plural = "secrets";
    secrets.kind = "Secret";
    server_.RegisterResource(secrets);
    REQUIRE(server_.Start().ok());
    kube::Config config;
    config.server = server_.base_url();
    config.source = "test";
    kube::RestClientOptions client_options;
    client_options.user_agent = kKubeletAgent;  // the fake kubelet's writes are not the controller's
    auto c = kube::RestClient::Create(config, client_options);
    REQUIRE(c.ok());
    client_ = *std::move(c);
    auto port = PickFreePort();
    REQUIRE(port.ok());
    grpc_port_ = *port;
    kubeconfig_ = dir_.Write("kubeconfig", absl::StrCat("apiVersion: v1\nkind: Config\n"
                                                        "clusters: [{name: fake, cluster: {server: \"",
                                                        server_.base_url(), "\"}}]\n"
                                                        "users: [{name: chaos, user: {token: chaos}}]\n"
                                                        "contexts: [{name: fake, context: {cluster: fake, user: chaos}}]\n"
                                                        "current-context: fake\n"));
  }
  ~ChaosEnv() {
    server_.SetWriteHookForTest(nullptr);
    if (kubelet_) kubelet_->Stop();
    controller_.reset();
    server_.Stop();
  }

  void StartController() {
    testing::ChildProcess::Options o;
    o.argv = {testing::BinaryPath("bin/peregrine-controller"), "--kubeconfig", kubeconfig_, "--namespace", kNs,
              "--agent-image", "example.com/peregrine-agent:test", "--agent-key-file",
              dir_.Write("agent.key", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n"),
              "--controller-address",
              absl::StrCat("127.0.0.1:", grpc_port_), "--grpc-port", absl::StrCat(grpc_port_), "--http-port", "0",
              "--metrics-port", "0", "--resync-s", "1", "--log-level", LogLevel()};
    o.stderr_path = dir_.Path(absl::StrCat("controller-", starts_++, ".log"));
    controller_ = testing::ChildProcess::Start(o);
    REQUIRE(controller_ != nullptr);
    pid_.store(controller_->pid());
  }
  // SIGKILL; the process is reaped by Restart or the destructor.
  void Kill() {
    const pid_t pid = pid_.exchange(0);
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  void Restart() {
    Kill();
    controller_.reset();  // reaps it
    StartController();
  }
  void StartKubelet() {
    kubelet_ = std::make_unique<FakeKubelet>(&server_, client_.get(), kNs,
                                             [port = grpc_port_] { return absl::StrCat("127.0.0.1:", port); },
                                             &script_);
  }
  void Submit() { REQUIRE(server_.CreateForTest(kJobs, kNs, Manifest()).ok()); }

  std::optional<JobStatus> Status() {
    auto obj = server_.GetForTest(kJobs, kNs, kJob);
    if (!obj.ok() || !obj->contains("status") || !(*obj)["status"].contains("phase")) return std::nullopt;
    auto st = JobStatusFromJson((*obj)["status"].dump());
    return st.ok() ? std::optional<JobStatus>(*st) : std::nullopt;
  }
  bool WaitStatus(const std::function<bool(const JobStatus&)>& pred, absl::Duration deadline = absl::Seconds(180)) {
    return Eventually([&] {
      auto st = Status();
      return st.has_value() && pred(*st);
    }, deadline);
  }
  // The machine of the pod in `slot` dies; returns its node.
  std::string FailSlot(int slot) {
    auto st = Status();
    REQUIRE(st.has_value());
    const std::string pod = st->slots[slot].pod;
    const std::string node = kubelet_->NodeOf(pod);
    REQUIRE(kubelet_->KillPod(pod));
    failed_nodes_.insert(node);
    failed_pods_.insert(pod);
    return node;
  }

  // Checks the end state and counts what the API server saw.
  Counts Check() {
    Counts c;
    auto st = Status();
    if (!st.has_value() || st->phase != JobPhase::kSucceeded) c.Violation("the job did not reach Succeeded");
    std::map<std::string, int> evicted;
    if (st.has_value()) {
      for (const Eviction& e : st->evicted) ++evicted[e.machine_id];
    }
    for (const auto& [machine, n] : evicted) {
      c.evictions += n;
      if (!failed_nodes_.count(machine)) c.Violation(absl::StrCat("healthy machine ", machine, " evicted"));
      if (n != 1) c.Violation(absl::StrCat("machine ", machine, " evicted ", n, " times"));
    }
    for (const std::string& node : failed_nodes_) {
      if (!evicted.count(node)) c.Violation(absl::StrCat("failed machine ", node, " not evicted"));
    }
    std::map<std::string, int> deletes;
    for (const std::string& pod : server_.DeleteRequestsForTest("pods")) ++deletes[pod];
    for (const auto& [pod, n] : deletes) {
      c.deletes += n;
      if (n > 1) c.Violation(absl::StrCat("pod ", pod, " deleted ", n, " times"));
    }
    auto nodes = client_->List(NodesPath(), {});
    REQUIRE(nodes.ok());
    for (const json& node : (*nodes)["items"]) {
      const std::string name = node["metadata"]["name"];
      if (node.contains("spec") && node["spec"].value("unschedulable", false)) {
        ++c.cordons;
        if (!failed_nodes_.count(name)) c.Violation(absl::StrCat("healthy node ", name, " cordoned"));
      }
    }
    for (const std::string& node : failed_nodes_) {
      auto n = server_.GetForTest("nodes", "", node);
      if (!n.ok() || !(*n)["spec"].value("unschedulable", false)) c.Violation(absl::StrCat("failed node ", node, " not cordoned"));
    }
    // Standby churn: every pod ever created is a slot's first pod, the pool's first
    // standby, or one replacement per eviction (pods are never deleted by anyone but the
    // controller here, so created = alive + deleted).
    std::set<std::string> created;
    for (const auto& [pod, n] : deletes) created.insert(pod);
    auto pods = client_->List(PodsPath(kNs), {});
    REQUIRE(pods.ok());
    for (const json& pod : (*pods)["items"]) created.insert(pod["metadata"]["name"].get<std::string>());
    const size_t expected = kMachines + 1 + failed_nodes_.size();
    if (created.size() > expected) {
      c.Violation(absl::StrCat(created.size(), " pods created, expected at most ", expected, " (standby churn)"));
    }
    return c;
  }

  // The newest controller's stderr (for a failure's message).
  std::string ControllerLog() {
    return starts_ == 0 ? "" : testing::ReadFileIfExists(dir_.Path(absl::StrCat("controller-", starts_ - 1, ".log")));
  }
  FakeKubeApiServer& server() { return server_; }
  TrainingScript& script() { return script_; }

 private:
  testing::TempDir dir_{"peregrine-chaos"};
  FakeKubeApiServer server_;
  std::unique_ptr<kube::RestClient> client_;
  int grpc_port_ = 0;
  std::string kubeconfig_;
  TrainingScript script_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<testing::ChildProcess> controller_;
  std::atomic<pid_t> pid_{0};
  int starts_ = 0;
  std::set<std::string> failed_nodes_, failed_pods_;
};

bool RunningFrom(const JobStatus& st, uint64_t step) {
  return st.phase == JobPhase::kRunning && st.last_completed_step >= step && st.standby_ready >= 1;
}

// Random kills while a machine fails in the middle.
Counts RandomKills(uint64_t seed, int kills) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> delay_ms(50, 2500);
  ChaosEnv env;
  env.StartKubelet();
  env.StartController();
  env.Submit();
  const bool running = env.WaitStatus([](const JobStatus& st) { return RunningFrom(st, 2); });
  INFO("controller log: " << env.ControllerLog());
  REQUIRE(running);
  Counts c;
  const int fail_at = kills / 3;
  for (int i = 0; i < kills; ++i) {
    if (i == fail_at) env.FailSlot(1);
    absl::SleepFor(absl::Milliseconds(delay_ms(rng)));  // the kill point: a random moment
    env.Restart();
    ++c.kills;
    ++c.restarts;
  }
  // Let it finish: 20 more steps.
  REQUIRE(env.WaitStatus([](const JobStatus& st) { return st.phase == JobPhase::kRunning && st.incidents.size() >= 1 && st.incidents.back().resumed_at != 0; }));
  auto st = env.Status();
  env.script().finish_step.store(st->last_completed_step + 20);
  env.WaitStatus([](const JobStatus& st) { return st.phase == JobPhase::kSucceeded; });
  c.Add(env.Check());
  return c;
}

// A kill right after the k-th write request of the controller (its User-Agent; the fake
// kubelet's writes do not count) that the API server handles once the machine failed.
// Returns false when the recovery finished with fewer than k writes.
bool KillAfterWrite(int k, Counts* c) {
  ChaosEnv env;
  env.StartKubelet();
  env.StartController();
  env.Submit();
  const bool running = env.WaitStatus([](const JobStatus& st) { return RunningFrom(st, 2); });
  INFO("controller log: " << env.ControllerLog());
  REQUIRE(running);
  std::atomic<int> writes{0};
  std::atomic<bool> killed{false};
  env.server().SetWriteHookForTest(
      [&](const std::string&, const std::string&, const std::string&, const std::string& user_agent) {
        if (!absl::StartsWith(user_agent, "peregrine-controller/")) return;  // the fake kubelet's
        if (++writes == k && !killed.exchange(true)) env.Kill();
      });
  env.FailSlot(1);
  const bool recovered = env.WaitStatus(
      [&](const JobStatus& st) {
        return killed.load() || (!st.incidents.empty() && st.incidents.back().resumed_at != 0 && st.standby_ready >= 1);
      },
      absl::Seconds(120));
  REQUIRE(recovered);
  env.server().SetWriteHookForTest(nullptr);
  if (!killed.load()) return false;
  ++c->kills;
  env.Restart();
  ++c->restarts;
  const bool resumed = env.WaitStatus([](const JobStatus& st) {
    return st.phase == JobPhase::kRunning && !st.incidents.empty() && st.incidents.back().resumed_at != 0;
  });
  INFO("killed after write " << k << "; controller log: " << env.ControllerLog());
  REQUIRE(resumed);
  auto st = env.Status();
  env.script().finish_step.store(st->last_completed_step + 10);
  env.WaitStatus([](const JobStatus& st) { return st.phase == JobPhase::kSucceeded; });
  Counts one = env.Check();
  for (std::string& p : one.problems) p = absl::StrCat("killed after write ", k, ": ", p);
  c->Add(one);
  return true;
}

void Report(const Counts& c, const std::string& what) {
  std::cout << c.Line(what) << std::endl;
  for (const std::string& p : c.problems) std::cout << "chaos: violation: " << p << std::endl;
}

TEST_CASE("Chaos: the controller SIGKILLed at random moments finishes the job with one eviction per failed machine", "[e2e]") {
  const uint64_t seed = static_cast<uint64_t>(EnvInt("PEREGRINE_CHAOS_SEED", 20240611));
  const int kills = EnvInt("PEREGRINE_CHAOS_KILLS", 6);
  std::cout << "chaos: seed=" << seed << " kills=" << kills << std::endl;
  const Counts c = RandomKills(seed, kills);
  Report(c, "random kills");
  CHECK(c.violations == 0);
}

TEST_CASE("Chaos: the controller SIGKILLed right after each API write of a recovery finishes it once", "[e2e]") {
  const int max_k = EnvInt("PEREGRINE_CHAOS_MAX_WRITE_KILLS", 4);
  Counts c;
  int covered = 0;
  for (int k = 1; k <= max_k; ++k) {
    if (!KillAfterWrite(k, &c)) break;
    ++covered;
  }
  Report(c, absl::StrCat("kill after each of the first ", covered, " writes of the recovery"));
  CHECK(covered >= 1);
  CHECK(c.violations == 0);
}

}  // namespace
}  // namespace peregrine::e2e
