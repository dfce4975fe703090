// ParallelCopy: copies a list of (destination, source, length) pieces with up to four
// threads: the caller plus workers created on first use and reused by every later copy
// (a save should not pay for thread creation). Small copies run on the caller alone.
//
// Thread safety: Copy may be called from any thread; concurrent calls are serialised.
// After fork() the child builds its own workers (the parent's do not exist there).
// Ownership: the pieces' memory belongs to the caller and must stay valid during Copy.
#ifndef PEREGRINE_CLIENT_COPY_POOL_H_
#define PEREGRINE_CLIENT_COPY_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace peregrine::client {

struct CopyPiece {
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t length = 0;
};

// Below this many bytes a copy runs on the calling thread only.
inline constexpr uint64_t kParallelCopyMinBytes = uint64_t{16} << 20;
inline constexpr int kMaxCopyThreads = 4;

// Copies every piece (memcpy semantics; pieces must not overlap). Returns when all
// bytes are in place.
void ParallelCopy(const std::vector<CopyPiece>& pieces);

}  // namespace peregrine::client

#endif  // PEREGRINE_CLIENT_COPY_POOL_H_
