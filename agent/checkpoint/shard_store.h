// ShardStore: the agent's checkpoint store in shared memory. The area is
// <root>/<namespace>.<job>/<pod>/ (created 0700): own/rank-<g>/ holds what the local ranks
// save through the client library, held/slot-<i>/rank-<g>/ the verified backups this agent
// holds for other slots. Poll() finishes new shards (the CRC, on one worker thread), turns
// skipped-save markers into events, prunes (agent/checkpoint/store_policy.h decides;
// pruned files become the ranks' free-<n>.buf for reuse), enforces the memory budget and
// reports. The data channel (peer_service, backup_sender, restore_fetch) reads and writes
// shards through it.
//
// Thread safety: every method is thread-safe (one mutex; file work other than a scan
// happens outside it). Ownership: the store owns its worker thread and joins it on
// destruction; it never deletes the area (it survives a restart of the agent).
// Errors: Create's status when the area cannot be created; events for everything found
// wrong later.
#ifndef PEREGRINE_AGENT_CHECKPOINT_SHARD_STORE_H_
#define PEREGRINE_AGENT_CHECKPOINT_SHARD_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/checkpoint/store_policy.h"
#include "peregrine/v1/checkpoint.pb.h"

namespace peregrine::checkpoint {

// The system's limits on the store: statvfs(root)'s size, the cgroup's memory limit
// (v2 <cgroup_root>/memory.max, else v1 <cgroup_root>/memory/memory.limit_in_bytes; "max"
// or the v1 "unlimited" value count as none) and RLIMIT_FSIZE. plan_limit_bytes is 0.
BudgetInputs ReadSystemBudgetInputs(const std::string& root, const std::string& cgroup_root = "/sys/fs/cgroup");

struct ShardStoreOptions {
  std::string root;  // --checkpoint-root
  std::string job_namespace;
  std::string job_name;
  std::string pod_name;
  // The system's limits, read on every Poll; empty: ReadSystemBudgetInputs(root).
  std::function<BudgetInputs()> system_limits;
};

// One step of this slot to copy to the holders that have not acknowledged it.
struct BackupJob {
  uint32_t slot = 0;
  uint64_t step = 0;
  struct Shard {
    uint32_t global_rank = 0;
    std::string path;
  };
  std::vector<Shard> shards;
  std::vector<std::string> peers;  // addresses still missing some rank of `step`
};

// What the persistence writer (persist_writer.h) needs of the store, as of the last Poll:
// the plan's persist settings, this slot's ranks and the steps it may persist (backed up,
// or stored when the plan has no backup holders).
struct PersistSource {
  uint32_t slot = 0;
  std::vector<uint32_t> ranks;
  uint32_t every = 0;
  std::string dir;
  std::vector<uint64_t> eligible;
};

class ShardStore {
 public:
  static absl::StatusOr<std::unique_ptr<ShardStore>> Create(ShardStoreOptions options);
  ~ShardStore();
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  const std::string& area() const { return area_; }
  std::string OwnRankDir(uint32_t global_rank) const;
  std::string OwnShardPath(uint32_t global_rank, uint64_t step) const;

  // The slot this agent runs, its local ranks (their directories are created) and the
  // controller's plan. A standby has no ranks yet (ranks_per_slot still tells how many
  // ranks a held slot has). kInternal when a directory cannot be created.
  absl::Status Configure(uint32_t slot, const std::vector<uint32_t>& ranks, uint32_t ranks_per_slot,
                         const peregrine::v1::CheckpointPlan& plan);
  // Updates only the committed step (a newer assignment of the same plan).
  void SetCommittedStep(uint64_t step);
  // Updates only the backup holders' addresses: `peers` must name the plan's backup_to
  // slots in the plan's order (else it is ignored and false returned: it belongs to
  // another plan); an empty address means that holder is not known yet. True when an
  // address changed. Acknowledgements are per address, so a holder at a new address gets
  // every step again.
  bool SetBackupPeers(const google::protobuf::RepeatedPtrField<peregrine::v1::CheckpointPeerAddress>& peers);

  // One pass over the store (see the file comment); returns the events since the last
  // call, including those of the data channel (received corrupt shards, failed copies).
  std::vector<peregrine::v1::CheckpointEvent> Poll();
  peregrine::v1::CheckpointReport Report() const;
  // PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES for the next launch (as of the last Poll).
  uint64_t AllowanceBytes() const;
  // Queues an event for the next Poll (the data channel's threads use it).
  void AddEvent(peregrine::v1::CheckpointEvent event);

