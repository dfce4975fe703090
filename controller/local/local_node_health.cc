#include "controller/local/local_node_health.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/durable_file.h"
#include "controller/node_health_inputs.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {

constexpr int kMaxInputsPerApply = 8;

std::string StatePath(const std::string& dir) { return absl::StrCat(dir, "/node-health.json"); }

struct RunResult {
  int exit_code = -1;
  std::string output;
  bool timed_out = false;
  bool cancelled = false;  // `cancel` was set: the group was killed
};

// Runs argv with `env` added to this process's environment, in its own process group,
// stdout and stderr into one pipe; kills the group past `timeout`, or within a second of
// `cancel` becoming true.
absl::StatusOr<RunResult> RunProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                     absl::Duration timeout, const std::atomic<bool>& cancel) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  std::vector<std::string> env_strings;
  std::map<std::string, std::string> merged;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq != std::string::npos) merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [k, v] : env) merged[k] = v;
  for (const auto& [k, v] : merged) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  RunResult r;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[4096];
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (cancel.load()) {
      r.cancelled = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (left <= absl::ZeroDuration()) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    if (poll(&p, 1, ms) <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    if (r.output.size() < (1 << 20)) r.output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  kill(-pid, SIGKILL);  // whatever of its group is left
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalNodeHealth>> LocalNodeHealth::Create(LocalNodeHealthOptions options) {
  if (auto s = ValidateNodeLifecycleOptions(options.lifecycle); !s.ok()) return s;
  if (options.gpus_per_machine < 1) return absl::InvalidArgumentError("local node health: gpus_per_machine < 1");
  if (options.clock == nullptr) return absl::InvalidArgumentError("local node health: no clock");
  std::unique_ptr<LocalNodeHealth> h(new LocalNodeHealth(std::move(options)));
  const std::string path = StatePath(h->options_.state_dir);
  std::ifstream in(path);
  absl::MutexLock lock(&h->mu_);
  if (in) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
      for (const auto& [machine, m] : j.at("machines").items()) {
        auto record = DecodeNodeHealth(machine, m.value("labels", std::map<std::string, std::string>{}),
                                       m.value("annotations", std::map<std::string, std::string>{}));
        if (!record.ok()) {
          return absl::DataLossError(absl::StrCat(path, ": machine ", machine, ": ", record.status().message()));
        }
        h->records_[machine] = *record;
      }
    } catch (const std::exception& e) {
      return absl::DataLossError(absl::StrCat(path, ": not a node health table: ", e.what()));
    }
  }
  // A sweep runs inside one Pass: one found running was cut short by the controller's exit.
  std::vector<std::pair<std::string, int>> interrupted;
  for (const auto& [machine, r] : h->records_) {
    if (r.state == NodeHealth::kSweeping) interrupted.emplace_back(machine, r.sweep_attempts);
  }
  for (const auto& [machine, attempt] : interrupted) {
    NodeInput in;
    in.kind = NodeInputKind::kSweepFailed;
    in.at = h->options_.clock->UnixNanos();
    in.sweep_attempt = attempt;
    in.detail = "interrupted: the controller exited while it ran";
    if (auto s = h->ApplyLocked(machine, in, /*run_sweeps=*/false); !s.ok()) return s;
  }
  return h;
}

void LocalNodeHealth::Log(const std::string& line) {
  std::ofstream out(absl::StrCat(options_.state_dir, "/events.log"), std::ios::app);
  out << FormatRfc3339(options_.clock->UnixNanos()) << " " << line << "\n";
}

absl::Status LocalNodeHealth::SaveLocked() {
  nlohmann::json machines = nlohmann::json::object();
  for (const auto& [machine, r] : records_) {
    const NodeHealthMetadata meta = EncodeNodeHealth(r);
    machines[machine] = {{"labels", meta.labels}, {"annotations", meta.annotations}};
  }
  return WriteFileDurably(StatePath(options_.state_dir), nlohmann::json{{"machines", machines}}.dump(2));
}

absl::Status LocalNodeHealth::Quarantine(const std::string& machine, const std::string& reason) {
  if (machine.empty()) return absl::InvalidArgumentError("quarantine: empty machine id");
  absl::MutexLock lock(&mu_);
  return ApplyLocked(machine, QuarantineInput(machine, reason, options_.clock->UnixNanos()), /*run_sweeps=*/false);
}

absl::Status LocalNodeHealth::Apply(const std::string& machine, const NodeInput& input) {
  absl::MutexLock lock(&mu_);
  return ApplyLocked(machine, input, /*run_sweeps=*/true);
}

