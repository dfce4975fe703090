// Chaos for local mode: the real `peregrine-controller --local` process runs a 3-machine
// job (one warm standby) whose pods are real peregrine-agent processes training with
// sim-trainer; the test SIGKILLs the controller at random moments (seeded;
// PEREGRINE_CHAOS_SEED, PEREGRINE_CHAOS_KILLS) and restarts it on the same state
// directory, while a machine dies in the middle (its agent's whole session SIGKILLed).
// After every restart the agents must reconnect (training progresses under the new
// controller) and no pod may have two agents or more training ranks than GPUs; at the end
// the job must succeed with the failed machine evicted exactly once and no standby churn
// (no pods beyond the slots, the pool and one replacement per eviction). The counts are
// printed ("chaos: ...") for scripts/chaos.sh --local.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "controller/core/job_state.h"
#include "controller/local/local_cluster.h"
#include "controller/status_json.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

constexpr int kMachines = 3;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int n = 0;
  return v != nullptr && absl::SimpleAtoi(v, &n) ? n : fallback;
}

std::string JobYaml(int steps) {
  return absl::StrCat(R"(apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata:
  name: chaos
  namespace: default
spec:
  machines: 3
  gpusPerMachine: 1
  parallelism: {tensor: 1, pipeline: 1, data: 3}
  launch: PerGPU
  codeVersion:
    image: sim-trainer
    command: ["sim-trainer", "--steps", ")",
                      steps, R"(", "--micro-batches", "2", "--hidden", "64", "--compute-ms", "20"]
    revision: "v1"
  standby: {min: 1, max: 1}
  faultTolerance: {restartGraceSeconds: 2}
  checkpoint: {intervalSteps: 10, backupCopies: 1}
)");
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// One process of /proc: its argv (NULs as spaces), session and whether it is a zombie.
struct Proc {
  pid_t pid = 0;
  pid_t session = 0;
  bool zombie = false;
  std::string cmdline;
};

std::vector<Proc> Processes() {
  std::vector<Proc> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    Proc p;
    p.pid = static_cast<pid_t>(pid);
    p.cmdline = ReadAll(absl::StrCat("/proc/", pid, "/cmdline"));
    for (char& c : p.cmdline) {
      if (c == '\0') c = ' ';
    }
    const std::string stat = ReadAll(absl::StrCat("/proc/", pid, "/stat"));
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(stat.substr(close + 2));
    std::string state, ppid, pgrp, session;
    fields >> state >> ppid >> pgrp >> session;
    p.zombie = state == "Z";
    p.session = static_cast<pid_t>(std::strtol(session.c_str(), nullptr, 10));
    out.push_back(std::move(p));
  }
  closedir(proc);
  return out;
}

struct Counts {
  int kills = 0, restarts = 0, evictions = 0, duplicates = 0, violations = 0;
  std::vector<std::string> problems;
  void Violation(std::string what) {
    ++violations;
    problems.push_back(std::move(what));
  }
  std::string Line(const std::string& what) const {
    return absl::StrCat("chaos: ", what, ": kills=", kills, " restarts=", restarts, " evictions=", evictions,
                        " duplicates=", duplicates, " violations=", violations);
  }
};

class LocalChaosEnv {
 public:
  explicit LocalChaosEnv(int steps) {
    job_file_ = dir_.Write("job.yaml", JobYaml(steps));
    state_dir_ = dir_.Path("state");
  }
  ~LocalChaosEnv() {
    controller_.reset();
    // Whatever a failing run left: the pods' sessions and the checkpoint area.
    for (const Proc& p : Processes()) {
      if (!p.zombie && p.pid == p.session && p.cmdline.find(AgentMarker()) != std::string::npos) {
        SignalSession(p.pid, SIGKILL);
      }
    }
    std::error_code ec;
    // A killed rank leaves its stand-in NCCL area (/dev/shm/peregrine-nccl-<pod>-<pid>).
    for (const auto& [pod, pid] : killed_) std::filesystem::remove_all(absl::StrCat("/dev/shm/peregrine-nccl-", pod, "-", pid), ec);
    const auto shm = std::filesystem::read_symlink(state_dir_ + "/shm", ec);
    if (!ec && shm.string().rfind("/dev/shm/peregrine-local-", 0) == 0) std::filesystem::remove_all(shm, ec);
  }