  // Backups. The next step to copy, or nullopt when the newest stored step is acknowledged
  // by every holder (or there are none). Its peers are the holders that lack it and have
  // an address (a holder with none yet is skipped, not failed; the step is not backed up
  // until it has the copy).
  std::optional<BackupJob> NextBackup() const;
  void AcknowledgeBackup(uint64_t step, const std::string& peer, uint32_t global_rank);
  uint64_t backup_bandwidth() const;

  // Held shards (the data channel's server). A new unique temp path for a shard of `key`
  // (its directory created); kResourceExhausted when `total_bytes` does not fit the
  // budget.
  absl::StatusOr<std::string> BeginHeld(const peregrine::v1::ShardKey& key, uint64_t total_bytes);
  // Verifies the received file and files it as held (dropping what retention says);
  // kDataLoss (and a CORRUPT_SHARD event) when it does not verify; the temp file is gone
  // either way.
  absl::Status CommitHeld(const peregrine::v1::ShardKey& key, const std::string& temp_path);
  // Gives up a BeginHeld whose transfer failed (its temp file is already gone).
  void AbortHeld(const std::string& temp_path);
  // The file of a held shard of `key`, or of an own stored shard when key.slot is this
  // agent's slot; kNotFound otherwise.
  absl::StatusOr<std::string> FindShard(const peregrine::v1::ShardKey& key) const;

  // Persistence: the writer's view, and the steps it has persisted (reported as
  // CheckpointReport.persisted_steps).
  PersistSource PersistView() const;
  void SetPersistedSteps(std::vector<uint64_t> steps);
  void DiscardPersistedNewerThan(uint64_t step);

  // Restore: drops own shards newer than `step` (an abandoned timeline must not count as
  // stored) and forgets what was known about them.
  void DiscardOwnNewerThan(uint64_t step);

  // At the agent's exit: removes the area's directories that are empty (and the job's and
  // the root's when nothing else is in them). Shards and free buffers stay.
  void RemoveAreaIfEmpty();

 private:
  explicit ShardStore(ShardStoreOptions options, std::string area);
  void FinisherLoop();
  std::string HeldDir(uint32_t slot, uint32_t global_rank) const;
  void ScanHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropHeldLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<RankFiles> ScanOwn(const std::vector<uint32_t>& ranks, std::vector<peregrine::v1::CheckpointEvent>* events);

  const ShardStoreOptions options_;
  const std::string area_;

  mutable absl::Mutex mu_;
  uint32_t slot_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> ranks_ ABSL_GUARDED_BY(mu_);
  uint32_t ranks_per_slot_ ABSL_GUARDED_BY(mu_) = 0;
  bool configured_ ABSL_GUARDED_BY(mu_) = false;  // held backups are kept until a plan says which
  peregrine::v1::CheckpointPlan plan_ ABSL_GUARDED_BY(mu_);
  // Own files whose checksum is known set: path -> (inode, size, mtime).
  struct FileId {
    uint64_t inode = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const FileId&) const = default;
  };
  std::map<std::string, FileId> finished_files_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> finishing_ ABSL_GUARDED_BY(mu_);  // queued or running on the worker
  std::vector<RankFiles> own_ ABSL_GUARDED_BY(mu_);         // as of the last Poll
  std::vector<uint64_t> stored_ ABSL_GUARDED_BY(mu_);
  uint64_t own_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t budget_ ABSL_GUARDED_BY(mu_) = 0;
  Allowance allowance_ ABSL_GUARDED_BY(mu_);
  bool memory_short_reported_ ABSL_GUARDED_BY(mu_) = false;
  // Backups: step -> acknowledged (peer, rank) pairs.
  std::map<uint64_t, std::set<std::pair<std::string, uint32_t>>> acks_ ABSL_GUARDED_BY(mu_);
  std::set<uint64_t> backed_up_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> persisted_ ABSL_GUARDED_BY(mu_);
  // Held backups and their bytes.
  HeldIndex held_ ABSL_GUARDED_BY(mu_);
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> receiving_ ABSL_GUARDED_BY(mu_);  // temp path -> bytes reserved
  uint64_t temp_counter_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<peregrine::v1::CheckpointEvent> events_ ABSL_GUARDED_BY(mu_);

  // The finisher: paths to checksum, and the results.
  std::deque<std::string> to_finish_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, absl::Status>> finished_results_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread finisher_;
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_SHARD_STORE_H_