absl::Status LocalNodeHealth::ApplyLocked(const std::string& machine, NodeInput first, bool run_sweeps) {
  std::deque<NodeInput> inputs = {std::move(first)};
  std::optional<NodeAction> sweep;  // asked for: runs once the record says sweeping, durably
  for (int n = 0; !inputs.empty() || sweep; ++n) {
    if (n >= kMaxInputsPerApply) return absl::InternalError("local node health: too many chained inputs");
    if (inputs.empty()) {
      if (records_[machine].state == NodeHealth::kSweeping && records_[machine].sweep_attempts == sweep->sweep_attempt) {
        std::optional<NodeInput> result = RunSweep(machine, sweep->sweep_kind, sweep->sweep_attempt);
        if (!result) return absl::CancelledError(absl::StrCat("local node health: sweep of ", machine, " cancelled"));
        inputs.push_back(*std::move(result));
      }
      sweep.reset();
      continue;
    }
    const NodeInput input = inputs.front();
    inputs.pop_front();
    auto it = records_.find(machine);
    NodeHealthRecord record;
    record.node = machine;
    if (it != records_.end()) record = it->second;
    auto step = NodeLifecycleStep(record, input, options_.clock->UnixNanos(), options_.lifecycle);
    if (!step.ok()) return step.status();
    if (!(step->record == record)) {
      records_[machine] = step->record;
      if (auto s = SaveLocked(); !s.ok()) return s;  // the record first, then its actions
    }
    for (const NodeAction& a : step->actions) {
      switch (a.kind) {
        case NodeActionKind::kEvent:
          Log(absl::StrCat("machine ", machine, " ", a.warning ? "Warning" : "Normal", " ", a.reason, ": ", a.message));
          break;
        case NodeActionKind::kUncordonAndUntaint:
          if (options_.on_returned) options_.on_returned(machine);
          break;
        case NodeActionKind::kStartSweep: {
          if (!run_sweeps) break;  // level-based: the next Pass asks for it again
          if (access(options_.diagnose_binary.c_str(), X_OK) != 0) {
            NodeInput blocked;
            blocked.kind = NodeInputKind::kSweepNotStarted;
            blocked.at = options_.clock->UnixNanos();
            blocked.sweep_attempt = a.sweep_attempt;
            blocked.detail = absl::StrCat("no peregrine-diagnose at ", options_.diagnose_binary, ": ", strerror(errno));
            inputs.push_back(blocked);
            break;
          }
          NodeInput started;
          started.kind = NodeInputKind::kSweepStarted;
          started.at = options_.clock->UnixNanos();
          started.sweep_attempt = a.sweep_attempt;
          inputs.push_back(started);
          sweep = a;
          break;
        }
        case NodeActionKind::kCordonAndTaint:  // the LocalCluster's quarantine list
        case NodeActionKind::kLabelRetired:    // the record says so
          break;
      }
    }
  }
  return absl::OkStatus();
}

// Each check is one peregrine-diagnose process; the sweep passes when every check's result
// says passed (a check whose tool or hardware is absent passes as not present).
std::optional<NodeInput> LocalNodeHealth::RunSweep(const std::string& machine, SweepKind kind, int attempt) {
  NodeInput out;
  out.sweep_attempt = attempt;
  std::vector<std::string> failed;
  for (const SweepCheck& check : SweepChecks(kind)) {
    std::vector<std::string> argv = {options_.diagnose_binary, "--kind",  check.kind, "--machine-id", machine,
                                     "--gpus", absl::StrCat(options_.gpus_per_machine)};
    for (const auto& [k, v] : check.params) {
      argv.push_back("--param");
      argv.push_back(absl::StrCat(k, "=", v));
    }
    if (cancelled_.load()) return std::nullopt;
    auto run = RunProcess(argv, options_.env, options_.check_timeout, cancelled_);
    if (run.ok() && run->cancelled) return std::nullopt;
    if (!run.ok()) {
      failed.push_back(absl::StrCat(check.kind, ": ", run.status().message()));
      continue;
    }
    if (run->timed_out) {
      failed.push_back(absl::StrCat(check.kind, ": timed out after ", absl::FormatDuration(options_.check_timeout)));
      continue;
    }
    auto verdict = JudgeDiagnoseOutput(run->output, run->exit_code);
    if (!verdict.ok()) {
      failed.push_back(absl::StrCat(check.kind, ": ", verdict.status().message()));
    } else if (!verdict->passed) {
      failed.push_back(verdict->detail);
    }
  }
  out.at = options_.clock->UnixNanos();
  out.kind = failed.empty() ? NodeInputKind::kSweepPassed : NodeInputKind::kSweepFailed;
  out.detail = absl::StrJoin(failed, "; ");
  return out;
}

void LocalNodeHealth::Cancel() { cancelled_.store(true); }

absl::Status LocalNodeHealth::Pass() {
  absl::MutexLock lock(&mu_);
  std::vector<NodeHealthRecord> records;
  for (const auto& [m, r] : records_) records.push_back(r);
  const int64_t now = options_.clock->UnixNanos();
  absl::Status first;
  for (const DueWork& w : ListDueWork(records, now, options_.lifecycle)) {
    NodeInput tick;
    tick.kind = NodeInputKind::kTick;
    tick.at = now;
    if (auto s = ApplyLocked(w.node, tick, /*run_sweeps=*/true); !s.ok() && first.ok()) first = s;
  }
  return first;
}

std::vector<NodeHealthRecord> LocalNodeHealth::Records() {
  absl::MutexLock lock(&mu_);
  std::vector<NodeHealthRecord> out;
  for (const auto& [m, r] : records_) out.push_back(r);
  return out;
}

std::array<int64_t, kNodeHealthStates> LocalNodeHealth::Counts() { return CountNodeHealth(Records()); }

}  // namespace peregrine
