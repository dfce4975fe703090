// Persisted checkpoints, the I/O: writes this slot's newest backed-up step to the plan's
// persist_dir every persist_every_steps steps (layout and choice: persist_policy.h), keeps
// the newest two persisted steps of the slot and reports them through the store
// (CheckpointReport.persisted_steps). A failed write (ENOSPC, EACCES, a path that cannot be
// created)
// becomes a PERSIST_FAILED event and is retried at the next eligible step; training never
// waits for the disk.
//
// PersistStepFiles, ScanPersisted, DropPersistedStep and ReadPersistedShard are blocking
// file operations (thread-safe: no shared state). PersistWriter runs them on its own
// thread. Ownership: the store must outlive the writer; destroying the writer stops and
// joins its thread (after the file being written, if any). Thread safety: PersistWriter's
// methods are thread-safe. Errors: absl::Status naming the file and the errno's text
// (kResourceExhausted for ENOSPC, kPermissionDenied for EACCES, kNotFound for a missing
// directory or shard, kDataLoss for a shard or manifest that does not verify).
#ifndef PEREGRINE_AGENT_CHECKPOINT_PERSIST_WRITER_H_
#define PEREGRINE_AGENT_CHECKPOINT_PERSIST_WRITER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/checkpoint/persist_policy.h"
#include "agent/checkpoint/shard_store.h"

namespace peregrine::checkpoint {

// Writes `step` of `slot` under `dir`: each (global rank, source shard path) is copied to
// its rank file through a temp file (fsync, verified against its header, rename), then
// the manifest the same way, then the slot, step and persist directories are fsynced.
// `dir` is created when missing (it may lie below the mounted volume). A source that
// changes during the copy fails the verification (kDataLoss).
absl::Status PersistStepFiles(const std::string& dir, uint32_t slot, uint64_t step,
                              const std::vector<std::pair<uint32_t, std::string>>& sources);

// The steps of `slot` with a manifest that parses and names the step and slot, oldest
// first. A missing `dir` is no error (nothing persisted yet).
absl::StatusOr<std::vector<uint64_t>> ScanPersisted(const std::string& dir, uint32_t slot);

// Removes `slot`'s files of `step` (rank files, the slot dir, the manifest first) and the
// step directory when nothing else is left in it.
absl::Status DropPersistedStep(const std::string& dir, uint32_t slot, uint64_t step);

// Copies the persisted shard of (`slot`, `global_rank`, `step`) to `dest_path` (through a
// temp file next to it): the manifest must list the rank with the shard's size and CRC,
// and the copy must verify as that step and rank.
absl::Status ReadPersistedShard(const std::string& dir, uint32_t slot, uint32_t global_rank, uint64_t step,
                                const std::string& dest_path);

class PersistWriter {
 public:
  explicit PersistWriter(ShardStore* store);
  ~PersistWriter();
  PersistWriter(const PersistWriter&) = delete;
  PersistWriter& operator=(const PersistWriter&) = delete;

  // Looks for a step to write now (the agent calls it after each store pass).
  void Wake();
  // A restore to `step`: persisted steps newer than it belong to an abandoned timeline
  // and are dropped (before the next write) and no longer reported.
  void DiscardNewerThan(uint64_t step);

 private:
  void Run();
  void Pass();

  ShardStore* const store_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<uint64_t> discard_above_ ABSL_GUARDED_BY(mu_);
  // The writer thread's own state.
  std::string scanned_dir_;
  int64_t scanned_slot_ = -1;
  std::vector<uint64_t> persisted_;
  uint64_t failed_step_ = 0;
  std::thread thread_;
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_PERSIST_WRITER_H_
