// Shard files on disk (in shared memory): finishing a published shard in place, verifying
// one, reading its header, and writing one received in chunks. Each call maps or opens the
// file itself and closes it before returning. Thread-safe (no shared state).
// Errors: kNotFound when the file is missing, kDataLoss when its bytes are not a valid
// shard (the message names the file), kInternal for other I/O failures.
#ifndef PEREGRINE_AGENT_CHECKPOINT_SHARD_FILES_H_
#define PEREGRINE_AGENT_CHECKPOINT_SHARD_FILES_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "checkpoint/shard_format.h"

namespace peregrine::checkpoint {

// Reads and decodes the header only (the checksum is not checked).
absl::StatusOr<ShardHeader> ReadShardFileHeader(const std::string& path);
// Computes the payload checksum over a shared mapping and writes it into the header.
absl::Status FinishShardFile(const std::string& path);
// Checks header, size and payload checksum (which must be set); returns the header.
absl::StatusOr<ShardHeader> VerifyShardFile(const std::string& path);
// VerifyShardFile, and the header names `step` and `global_rank`.
absl::StatusOr<ShardHeader> VerifyShardFileFor(const std::string& path, uint64_t step, uint32_t global_rank);

// A shard arriving in chunks: a new file of exactly `total_bytes`, written at offsets
// in order. Close() checks that every byte arrived. The file is removed by the
// destructor unless Release() was called after a successful Close().
class ShardFileWriter {
 public:
  static absl::StatusOr<ShardFileWriter> Create(const std::string& path, uint64_t total_bytes);
  ShardFileWriter(ShardFileWriter&& other) noexcept;
  ShardFileWriter& operator=(ShardFileWriter&&) = delete;
  ~ShardFileWriter();

  // kDataLoss when `offset` is not where the previous chunk ended or the chunk runs past
  // the total.
  absl::Status Append(uint64_t offset, absl::Span<const uint8_t> data);
  absl::Status Close();
  void Release() { keep_ = true; }
  uint64_t written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  ShardFileWriter(std::string path, int fd, uint64_t total) : path_(std::move(path)), fd_(fd), total_(total) {}
  std::string path_;
  int fd_ = -1;
  uint64_t total_ = 0;
  uint64_t written_ = 0;
  bool keep_ = false;
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_SHARD_FILES_H_
