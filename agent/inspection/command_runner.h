// RunCommand: runs an external program (nvidia-smi, dcgmi, dmesg, py-spy, eu-stack, gdb)
// without a shell: argv[0] is looked up in PATH when it has no '/', the child gets
// /dev/null as stdin, its own process group, and is killed (SIGKILL to the group) when
// the timeout expires. stdout and stderr are captured separately, each bounded to
// max_output_bytes (the rest is read and discarded, flagged as truncated).
//
// Errors: kNotFound when the program does not exist or cannot be executed,
// kDeadlineExceeded on timeout (the partial output is lost), kInvalidArgument for an
// empty argv, kInternal when pipes or fork fail. A non-zero exit is NOT an error: it is
// returned in exit_code for the caller to judge.
//
// Thread-safe (no shared state); blocks the caller for at most about `timeout`.
#ifndef PEREGRINE_AGENT_INSPECTION_COMMAND_RUNNER_H_
#define PEREGRINE_AGENT_INSPECTION_COMMAND_RUNNER_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace peregrine {

struct CommandResult {
  int exit_code = 0;    // exit status, or 128 + signal when killed by a signal
  int term_signal = 0;  // the signal that ended it, 0 if it exited
  std::string stdout_text;
  std::string stderr_text;
  bool truncated = false;
};

inline constexpr size_t kDefaultMaxCommandOutput = 4 << 20;

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         size_t max_output_bytes = kDefaultMaxCommandOutput);

// How inspections run commands; RunCommand by default. Injected so that an agent can
// route commands through its own runner (e.g. with a different PATH).
using CommandRunner = std::function<absl::StatusOr<CommandResult>(
    const std::vector<std::string>& argv, absl::Duration timeout)>;
CommandRunner DefaultCommandRunner();

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_COMMAND_RUNNER_H_
