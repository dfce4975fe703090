// DiagnosticRunner: runs the agent's RunDiagnostic commands asynchronously, one at a time.
//
// Submit validates the command (InvalidArgument naming the kind or param, nothing runs) and
// queues it; a single worker thread runs the queue in order, so a second diagnostic waits
// for the first. Each diagnostic runs out of process in `peregrine-diagnose` (its own process
// group, started through the injected spawner: the agent passes RunTool, which registers the
// child so the supervisor's orphan sweep leaves it alone). The helper starts whatever the
// kind needs (rank processes, sim-trainer, dcgmi, ...) as its own children and enforces the
// timeout itself (everything killed, result "timed out after N ms"); the spawner's timeout
// (timeout + margin) is the backstop that kills the helper's whole process group. The
// helper never touches running training processes.
//
// The helper prints its result as one line "peregrine-diagnose: result <DiagnosticResult in
// protobuf text format>"; a malformed param found there is "peregrine-diagnose: invalid:
// <message>" with exit code 2 (-> status INVALID_ARGUMENT; "unimplemented:" -> UNIMPLEMENTED
// for a kind the build cannot run; "status <code> <message>" -> that code); a helper that
// dies otherwise is
// status INTERNAL with its last output.
//
// Idempotency by command id is the agent's (it keeps executed results); the runner runs
// what it is given. Thread safety: Submit is thread-safe; `done` runs on the worker thread.
// Ownership: the destructor drops queued diagnostics (their `done` is not called), kills a
// running helper's process group and joins the worker.
#ifndef PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_RUNNER_H_
#define PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_RUNNER_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/diagnostics/diagnostic_params.h"
#include "base/clock.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

// One RunDiagnostic command as the agent runs it, and what the agent knows about its machine
// (the controller side of a diagnosis is controller/core's DiagnosticRequest).
struct DiagnosticRunRequest {
  std::string command_id;
  std::string kind;
  DiagnosticParamMap params;
  uint32_t timeout_ms = 0;  // 0: the kind's default
  std::string machine_id;
  int gpus = 1;             // GPUs (rank processes) of this machine
  int rank_base = 0;        // global rank of local GPU 0
  // The training command of the assignment the agent holds (replay runs it).
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> code_env;
};

struct HelperRun {
  int exit_code = 0;
  int signal = 0;
  bool timed_out = false;
  std::string output;  // stdout + stderr
};

// Runs argv (its own process group) to completion or kills the group after `timeout`.
using HelperSpawner =
    std::function<absl::StatusOr<HelperRun>(const std::vector<std::string>& argv, absl::Duration timeout)>;

struct DiagnosticRunnerOptions {
  std::string helper_binary;  // peregrine-diagnose
  std::string scratch_dir;    // pid files; created if missing
  HelperSpawner spawn;
  absl::Duration backstop_margin = absl::Seconds(20);
  Clock* clock = RealClock();  // how long a helper ran (must outlive the runner)
};

// The helper's command line for `request` (pure).
std::vector<std::string> DiagnoseHelperArgv(const std::string& helper_binary, const DiagnosticRunRequest& request,
                                            absl::Duration timeout, const std::string& pid_file);

// The CommandResult status and DiagnosticResult of a finished helper run (pure). `timeout`
// is the diagnostic's; `seconds` how long the helper ran.
std::pair<v1::Status, v1::DiagnosticResult> InterpretHelperRun(const absl::StatusOr<HelperRun>& run,
                                                               const DiagnosticRunRequest& request,
                                                               absl::Duration timeout, double seconds);

class DiagnosticRunner {
 public:
  using Done = std::function<void(const v1::Status& status, const v1::DiagnosticResult& result)>;

  explicit DiagnosticRunner(DiagnosticRunnerOptions options);
  ~DiagnosticRunner();
  DiagnosticRunner(const DiagnosticRunner&) = delete;
  DiagnosticRunner& operator=(const DiagnosticRunner&) = delete;

  // InvalidArgument (nothing queued) for an unknown kind or a malformed param; otherwise
  // queues the diagnostic and calls `done` once it finished.
  absl::Status Submit(DiagnosticRunRequest request, Done done);

 private:
  void Work();

  const DiagnosticRunnerOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<DiagnosticRunRequest, Done>> queue_;  // guarded by mu_
  bool stopping_ = false;                                 // guarded by mu_
  std::string running_pid_file_;                          // guarded by mu_
  uint64_t sequence_ = 0;                                 // guarded by mu_
  std::thread worker_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_DIAGNOSTICS_DIAGNOSTIC_RUNNER_H_
