#include "agent/diagnostics/rank_processes.h"

#include <poll.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "agent/supervisor.h"

namespace peregrine {

std::string DiagnosticProcessOutcome::Describe() const {
  std::string what = killed ? "killed" : signal != 0 ? absl::StrCat("signal ", signal) : absl::StrCat("exit ", exit_code);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (!it->empty()) return absl::StrCat(what, ": ", *it);
  }
  return what;
}

absl::StatusOr<DiagnosticProcessesOutcome> RunProcesses(const std::vector<DiagnosticProcess>& processes,
                                                        const RunProcessesOptions& options) {
  Supervisor::Options supervisor_options;
  supervisor_options.clock = options.clock;
  Supervisor supervisor(supervisor_options);
  std::vector<ProcessSpec> specs;
  for (const DiagnosticProcess& p : processes) {
    ProcessSpec spec;
    spec.global_rank = p.index;
    spec.argv = p.argv;
    spec.env = p.env;
    specs.push_back(std::move(spec));
  }
  if (absl::Status s = supervisor.Start(std::move(specs)); !s.ok()) return s;
  DiagnosticProcessesOutcome outcome;
  std::map<int, size_t> slot;
  for (size_t i = 0; i < processes.size(); ++i) {
    DiagnosticProcessOutcome o;
    o.index = processes[i].index;
    outcome.processes.push_back(o);
    slot[processes[i].index] = i;
  }
  absl::Time kill_at = options.deadline;
  bool killing = false;
  while (true) {
    std::vector<pollfd> fds;
    for (int fd : supervisor.OutputFds()) fds.push_back(pollfd{fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 20);
    PollResult r = supervisor.Poll(options.clock->Now(), /*sweep_orphans=*/true);
    for (OutputLine& line : r.lines) {
      auto it = slot.find(line.global_rank);
      if (it == slot.end()) continue;
      auto& lines = outcome.processes[it->second].lines;
      if (lines.size() < options.max_lines) lines.push_back(std::move(line.text));
    }
    for (const ProcessExitReport& e : r.exits) {
      auto it = slot.find(e.global_rank);
      if (it == slot.end()) continue;
      DiagnosticProcessOutcome& o = outcome.processes[it->second];
      o.exit_code = e.exit_code;
      o.signal = e.signal;
      o.killed = killing;
      if ((e.exit_code != 0 || e.signal != 0) && !killing) {
        kill_at = std::min(kill_at, options.clock->Now() + options.failure_grace);
      }
    }
    if (supervisor.Idle()) break;
    if (options.clock->Now() >= kill_at && !killing) {
      killing = true;
      if (kill_at == options.deadline) outcome.timed_out = true;
      supervisor.BeginStop(absl::ZeroDuration(), options.clock->Now());
    }
  }
  return outcome;
}

absl::StatusOr<DiagnosticProcessesOutcome> RunRanks(const DiagnosticInvocation& inv, const RankWorld& world,
                                                    int64_t nccl_timeout_ms, const std::vector<std::string>& argv) {
  std::vector<DiagnosticProcess> processes;
  for (int g = 0; g < inv.gpus; ++g) {
    processes.push_back(DiagnosticProcess{g, argv, FlattenEnv(RankEnvironment(inv, world, g, nccl_timeout_ms))});
  }
  RunProcessesOptions options;
  options.deadline = inv.deadline;
  options.clock = inv.clock;
  return RunProcesses(processes, options);
}

}  // namespace peregrine
