// The checkpoint store's decisions, apart from its files: which steps are stored (every
// local rank has a finished shard), which shard files to prune and which to keep for reuse,
// the memory budget and the per-rank allowance, which step to back up next, which held
// backups to drop, and the retry delay of a failed copy.
//
// Pure functions of what the store observed (no files, clocks or threads); thread-safe.
// agent/checkpoint/shard_store.h applies them.
#ifndef PEREGRINE_AGENT_CHECKPOINT_STORE_POLICY_H_
#define PEREGRINE_AGENT_CHECKPOINT_STORE_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/time/time.h"

namespace peregrine::checkpoint {

// One local rank's directory as the store scanned it.
struct RankFiles {
  uint32_t global_rank = 0;
  std::map<uint64_t, uint64_t> finished;  // step -> file bytes, checksum set
  std::set<uint64_t> unfinished;          // published, checksum not yet set
  bool has_free_buffer = false;           // a free-<n>.buf waits for reuse
};

// Steps with a finished shard for every rank in `ranks`, ascending. Empty without ranks.
std::vector<uint64_t> StoredSteps(const std::vector<RankFiles>& ranks);

struct PrunedShard {
  uint32_t global_rank = 0;
  uint64_t step = 0;
  bool recycle = false;  // becomes the rank's free-<n>.buf instead of being deleted
};

// The finished shards to prune. Kept: the newest two stored steps (the controller's
// committed step is one of them as long as backups keep up), `committed_step`,
// `backed_up_step` (the newest step every holder acknowledged), and per rank the newest
// two finished steps newer than the newest stored one (their other ranks are still
// saving). Unfinished shards are never pruned. Per rank without a free buffer, the
// largest pruned shard is recycled; the others are deleted.
std::vector<PrunedShard> DecidePrune(const std::vector<RankFiles>& ranks, uint64_t committed_step,
                                     uint64_t backed_up_step);

// The limits the memory budget is the minimum of; 0 means "no limit from this source".
struct BudgetInputs {
  uint64_t filesystem_bytes = 0;    // statvfs of the checkpoint root
  uint64_t cgroup_limit_bytes = 0;  // memory.max (v2) or memory.limit_in_bytes (v1)
  uint64_t file_size_limit = 0;     // RLIMIT_FSIZE
  uint64_t plan_limit_bytes = 0;    // CheckpointPlan.memory_limit_bytes
};

// min over the non-zero inputs; UINT64_MAX when every input is 0.
uint64_t MemoryBudget(const BudgetInputs& inputs);

struct Allowance {
  uint64_t per_rank_bytes = 0;  // PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES
  bool memory_short = false;    // fewer than two versions fit: one version each
};

// The budget less the held backups, shared by the local ranks with two versions each
// (the newest stored one and the one being written). When two versions of
// `last_shard_bytes` (the largest rank's newest shard; 0 before the first save) do not
// fit, memory is short and each rank is allowed one version. No ranks: 0 allowance.
Allowance DecideAllowance(uint64_t budget, uint32_t local_ranks, uint64_t held_bytes, uint64_t last_shard_bytes);

// The step to copy to the holders next: the newest stored step unless it is backed up
// already (older unacknowledged steps are superseded by it). nullopt when none.
std::optional<uint64_t> NextBackupStep(const std::vector<uint64_t>& stored, const std::set<uint64_t>& backed_up);

// Held backups: slot -> step -> the ranks whose verified shard is held.
using HeldIndex = std::map<uint32_t, std::map<uint64_t, std::set<uint32_t>>>;

struct HeldKey {
  uint32_t slot = 0;
  uint64_t step = 0;
  bool operator==(const HeldKey&) const = default;
};

// (slot, step) pairs held complete: `ranks_per_slot` ranks present (every slot has as
// many ranks as a machine has GPUs).
std::vector<HeldKey> CompleteHeld(const HeldIndex& held, uint32_t ranks_per_slot);

// Held steps to drop: every step of a slot not in `hold_for`; of the others, per slot,
// everything older than the second-newest complete step (newer partial steps are still
// arriving and are kept), except the job's `committed_step` (a restart resumes from it).
std::vector<HeldKey> HeldToDrop(const HeldIndex& held, const std::set<uint32_t>& hold_for, uint32_t ranks_per_slot,
                                uint64_t committed_step);

// The wait before retry `attempt` (0-based) of a failed copy: 100 ms doubling, at most 10 s.
absl::Duration RetryDelay(int attempt);

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_STORE_POLICY_H_
