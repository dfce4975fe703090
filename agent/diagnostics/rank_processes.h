// Runs a diagnostic's processes (one per local GPU, or one tool) to completion or deadline.
//
// Each process is started by the Supervisor (fork + execve, no shell, own process group,
// killed with the helper through PR_SET_PDEATHSIG). RunProcesses returns when every
// process exited; when one fails (non-zero exit or signal) the others get `failure_grace`
// to finish (NCCL peers of a failed rank normally fail fast) and are then killed; at the
// deadline everything left is killed and the outcome is timed_out. Output lines are kept per
// process (bounded).
//
// Thread-compatible: call from one thread (the helper's main thread).
#ifndef PEREGRINE_AGENT_DIAGNOSTICS_RANK_PROCESSES_H_
#define PEREGRINE_AGENT_DIAGNOSTICS_RANK_PROCESSES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/diagnostics/diagnostic_invocation.h"
#include "base/clock.h"

namespace peregrine {

struct DiagnosticProcess {
  int index = 0;  // the caller's label (local GPU)
  std::vector<std::string> argv;
  std::vector<std::string> env;  // complete, "KEY=VALUE"
};

struct DiagnosticProcessOutcome {
  int index = 0;
  int exit_code = 0;
  int signal = 0;
  bool killed = false;             // killed by RunProcesses (deadline or a peer's failure)
  std::vector<std::string> lines;  // stdout + stderr, at most max_lines (the first ones)
  bool ok() const { return !killed && signal == 0 && exit_code == 0; }
  // "exit 3" / "signal 6" / "killed" plus the last stderr-ish line, for a detail.
  std::string Describe() const;
};

struct DiagnosticProcessesOutcome {
  bool timed_out = false;
  std::vector<DiagnosticProcessOutcome> processes;  // in the order given
};

struct RunProcessesOptions {
  absl::Time deadline = absl::InfiniteFuture();
  absl::Duration failure_grace = absl::Seconds(10);
  size_t max_lines = 20000;
  Clock* clock = RealClock();  // the time of `deadline` (must outlive the call)
};

// An error when a process cannot be started (nothing is left running then).
absl::StatusOr<DiagnosticProcessesOutcome> RunProcesses(const std::vector<DiagnosticProcess>& processes,
                                                        const RunProcessesOptions& options);

// Runs `argv` once per local GPU of `inv` until inv.deadline, GPU g as rank
// world.rank_base + g of `world` (the environment of RankEnvironment, NCCL timeout
// nccl_timeout_ms), through RunProcesses; its outcome or its error.
absl::StatusOr<DiagnosticProcessesOutcome> RunRanks(const DiagnosticInvocation& inv, const RankWorld& world,
                                                    int64_t nccl_timeout_ms, const std::vector<std::string>& argv);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_DIAGNOSTICS_RANK_PROCESSES_H_
