// SignalPipe: turns asynchronous signals into readable bytes (the self-pipe trick).
//
// InstallSignalPipe(signals) installs, process-wide, a handler for each signal
// that only writes the signal number as one byte to a non-blocking pipe (no
// other work happens in the handler) and returns the pipe's read end, which
// the control loop polls. Calling it again adds signals and returns the same
// fd. SIGCHLD is installed with SA_NOCLDSTOP. DrainSignalPipe reads every
// pending byte and returns the signal numbers in arrival order.
//
// Thread safety: InstallSignalPipe is serialised internally; draining is meant
// for one reader (the agent's control loop); a second reader only steals
// wake-ups, never corrupts anything. Ownership: the pipe lives for the process.
#ifndef PEREGRINE_AGENT_SIGNAL_PIPE_H_
#define PEREGRINE_AGENT_SIGNAL_PIPE_H_

#include <vector>

#include "absl/status/statusor.h"

namespace peregrine {

absl::StatusOr<int> InstallSignalPipe(const std::vector<int>& signals);
std::vector<int> DrainSignalPipe(int fd);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_SIGNAL_PIPE_H_
