// Backups: copies this slot's newest stored step to every holder in the plan's
// backup_to, rank by rank, with PutShard (1 MiB chunks, CRC each), limited to the plan's
// bandwidth by a TokenBucket, and acknowledges each (holder, rank) copy in the store.
// A failed copy is reported as a BACKUP_FAILED event and retried after RetryDelay; a newer
// stored step replaces an older one still being copied.
//
// SendShard is the one-copy primitive (blocking). BackupSender runs it on its own thread.
// Thread safety: BackupSender's methods are thread-safe. Ownership: the store, the token
// and the clock must outlive the sender; destroying it stops and joins its thread (a copy in
// flight is cancelled). Errors: SendShard's status (kUnauthenticated, kDataLoss,
// kUnavailable ... as the holder or the channel said).
#ifndef PEREGRINE_AGENT_CHECKPOINT_BACKUP_SENDER_H_
#define PEREGRINE_AGENT_CHECKPOINT_BACKUP_SENDER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "agent/checkpoint/data_token.h"
#include "agent/checkpoint/shard_store.h"
#include "agent/checkpoint/token_bucket.h"
#include "base/clock.h"
#include "peregrine/v1/checkpoint.pb.h"

namespace peregrine::checkpoint {

// Sends the shard file at `path` as `key` to the holder at `address`. Before each chunk
// it reserves the chunk's bytes in `bucket` (null: unlimited) and waits on `clock` until
// they may go; `stop()` returning true ends the wait and the copy (kCancelled).
absl::Status SendShard(const std::string& address, const std::string& token, const peregrine::v1::ShardKey& key,
                       const std::string& path, TokenBucket* bucket, Clock* clock,
                       const std::function<bool()>& stop);

struct BackupSenderOptions {
  ShardStore* store = nullptr;
  const DataToken* token = nullptr;  // the job's data token, read before each copy
  Clock* clock = RealClock();
};

class BackupSender {
 public:
  explicit BackupSender(BackupSenderOptions options);
  ~BackupSender();
  BackupSender(const BackupSender&) = delete;
  BackupSender& operator=(const BackupSender&) = delete;

  // Looks for work now (the store has a new stored step or plan).
  void Wake();

 private:
  void Run();
  bool Stopping();
  // Waits on the clock until `deadline`, a Wake() or the stop; true when stopping.
  bool WaitUntil(absl::Time deadline);

  const BackupSenderOptions options_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_BACKUP_SENDER_H_
