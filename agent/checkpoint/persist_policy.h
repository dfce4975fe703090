// Persisted checkpoints, the pure part: where a persisted step's files go under the
// plan's persist_dir, the manifest that says a slot's copy of a step is complete, which
// step to write next and which persisted steps to drop. The I/O is persist_writer.h.
//
// Layout: <dir>/step-<20 digits>/slot-<i>/rank-<g>.shard (the shard bytes unchanged) and
// <dir>/step-<20 digits>/slot-<i>.manifest, written last: a slot's copy of a step exists
// only when its manifest does.
//
// Pure functions: no I/O, clocks or threads; thread-safe. Errors: ParsePersistManifest's
// kDataLoss naming what is wrong.
#ifndef PEREGRINE_AGENT_CHECKPOINT_PERSIST_POLICY_H_
#define PEREGRINE_AGENT_CHECKPOINT_PERSIST_POLICY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace peregrine::checkpoint {

std::string PersistStepDirName(uint64_t step);  // "step-<20 digits>"
std::string PersistStepDir(const std::string& dir, uint64_t step);
std::string PersistSlotDir(const std::string& dir, uint64_t step, uint32_t slot);
std::string PersistShardPath(const std::string& dir, uint64_t step, uint32_t slot, uint32_t global_rank);
std::string PersistManifestPath(const std::string& dir, uint64_t step, uint32_t slot);
// The step of a "step-<20 digits>" directory name; nullopt for any other name.
std::optional<uint64_t> ParsePersistStepDirName(std::string_view name);

// One slot's copy of one step: every local rank's shard, its size and payload CRC-32C
// (from the shard's header).
struct PersistManifest {
  uint64_t step = 0;
  uint32_t slot = 0;
  struct Rank {
    uint32_t global_rank = 0;
    uint64_t bytes = 0;
    uint32_t crc32c = 0;
    bool operator==(const Rank&) const = default;
  };
  std::vector<Rank> ranks;
  bool operator==(const PersistManifest&) const = default;
};
// JSON: {"step": N, "slot": I, "ranks": [{"globalRank": G, "bytes": B, "crc32c": C}, ...]}.
std::string EncodePersistManifest(const PersistManifest& manifest);
absl::StatusOr<PersistManifest> ParsePersistManifest(std::string_view text);

// The step to write next: the newest of `eligible` (steps backed up, or stored when the
// slot has no backup holders) that is at least `every` steps after the newest persisted
// one (the first one: at least `every`), and newer than `failed_step` (a failed write is
// retried at the next eligible step, not at the same one). nullopt when none, or every==0.
std::optional<uint64_t> NextPersistStep(const std::vector<uint64_t>& eligible, const std::vector<uint64_t>& persisted,
                                        uint64_t failed_step, uint32_t every);

// The persisted steps to delete so that the newest `keep` remain (oldest first).
std::vector<uint64_t> PersistedToDrop(const std::vector<uint64_t>& persisted, size_t keep = 2);

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_PERSIST_POLICY_H_
