// Runs a helper program to completion and returns what it printed: kubectl for the
// kubeconfig view, a kubeconfig user's exec credential plugin.
//
// RunForOutput forks and execs argv[0] (searched on PATH when it has no '/'), with the
// caller's environment plus `extra_env` (NAME -> value, replacing a variable of the same
// name), stdin from /dev/null and stdout and stderr captured. It returns stdout when the
// program exits 0; otherwise kUnavailable naming the program and carrying its stderr, or
// saying it could not be run (exit 127). Blocks until the program exits. Thread-compatible
// (it forks: call it before starting threads, or from a process without other threads).
#ifndef PEREGRINE_CLI_PROCESS_OUTPUT_H_
#define PEREGRINE_CLI_PROCESS_OUTPUT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine {

absl::StatusOr<std::string> RunForOutput(const std::vector<std::string>& argv,
                                         const std::map<std::string, std::string>& extra_env = {});

}  // namespace peregrine

#endif  // PEREGRINE_CLI_PROCESS_OUTPUT_H_
