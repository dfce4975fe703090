// Loopback TCP ports a process names before something binds them (a rendezvous store, the
// stand-in cluster's rendezvous), shared by the agent's diagnostics and local mode.
//
// PickFreePortBlock(count): the first of `count` consecutive ports on 127.0.0.1, each of
// which a listener (SO_REUSEADDR) could bind a moment ago: a random block between 20000 and
// the start of the kernel's ephemeral range (outgoing connections take ephemeral ports, so
// a port the kernel picked can be taken again before the listener binds it), random so
// that concurrent processes rarely pick the same; when no such block is found (or the
// range is too small), one port the kernel picks (bound to 0, released; only that first
// port is checked). PickFreePort() is a block of one. The ports are free when checked, not
// reserved: another process may bind them before the caller does.
//
// Errors: kInvalidArgument for count outside [1, 4096]; kUnavailable when no socket can
// be bound. Thread-safe.
#ifndef PEREGRINE_BASE_FREE_PORT_H_
#define PEREGRINE_BASE_FREE_PORT_H_

#include "absl/status/statusor.h"

namespace peregrine {

absl::StatusOr<int> PickFreePortBlock(int count);

inline absl::StatusOr<int> PickFreePort() { return PickFreePortBlock(1); }

// True when a TCP listener with SO_REUSEADDR could bind 127.0.0.1:port now.
bool LoopbackPortFree(int port);

// The first port of the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range,
// read once; 32768 when unreadable).
int EphemeralPortsStart();

}  // namespace peregrine

#endif  // PEREGRINE_BASE_FREE_PORT_H_