  void StartController() {
    testing::ChildProcess::Options o;
    o.argv = {testing::BinaryPath("bin/peregrine-controller"), "--local", job_file_, "--state-dir", state_dir_,
              "--heartbeat-ms", "200", "--timeout-s", "3000"};
    o.stdout_path = dir_.Path(absl::StrCat("controller-", starts_, ".out"));
    o.stderr_path = dir_.Path(absl::StrCat("controller-", starts_, ".err"));
    ++starts_;
    controller_ = testing::ChildProcess::Start(o);
    REQUIRE(controller_ != nullptr);
  }
  void KillController() {
    if (controller_) ::kill(controller_->pid(), SIGKILL);
    controller_.reset();  // reaps it
  }
  // The controller exited by itself (the job finished).
  bool ControllerExited() {
    int status = 0;
    return controller_ && waitpid(controller_->pid(), &status, WNOHANG) == controller_->pid();
  }

  std::optional<JobStatus> Status() const {
    const std::string text = ReadAll(state_dir_ + "/status-default-chaos.json");
    if (text.empty()) return std::nullopt;
    auto st = JobStatusFromJson(text);
    return st.ok() ? std::optional<JobStatus>(*st) : std::nullopt;
  }
  bool WaitStatus(const std::function<bool(const JobStatus&)>& pred, absl::Duration limit = absl::Seconds(240)) {
    return testing::Eventually([&] {
      auto st = Status();
      return st.has_value() && pred(*st);
    }, limit);
  }

  // The machine of slot `slot` dies: every process of its pod's session is SIGKILLed.
  void FailSlot(int slot) {
    auto st = Status();
    REQUIRE(st.has_value());
    const std::string pod = st->slots[slot].pod;
    const nlohmann::json table = nlohmann::json::parse(ReadAll(state_dir_ + "/pods.json"));
    for (const auto& p : table.at("pods")) {
      if (p.at("name") == pod) {
        const pid_t pid = p.at("pid").get<pid_t>();
        REQUIRE(pid > 0);
        for (pid_t member : ProcessesInSession(pid)) killed_.push_back({pod, member});
        REQUIRE(SignalSession(pid, SIGKILL) > 0);
        failed_machines_.insert(p.at("machineId").get<std::string>());
        return;
      }
    }
    FAIL("pod " << pod << " of slot " << slot << " is not in pods.json");
  }

  // Agents per pod and training ranks per agent now: more than one agent for a pod, or
  // more ranks in a pod's session than it has GPUs, is a duplicate.
  void CountDuplicates(Counts* c) const {
    std::map<std::string, int> agents;  // pod -> live agents
    std::map<pid_t, std::string> sessions;
    const std::vector<Proc> procs = Processes();
    for (const Proc& p : procs) {
      const size_t at = p.cmdline.find(AgentMarker());
      if (p.zombie || at == std::string::npos || p.pid != p.session) continue;
      const std::string rest = p.cmdline.substr(at + AgentMarker().size());
      const std::string pod = rest.substr(0, rest.find(' '));
      ++agents[pod];
      sessions[p.pid] = pod;
    }
    std::map<pid_t, int> ranks;
    for (const Proc& p : procs) {
      if (!p.zombie && p.pid != p.session && sessions.count(p.session) &&
          p.cmdline.find("sim-trainer ") != std::string::npos) {
        ++ranks[p.session];
      }
    }
    for (const auto& [pod, n] : agents) {
      if (n > 1) {
        ++c->duplicates;
        c->Violation(absl::StrCat("pod ", pod, " has ", n, " agent processes"));
      }
    }
    for (const auto& [session, n] : ranks) {
      if (n > 1) {
        ++c->duplicates;
        c->Violation(absl::StrCat("pod ", sessions.at(session), " runs ", n, " training ranks on 1 GPU"));
      }
    }
  }

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
      if (!failed_machines_.count(machine)) c.Violation(absl::StrCat("healthy machine ", machine, " evicted"));
      if (n != 1) c.Violation(absl::StrCat("machine ", machine, " evicted ", n, " times"));
    }
    for (const std::string& m : failed_machines_) {
      if (!evicted.count(m)) c.Violation(absl::StrCat("failed machine ", m, " not evicted"));
    }
    // Every pod ever created has a log file: slots, the pool's standby, one per eviction.
    size_t created = 0;
    for (const auto& entry : std::filesystem::directory_iterator(state_dir_ + "/logs")) {
      if (entry.path().extension() == ".log") ++created;
    }
    const size_t expected = kMachines + 1 + failed_machines_.size();
    if (created > expected) {
      c.Violation(absl::StrCat(created, " pods created, expected at most ", expected, " (standby churn)"));
    }
    return c;
  }

  std::string ControllerLog() const {
    return starts_ == 0 ? "" : ReadAll(dir_.Path(absl::StrCat("controller-", starts_ - 1, ".err")));
  }

 private:
  std::string AgentMarker() const { return absl::StrCat("--log-dir ", state_dir_, "/logs/"); }

  testing::TempDir dir_{"peregrine-local-chaos"};
  std::string job_file_, state_dir_;
  std::unique_ptr<testing::ChildProcess> controller_;
  int starts_ = 0;
  std::set<std::string> failed_machines_;
  std::vector<std::pair<std::string, pid_t>> killed_;  // (pod, pid) of the failed machine
};

