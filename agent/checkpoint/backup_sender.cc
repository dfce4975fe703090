#include "agent/checkpoint/backup_sender.h"

#include <fcntl.h>
#include <unistd.h>

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/checkpoint/peer_channel.h"
#include "agent/checkpoint/store_policy.h"
#include "checkpoint/shard_format.h"

// The sender's loop: ask the store for the next step to copy; for each holder still
// missing it, send every rank's shard and acknowledge it; on a failure report it once per
// (holder, step), wait the retry delay and start over from the store (which may have a
// newer step by then). With nothing to do it waits for Wake() or a second of the clock.
// One TokenBucket serves every copy, so the plan's bandwidth bounds the agent's total;
// it is rebuilt when the plan's rate changes.

namespace peregrine::checkpoint {
namespace v1 = ::peregrine::v1;

namespace {

// Long enough for a multi-GiB shard at a low rate; the stop callback ends a copy sooner.
constexpr absl::Duration kCopyDeadline = absl::Hours(24);

// Waits on `clock` until `until` or `stop()`; true when stopped.
bool ThrottleWait(Clock* clock, absl::Time until, const std::function<bool()>& stop) {
  absl::Mutex mu;
  absl::CondVar cv;
  absl::MutexLock lock(&mu);
  while (clock->Now() < until) {
    if (stop()) return true;
    clock->WaitWithDeadline(cv, mu, std::min(until, clock->Now() + absl::Milliseconds(50)));
  }
  return stop();
}

}  // namespace

absl::Status SendShard(const std::string& address, const std::string& token, const v1::ShardKey& key,
                       const std::string& path, TokenBucket* bucket, Clock* clock,
                       const std::function<bool()>& stop) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("backup: cannot open ", path));
  const off_t total = ::lseek(fd, 0, SEEK_END);
  auto stub = PeerStub(address);
  std::unique_ptr<grpc::ClientContext> context = PeerCallContext(token, kCopyDeadline);
  v1::PutShardReply reply;
  std::unique_ptr<grpc::ClientWriter<v1::ShardChunk>> stream = stub->PutShard(context.get(), &reply);
  std::vector<char> buffer(kShardChunkBytes);
  uint64_t offset = 0;
  absl::Status local = absl::OkStatus();
  do {
    const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(offset));
    if (n < 0) {
      local = absl::InternalError(absl::StrCat("backup: read ", path, " failed"));
      break;
    }
    if (bucket != nullptr && ThrottleWait(clock, bucket->Reserve(static_cast<uint64_t>(n), clock->Now()), stop)) {
      local = absl::CancelledError("backup: stopped");
      break;
    }
    const v1::ShardChunk chunk =
        MakeShardChunk(key, static_cast<uint64_t>(total), offset, buffer.data(), static_cast<size_t>(n));
    if (!stream->Write(chunk)) break;  // the holder ended the call: Finish says why
    offset += static_cast<uint64_t>(n);
    if (n == 0) break;
  } while (offset < static_cast<uint64_t>(total));
  ::close(fd);
  if (!local.ok()) {
    context->TryCancel();
    stream->Finish();
    return local;
  }
  stream->WritesDone();
  absl::Status status = FromGrpc(stream->Finish());
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("backup of ", path, " to ", address, ": ", status.message()));
  }
  return absl::OkStatus();
}

BackupSender::BackupSender(BackupSenderOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

BackupSender::~BackupSender() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

void BackupSender::Wake() {
  {
    absl::MutexLock lock(&mu_);
    woken_ = true;
  }
  cv_.SignalAll();
}

bool BackupSender::Stopping() {
  absl::MutexLock lock(&mu_);
  return stop_;
}

bool BackupSender::WaitUntil(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  while (!stop_ && !woken_) {
    if (options_.clock->WaitWithDeadline(cv_, mu_, deadline)) break;
  }
  woken_ = false;
  return stop_;
}

void BackupSender::Run() {
  std::unique_ptr<TokenBucket> bucket;
  std::set<std::pair<std::string, uint64_t>> reported;  // (holder, step) failures reported
  int attempt = 0;
  const std::function<bool()> stop = [this] { return Stopping(); };
  while (!Stopping()) {
    std::optional<BackupJob> job = options_.store->NextBackup();
    if (!job || job->peers.empty()) {
      if (WaitUntil(options_.clock->Now() + absl::Seconds(1))) return;
      continue;
    }
    const uint64_t rate = options_.store->backup_bandwidth();
    if (rate == 0) {
      bucket.reset();
    } else if (!bucket || bucket->rate() != rate) {
      bucket = std::make_unique<TokenBucket>(rate, kShardChunkBytes, options_.clock->Now());
    }
    absl::Status failed = absl::OkStatus();
    std::string failed_peer;
    uint32_t failed_rank = 0;
    for (const std::string& peer : job->peers) {
      for (const BackupJob::Shard& shard : job->shards) {
        v1::ShardKey key;
        key.set_slot(job->slot);
        key.set_global_rank(shard.global_rank);
        key.set_step(job->step);
        absl::Status s = SendShard(peer, options_.token->Get(), key, shard.path, bucket.get(), options_.clock, stop);
        if (!s.ok()) {
          failed = s;
          failed_peer = peer;
          failed_rank = shard.global_rank;
          break;
        }
        options_.store->AcknowledgeBackup(job->step, peer, shard.global_rank);
      }
      if (!failed.ok()) break;
    }
    if (failed.ok()) {
      attempt = 0;
      continue;
    }
    if (Stopping()) return;
    if (reported.insert({failed_peer, job->step}).second) {
      v1::CheckpointEvent event;
      event.set_kind(v1::CheckpointEvent::BACKUP_FAILED);
      event.set_step(job->step);
      event.set_global_rank(static_cast<int32_t>(failed_rank));
      event.set_detail(absl::StrCat("copy to ", failed_peer, " failed (retrying): ", failed.message()));
      options_.store->AddEvent(std::move(event));
    }
    if (WaitUntil(options_.clock->Now() + RetryDelay(attempt++))) return;
  }
}

}  // namespace peregrine::checkpoint
