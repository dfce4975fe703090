// LocalCluster pod creation under a controller SIGKILL: a controller process killed after
// starting a pod's process but before saving its pid, or after saving the intent but
// before starting anything, is followed by a controller on the same state directory that
// creates the same pod. The pod must have exactly one process, the adopted one when it
// was started. The "controller" is a forked child of the test that runs LocalCluster and
// SIGKILLs itself at the point (LocalClusterOptions::launched_hook_for_test); the "agent"
// is a real shell process named by its argv (the pod's --log-dir).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <dirent.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/local/local_cluster.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

constexpr char kPod[] = "crash-m0";

TrainingJob Job() {
  TrainingJob job;
  job.metadata.namespace_ = "default";
  job.metadata.name = "crash";
  return job;
}

LocalClusterOptions Options(const testing::TempDir& dir) {
  LocalClusterOptions o;
  o.state_dir = dir.Path("state");
  // The agent: a shell that stays up until signalled (its argv names the pod).
  o.agent_binary = dir.Write("fake-agent.sh", "#!/bin/sh\nwhile :; do sleep 1; done\n", /*executable=*/true);
  o.controller_address = "127.0.0.1:1";
  return o;
}

// Live processes whose argv carries the pod's log directory under `state_dir`: the pod's
// agent processes (its `sleep` children have their own argv).
std::vector<pid_t> AgentProcesses(const std::string& state_dir, const std::string& pod) {
  const std::string marker = absl::StrCat(state_dir, "/logs/", pod);
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::ifstream in(absl::StrCat("/proc/", pid, "/cmdline"));
    std::stringstream buf;
    buf << in.rdbuf();
    std::string cmdline = buf.str();
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(absl::StrCat(" ", marker, " ")) == std::string::npos) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') continue;
    out.push_back(static_cast<pid_t>(pid));
  }
  closedir(proc);
  return out;
}

// Whatever a failing test left of the pod's processes is killed (sessions included).
struct KillLeftovers {
  std::string state_dir;
  ~KillLeftovers() {
    for (pid_t pid : AgentProcesses(state_dir, kPod)) SignalSession(pid, SIGKILL);
  }
};

// Runs a controller in a child process that creates kPod and SIGKILLs itself when
// `kill_at` says so; returns once the child is dead.
void CrashingController(const LocalClusterOptions& base, bool kill_after_launch) {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    LocalClusterOptions o = base;
    if (kill_after_launch) {
      o.launched_hook_for_test = [](const std::string&) { raise(SIGKILL); };
    }
    auto cluster = LocalCluster::Create(o);
    if (!cluster.ok()) _exit(3);
    if (!kill_after_launch) {
      // The intent is saved and the launch never happens: the pod table says "starting"
      // and there is no launch record (what a SIGKILL right after that save leaves).
      std::ofstream(o.state_dir + "/pods.json")
          << R"({"nextMachine": 1, "quarantined": [], "pods": [{"name": "crash-m0", "job": "default/crash",)"
          << R"( "machineId": "0", "pid": 0, "startTicks": 0, "state": "starting", "exited": false, "exitReason": ""}]})";
      raise(SIGKILL);
    }
    (void)(*cluster)->CreatePod(Job(), PodToCreate{kPod, PodRole::kActive, 0, ""});
    _exit(4);  // the hook did not fire
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
}

TEST_CASE("LocalCluster: a controller killed between starting a pod and saving its pid adopts that pod on restart", "[integration]") {
  testing::TempDir dir("peregrine-local-crash");
  const LocalClusterOptions options = Options(dir);
  KillLeftovers leftovers{options.state_dir};
  CrashingController(options, /*kill_after_launch=*/true);
  // The agent the dead controller started runs on, in its own session.
  REQUIRE(testing::Eventually([&] { return AgentProcesses(options.state_dir, kPod).size() == 1; }));
  const pid_t started = AgentProcesses(options.state_dir, kPod)[0];

  auto cluster = LocalCluster::Create(options);
  REQUIRE(cluster.ok());
  // The restarted controller's round re-creates the pod it wants: nothing new is started.
  REQUIRE((*cluster)->CreatePod(Job(), PodToCreate{kPod, PodRole::kActive, 0, ""}).ok());
  const std::vector<pid_t> agents = AgentProcesses(options.state_dir, kPod);
  CHECK(agents == std::vector<pid_t>{started});
  CHECK((*cluster)->AgentPid(kPod) == started);
  auto pods = (*cluster)->ListPods(Job());
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].name == kPod);
  CHECK((*pods)[0].running);
  CHECK((*pods)[0].machine_id == "0");

  // Another restart sees the same pod (the adopted pid was saved).
  cluster->reset();
  auto again = LocalCluster::Create(options);
  REQUIRE(again.ok());
  CHECK((*again)->AgentPid(kPod) == started);
  (*again)->TearDown(2000);
  CHECK(AgentProcesses(options.state_dir, kPod).empty());
}

TEST_CASE("LocalCluster: a pod saved as starting with no process started is created once on restart", "[integration]") {
  testing::TempDir dir("peregrine-local-crash");
  const LocalClusterOptions options = Options(dir);
  KillLeftovers leftovers{options.state_dir};
  CrashingController(options, /*kill_after_launch=*/false);
  CHECK(AgentProcesses(options.state_dir, kPod).empty());

  auto cluster = LocalCluster::Create(options);
  REQUIRE(cluster.ok());
  auto before = (*cluster)->ListPods(Job());
  REQUIRE(before.ok());
  CHECK(before->empty());  // the entry without a process is dropped, not reported as a pod
  REQUIRE((*cluster)->CreatePod(Job(), PodToCreate{kPod, PodRole::kActive, 0, ""}).ok());
  REQUIRE((*cluster)->CreatePod(Job(), PodToCreate{kPod, PodRole::kActive, 0, ""}).ok());
  REQUIRE(testing::Eventually([&] { return AgentProcesses(options.state_dir, kPod).size() == 1; }));
  const std::vector<pid_t> agents = AgentProcesses(options.state_dir, kPod);
  CHECK((*cluster)->AgentPid(kPod) == agents[0]);
  auto pods = (*cluster)->ListPods(Job());
  REQUIRE(pods.ok());
  REQUIRE(pods->size() == 1);
  CHECK((*pods)[0].machine_id == "1");  // machine ids are never reused
  (*cluster)->TearDown(2000);
  CHECK(AgentProcesses(options.state_dir, kPod).empty());
}

TEST_CASE("LocalCluster: a launch record that is not one is refused with a clear error", "[unit]") {
  testing::TempDir dir("peregrine-local-crash");
  const LocalClusterOptions options = Options(dir);
  KillLeftovers leftovers{options.state_dir};
  dir.Write("state/pods/crash-m0.pid", "garbage\n");
  dir.Write("state/pods.json",
            R"({"nextMachine": 1, "quarantined": [], "pods": [{"name": "crash-m0", "job": "default/crash",)"
            R"( "machineId": "0", "pid": 0, "startTicks": 0, "state": "starting", "exited": false, "exitReason": ""}]})");
  auto cluster = LocalCluster::Create(options);
  REQUIRE_FALSE(cluster.ok());
  CHECK(cluster.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(cluster.status().message()), Catch::Contains("crash-m0.pid"));
}

}  // namespace
}  // namespace peregrine