// Random kills while a machine fails in the middle; the step count leaves about 3 s of
// training per kill, and kills stop once the job succeeded.
Counts RandomKills(uint64_t seed, int kills) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> delay_ms(50, 2500);
  LocalChaosEnv env(/*steps=*/150 + 60 * kills);
  env.StartController();
  const bool running = env.WaitStatus([](const JobStatus& st) {
    return st.phase == JobPhase::kRunning && st.last_completed_step >= 2 && st.standby_ready >= 1;
  });
  INFO("controller log: " << env.ControllerLog());
  REQUIRE(running);
  Counts c;
  const int fail_at = kills / 3;
  for (int i = 0; i < kills; ++i) {
    if (i == fail_at) env.FailSlot(1);
    absl::SleepFor(absl::Milliseconds(delay_ms(rng)));  // the kill point: a random moment
    if (env.ControllerExited()) break;                  // the job finished
    env.KillController();
    ++c.kills;
    env.CountDuplicates(&c);
    env.StartController();
    ++c.restarts;
    // The agents reconnect: training moves on under the new controller (or it finished).
    const uint64_t step = env.Status()->last_completed_step;
    const bool progressed = env.WaitStatus([&](const JobStatus& st) {
      return st.phase == JobPhase::kSucceeded || (st.phase == JobPhase::kRunning && st.last_completed_step > step);
    });
    if (!progressed) {
      c.Violation(absl::StrCat("no progress after restart ", c.restarts, "; controller log: ", env.ControllerLog()));
      return c;
    }
    env.CountDuplicates(&c);
  }
  const bool done = env.WaitStatus([](const JobStatus& st) { return st.phase == JobPhase::kSucceeded; },
                                   absl::Seconds(900));
  if (!done) c.Violation(absl::StrCat("the job did not finish; controller log: ", env.ControllerLog()));
  // The controller tears the pods down once the job finished, then exits.
  REQUIRE(testing::Eventually([&] { return env.ControllerExited(); }, absl::Seconds(120)));
  Counts end = env.Check();
  end.kills = c.kills, end.restarts = c.restarts, end.duplicates = c.duplicates;
  end.violations += c.violations;
  end.problems.insert(end.problems.begin(), c.problems.begin(), c.problems.end());
  return end;
}

TEST_CASE("Local chaos: the local controller SIGKILLed at random moments finishes the job with one eviction and no duplicate pods", "[e2e]") {
  const uint64_t seed = static_cast<uint64_t>(EnvInt("PEREGRINE_CHAOS_SEED", 20240611));
  const int kills = EnvInt("PEREGRINE_CHAOS_KILLS", 4);
  std::cout << "chaos: seed=" << seed << " kills=" << kills << std::endl;
  const Counts c = RandomKills(seed, kills);
  std::cout << c.Line("local random kills") << std::endl;
  for (const std::string& p : c.problems) std::cout << "chaos: violation: " << p << std::endl;
  CHECK(c.kills >= kills / 3 + 1);  // the machine failed before the last kill
  CHECK(c.violations == 0);
}

}  // namespace
}  // namespace peregrine
