// RunProcess: runs a program by argv (posix_spawnp, no shell) and captures its stdout
// and stderr through pipes, for the deploy suite's calls to helm and promtool.
//
// Contract: returns the exit status and both streams once the child exits; fails with
// kNotFound when the program cannot be started and kInternal on a pipe error. The
// child inherits the environment plus `extra_env` ("NAME=value" entries override).
// Every descriptor and the child are reaped before returning, also on failure.
// Thread-compatible.
#ifndef PEREGRINE_TESTS_DEPLOY_RUN_PROCESS_H_
#define PEREGRINE_TESTS_DEPLOY_RUN_PROCESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number when killed
  std::string out;
  std::string err;
};

absl::StatusOr<ProcessResult> RunProcess(const std::vector<std::string>& argv,
                                         const std::vector<std::string>& extra_env = {},
                                         const std::string& stdin_text = "");

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_DEPLOY_RUN_PROCESS_H_
