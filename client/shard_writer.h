// WriteShard: writes one shard file into a rank's store directory from a plan prepared
// beforehand: claim the agent's free buffer or create step-N.tmp, size and allocate it,
// map it, copy the segments, write the header, rename it to step-N.shard. No room (ENOSPC,
// EDQUOT, EFBIG) writes the step-N.skipped marker instead. It is the one writer of both
// save modes: the copy mode runs it in the trainer (segments copied in parallel), the
// snapshot mode in a forked child (client/snapshot.h), where nothing may allocate, lock
// or touch the language runtime.
//
// Contract: with parallel == false WriteShard only makes system calls and copies bytes
// (no malloc, no locks, no stdio, no C++ exceptions): it is safe in the child of fork()
// of a multi-threaded process. Everything it needs (paths, the encoded header, the copy
// list) is in the ShardPlan, built before. The outcome is written into a fixed-size
// WriteOutcome the caller owns (shared memory in the snapshot mode).
// Errors: the outcome's code is PG_OK (published), PG_SKIPPED (the marker holds the
// reason) or PG_ERROR; message says what failed and where. A failure never leaves the
// .tmp file behind, and never a partial .shard (the rename is the publication).
#ifndef PEREGRINE_CLIENT_SHARD_WRITER_H_
#define PEREGRINE_CLIENT_SHARD_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace peregrine::client {

// One range of the shard file: `length` bytes at `offset`, copied from `src`, or zeroed
// when src is null (alignment padding).
struct ShardRange {
  uint64_t offset = 0;
  const void* src = nullptr;
  uint64_t length = 0;
};

struct ShardPlan {
  uint64_t step = 0;
  uint64_t bytes = 0;              // the file's size (header + payload)
  std::string dir;                 // the rank's store directory
  std::string free_buffer;         // a free-*.buf to claim by rename first ("" for none)
  std::string tmp_path;            // dir/step-N.tmp
  std::string shard_path;          // dir/step-N.shard
  std::string marker_path;         // dir/step-N.skipped
  std::string marker_tmp_path;     // dir/step-N.skipped.writing
  std::vector<uint8_t> header;     // the encoded header (checksum unset), written at offset 0
  std::vector<ShardRange> ranges;  // the payload, in file order, covering every payload byte
  // After copying each piece, drop this process's mapping of the whole source pages inside
  // it (MADV_DONTNEED on its private view). Only in a forked child that never reads them
  // again (the parent's memory is untouched), and only when no two sources overlap (a
  // released page reads back as zeros). Never in the trainer itself.
  bool release_sources = false;
};

struct WriteOutcome {
  int code = 0;          // PG_OK, PG_SKIPPED or PG_ERROR
  char message[1024];    // NUL-terminated; empty on PG_OK
};

// Writes the shard as described above. parallel: copy with the process's copy threads
// (client/copy_pool.h); false: on the calling thread only (the snapshot child).
void WriteShard(const ShardPlan& plan, bool parallel, WriteOutcome* out);

}  // namespace peregrine::client

#endif  // PEREGRINE_CLIENT_SHARD_WRITER_H_
