// Restore before a start: makes sure every local rank has a verified shard of the restore
// step in its own directory, from its own copy when that verifies, else fetched with
// GetShard from the holders in order (chunk CRCs checked, the whole shard verified, then
// renamed into place), else read from the persisted copy under persist_dir (verified and
// checked against its manifest; persist_writer.h). Own shards newer than the step are dropped first (that timeline is
// abandoned).
//
// Blocking; call it from one thread at a time per store. The store must outlive the call.
// Errors: FetchShard's status; RestoreShards reports per rank in its outcome.
#ifndef PEREGRINE_AGENT_CHECKPOINT_RESTORE_FETCH_H_
#define PEREGRINE_AGENT_CHECKPOINT_RESTORE_FETCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/checkpoint/shard_store.h"
#include "peregrine/v1/checkpoint.pb.h"

namespace peregrine::checkpoint {

// Fetches `key` from the holder at `address` into `dest_path` (through a temp file next to
// it), presenting `token` (the job's data token). kDataLoss when a chunk or the shard fails
// its check; the holder's status otherwise (kUnauthenticated for a missing or wrong token).
absl::Status FetchShard(const std::string& address, const std::string& token, const peregrine::v1::ShardKey& key,
                        const std::string& dest_path);

struct RestoreOutcome {
  absl::Status status;  // the first rank that could not be restored, with every holder's answer
  std::vector<peregrine::v1::CheckpointEvent> events;  // RESTORED, CORRUPT_SHARD, RESTORE_FAILED
};

RestoreOutcome RestoreShards(ShardStore& store, uint32_t slot, const std::vector<uint32_t>& ranks, uint64_t step,
                             const std::vector<peregrine::v1::CheckpointPeerAddress>& restore_from,
                             const std::string& token, const std::string& persist_dir = "");

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_RESTORE_FETCH_H_
