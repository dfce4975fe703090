// Snapshot saves: the trainer fork()s and the child writes the shard (WriteShard, single
// threaded) from its copy-on-write view of memory, so the trainer returns as soon as the
// fork does and may change its tensors at once: the child still sees them as they were.
//
// At most one child is in flight per process: Start first reaps the previous one (the
// caller does, through Reap). A child's outcome (published, skipped with a marker, or an
// error) comes back through a shared page and its exit status; Reap returns it once.
// The child runs no atexit handler, flushes no stdio buffer (it ends with _exit), closes
// every descriptor it inherited, resets every signal to its default disposition and stays in the trainer's process group: when
// the agent kills the group the child dies with it and leaves at most a .tmp file, which
// is never loaded; when only the trainer dies the child finishes and publishes (or
// fails) on its own.
//
// Thread safety: not thread-safe; the caller serialises (peregrine_client.cc holds its
// save mutex around every call). Errors: Start fails when the shared page or fork()
// fails (the caller then saves in copy mode).
#ifndef PEREGRINE_CLIENT_SNAPSHOT_H_
#define PEREGRINE_CLIENT_SNAPSHOT_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "client/shard_writer.h"

namespace peregrine::client {

// What became of one snapshot save.
struct SnapshotResult {
  uint64_t step = 0;
  int code = 0;  // PG_OK, PG_SKIPPED or PG_ERROR
  std::string message;
};

// Forks a child that writes `plan` and exits. The plan's source pointers must be valid
// at the time of the call only (the child has its own copy of memory). Must not be
// called while a child is in flight. false with *error set when no child was started.
bool StartSnapshot(const ShardPlan& plan, std::string* error);

// The pid of the child in flight, 0 when none.
pid_t SnapshotInFlight();

// Reaps the child in flight: block waits for it, else only a child that has ended is
// reaped. Returns its result once; nullopt when none was in flight or it still runs.
std::optional<SnapshotResult> ReapSnapshot(bool block);

}  // namespace peregrine::client

#endif  // PEREGRINE_CLIENT_SNAPSHOT_H_
