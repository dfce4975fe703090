// AgentCheckpoints: the agent's in-memory checkpoints as one part of its control loop.
// It owns the shard store, its data channel (the CheckpointPeer server, the backup
// sender) and the persistence writer, and turns what the loop sees (time passing, a
// launch, a RegisterAck, a CheckpointCommit, a heartbeat, the shutdown) into calls on
// them. It returns the store's events; the agent stamps and sends them.
//
// Ownership: Create builds every part; the object owns them. Shutdown() (also run by
// the destructor) stops them in order: the writer, the sender, the server, then the
// store, after removing the store's area where it is empty.
// The data channel is authenticated with the job's data token (data_token.h), which the
// agent passes on from each RegisterAck (SetDataToken); before the first one the server
// refuses every call.
// Threads: call it from one thread (the agent's control loop); the parts run their own
// threads; SetDataToken may be called from any thread. Errors: Create's status (the
// store's area, the server's port);
// PrepareLaunch's status (a plan that does not parse, a directory the store cannot
// create, a failed restore); ApplyAssignment's status for a plan the store cannot take.
#ifndef PEREGRINE_AGENT_CHECKPOINT_AGENT_CHECKPOINTS_H_
#define PEREGRINE_AGENT_CHECKPOINT_AGENT_CHECKPOINTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/checkpoint/backup_sender.h"
#include "agent/checkpoint/data_token.h"
#include "agent/checkpoint/peer_service.h"
#include "agent/checkpoint/persist_writer.h"
#include "agent/checkpoint/shard_store.h"
#include "base/clock.h"
#include "peregrine/v1/agent.pb.h"
#include "peregrine/v1/checkpoint.pb.h"

namespace peregrine::checkpoint {

struct AgentCheckpointsOptions {
  std::string root;  // --checkpoint-root; empty: checkpoints are off
  std::string job_namespace;
  std::string job_name;
  std::string pod_name;
  std::string data_bind = "0.0.0.0";
  int data_port = 0;           // 0: a free port
  std::string data_advertise;  // the host in data_address(); empty: this machine's hostname
  Clock* clock = RealClock();  // the backup sender's waits
};

// The slot a launch runs, in the store's terms.
struct CheckpointLaunch {
  uint32_t slot = 0;                  // the assignment's machine index
  std::vector<uint32_t> ranks;        // the slot's global ranks on this machine
  uint32_t ranks_per_slot = 0;        // the layout's GPUs per machine
  std::string plan;                   // peregrine.v1.CheckpointPlan, serialized
};

// What preparing a launch did: the events (RESTORED, CORRUPT_SHARD, RESTORE_FAILED, then
// the store's pass) in the order they happened, and whether training may start.
struct PreparedLaunch {
  absl::Status status;
  std::vector<peregrine::v1::CheckpointEvent> events;
};

// "<host>:<port>", with an IPv6 host in brackets.
std::string FormatDataAddress(const std::string& host, int port);

class AgentCheckpoints {
 public:
  // Null when options.root is empty (checkpoints off); the status of the step that failed
  // otherwise (nothing is left running then).
  static absl::StatusOr<std::unique_ptr<AgentCheckpoints>> Create(const AgentCheckpointsOptions& options);
  ~AgentCheckpoints();
  AgentCheckpoints(const AgentCheckpoints&) = delete;
  AgentCheckpoints& operator=(const AgentCheckpoints&) = delete;

  // At most every 200 ms of `now`: one store pass (its events are returned), then the
  // backup sender and the writer look for work. Empty between passes.
  std::vector<peregrine::v1::CheckpointEvent> Poll(absl::Time now);

  // Before ranks start: the store takes the launch's plan (the slot, its ranks'
  // directories, the committed step, what to hold), then, for a restore, every local
  // rank's shard of the restore step is made present. Blocks for as long as a fetch takes.
  PreparedLaunch PrepareLaunch(const CheckpointLaunch& launch);

  // A RegisterAck's assignment: its plan's updates (the committed step, the slots to hold
  // for) reach the store when it is the running attempt's (`running_attempt`) and has a
  // plan and ranks; ignored otherwise.
  absl::Status ApplyAssignment(const peregrine::v1::Assignment& assignment, std::optional<uint64_t> running_attempt);
  // For the running attempt (ignored otherwise): the job's committed step advanced (the
  // store keeps it from now on) and/or the backup holders' addresses changed (the backup
  // sender copies to the new ones).
  void ApplyCommit(const peregrine::v1::CheckpointCommit& commit, std::optional<uint64_t> running_attempt);

  // The job's data token from a RegisterAck: what the data channel accepts and sends from
  // now on (an empty one: refuse everything).
  void SetDataToken(std::string token) { token_.Set(std::move(token)); }

  // The heartbeat's CheckpointReport.
  peregrine::v1::CheckpointReport Report() const { return store_->Report(); }
  // <advertised host>:<port>, for Register.data_address.
  const std::string& data_address() const { return data_address_; }
  // For the launch's directories and allowance (agent/agent_components.h PrepareLaunch).
  const ShardStore* store() const { return store_.get(); }

  // Stops every part in order (see the file comment); idempotent. Poll and the other
  // calls must not follow it.
  void Shutdown();

 private:
  AgentCheckpoints() = default;

  DataToken token_;  // before the parts that point at it, so it outlives them
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<PeerServer> server_;
  std::unique_ptr<BackupSender> sender_;
  std::unique_ptr<PersistWriter> persist_;
  std::string data_address_;
  absl::Time next_poll_ = absl::InfinitePast();
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_AGENT_CHECKPOINTS_H_
