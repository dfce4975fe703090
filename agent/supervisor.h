// Supervisor: starts the training processes and keeps them on a short leash.
//
// Each ProcessSpec becomes one child (fork + execve, never a shell) in its own process
// group, with stdin /dev/null, stdout and stderr into the spec's log file and a bounded
// per-process tail, and PR_SET_PDEATHSIG=SIGKILL (if the agent dies, its training dies
// too). The calling process becomes a child subreaper, so orphaned descendants are reaped.
// The Supervisor does no waiting of its own: the owner polls OutputFds() and calls Poll(),
// which drains output, reaps exits, escalates a stop from SIGTERM to SIGKILL at its
// deadline and reports lines and exits. RunTool runs a helper (eu-stack, gdb, py-spy) to
// completion with a timeout. The mechanics are described in supervisor.cc.
//
// Thread safety: a Supervisor is used by one thread. RunTool is thread-safe and
// may run on any thread while a Supervisor polls on another.
// Ownership: the Supervisor owns its children; the destructor SIGKILLs every
// remaining group and reaps it (bounded wait).
#ifndef PEREGRINE_AGENT_SUPERVISOR_H_
#define PEREGRINE_AGENT_SUPERVISOR_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace peregrine {

struct ProcessSpec {
  int global_rank = -1;            // -1: not a rank (a per-machine launcher)
  std::vector<std::string> argv;   // argv[0] is resolved on the PATH in env
  std::vector<std::string> env;    // the complete environment, "KEY=VALUE"
  std::string log_path;            // appended to; empty: no log file
  std::string log_header;          // written as one line before the output
};

struct ProcessStatus {
  int global_rank = -1;
  pid_t pid = 0;
  bool running = false;
  int exit_code = 0;  // valid when !running and signal == 0
  int signal = 0;     // terminating signal, 0 if none
};

struct OutputLine {
  int global_rank = -1;
  pid_t pid = 0;
  std::string text;
};

struct ProcessExitReport {
  int global_rank = -1;
  pid_t pid = 0;
  int exit_code = 0;
  int signal = 0;
  bool during_stop = false;          // the supervisor was stopping the processes
  std::vector<std::string> tail;     // last output lines, oldest first
};

struct PollResult {
  std::vector<OutputLine> lines;       // in the order read; all before `exits`
  std::vector<ProcessExitReport> exits;
  bool became_idle = false;            // the last live group went away in this Poll
};

// Resolves an executable: a name containing '/' is checked as is, otherwise it
// is searched in the ':'-separated `path_env`. NotFound names the executable
// and the path searched; PermissionDenied when it exists but is not executable.
absl::StatusOr<std::string> ResolveExecutable(std::string_view name, std::string_view path_env);

class Supervisor {
 public:
  struct Options {
    // Enough for the controller to see a rank's Python traceback behind what a launcher
    // prints after it (torchrun: its own traceback, ChildFailedError's box, other ranks'
    // shutdown lines); worst case tail_lines x max_line_bytes per process (~1 MB).
    size_t tail_lines = 120;
    size_t max_line_bytes = 8192;
    Clock* clock = RealClock();  // KillAllAndWait's limit (must outlive the supervisor)
  };

  Supervisor();
  explicit Supervisor(Options options);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts one process per spec. FailedPrecondition when a previous start still
  // has live processes; InvalidArgument/NotFound when a spec cannot be executed
  // (processes already started by this call are then killed and reaped, and
  // nothing runs). On success the previous start's records are replaced.
  absl::Status Start(std::vector<ProcessSpec> specs);

  // Sends `signo` to every live process group (SIGSTOP/SIGCONT for pause).
  void SignalAll(int signo);

  // SIGCONT + SIGTERM to every live group now; SIGKILL to what is left at
  // now + grace. Poll reports became_idle once everything is gone.
  void BeginStop(absl::Duration grace, absl::Time now);
  bool stopping() const { return stopping_; }

  // True when no started process group has a live member.
  bool Idle() const;

  // Drains output, reaps, sweeps orphaned zombies (always when `sweep_orphans`,
  // and whenever a reaped leader's group still has members), escalates a stop.
  PollResult Poll(absl::Time now, bool sweep_orphans);

  // Pipes to watch for readability before calling Poll.
  std::vector<int> OutputFds() const;
  // When Poll must run next at the latest (a stop's SIGKILL), if any.
  std::optional<absl::Time> NextDeadline() const;

  // The processes of the latest Start, in spec order.
  std::vector<ProcessStatus> Processes() const;
  // Leaders of live groups (for stack capture and pause).
  std::vector<ProcessStatus> LiveProcesses() const;

  // SIGKILLs every live group and blocks until reaped (gives up after
  // `limit`, which only a process stuck in the kernel can exceed).
  void KillAllAndWait(absl::Duration limit = absl::Seconds(30));

 private:
  struct Child;
  void DrainOutput(Child& child, PollResult* result, size_t max_bytes);
  void CloseOutput(Child& child, PollResult* result);
  void SweepOrphans();

  Options options_;
  std::vector<std::unique_ptr<Child>> children_;
  bool stopping_ = false;
  bool killed_ = false;
  absl::Time kill_deadline_ = absl::InfiniteFuture();
};

struct ToolRun {
  int exit_code = 0;
  int signal = 0;
  bool timed_out = false;
  std::string output;  // stdout+stderr, at most max_output bytes (then a marker)
};

// Runs argv (argv[0] resolved on the agent's PATH) with stdin from /dev/null to
// completion, killing its process group after `timeout` (on `clock`'s time). NotFound
// when the tool is missing, Internal when it cannot be started.
absl::StatusOr<ToolRun> RunTool(const std::vector<std::string>& argv, absl::Duration timeout,
                                size_t max_output, Clock* clock = RealClock());

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_SUPERVISOR_H_
