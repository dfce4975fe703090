// The byte format of one checkpoint shard: the state one rank saved at one step, as the
// client library writes it into the agent's store, the agent backs it up to peers and
// persists it, and a restarted rank reads it back. One format everywhere, so a shard is
// copied between those places byte for byte and checked the same way.
//
// A shard is a fixed 4 KiB header followed by the payload. The payload is a list of
// segments (opaque bytes; the Python client stores a pickled skeleton then one segment per
// tensor) laid out back to back, each starting at a 64-byte aligned offset. The header
// names the job-wide step, the global rank, the segment table, and the CRC-32C of the
// payload. The writer leaves the checksum unset; the store fills it in (FinishShard)
// before the shard counts as stored, so a copy never waits for it. A shard whose checksum
// is unset, or does not match, is never loaded.
//
// Pure functions over byte spans; no I/O. Thread-safe. Errors are kInvalidArgument or
// kDataLoss naming what is wrong (bad magic, truncated, checksum mismatch).
#ifndef PEREGRINE_CHECKPOINT_SHARD_FORMAT_H_
#define PEREGRINE_CHECKPOINT_SHARD_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace peregrine::checkpoint {

inline constexpr size_t kShardHeaderBytes = 4096;
inline constexpr size_t kSegmentAlignment = 64;
// The segment table must fit the header: 4096 - fixed fields, 16 bytes per segment.
inline constexpr uint32_t kMaxSegments = 250;
inline constexpr uint32_t kShardFormatVersion = 1;

struct ShardHeader {
  uint64_t step = 0;
  uint32_t global_rank = 0;
  uint32_t world_size = 0;
  int64_t created_unix_nanos = 0;
  uint64_t payload_bytes = 0;       // bytes after the header (segments and their padding)
  bool checksum_set = false;        // FinishShard has run
  uint32_t payload_crc32c = 0;      // valid when checksum_set
  struct Segment {
    uint64_t offset = 0;            // from the start of the payload
    uint64_t length = 0;
  };
  std::vector<Segment> segments;
};

// The layout of a shard holding segments of these lengths: offsets aligned, the payload
// size, and the total file size. kInvalidArgument above kMaxSegments.
absl::StatusOr<ShardHeader> LayoutShard(uint64_t step, uint32_t global_rank, uint32_t world_size,
                                        int64_t created_unix_nanos, absl::Span<const uint64_t> segment_lengths);
inline uint64_t ShardFileBytes(const ShardHeader& h) { return kShardHeaderBytes + h.payload_bytes; }

// Writes `h` into `out` (exactly kShardHeaderBytes bytes), with a CRC of the header itself.
void EncodeShardHeader(const ShardHeader& h, absl::Span<uint8_t> out);
// Reads a header; kDataLoss on a bad magic, version, header CRC or segment table.
absl::StatusOr<ShardHeader> DecodeShardHeader(absl::Span<const uint8_t> bytes);

// CRC-32C (Castagnoli) of `data`, continuing from `crc` (0 to start). Uses SSE4.2 when
// the CPU has it.
uint32_t Crc32c(absl::Span<const uint8_t> data, uint32_t crc = 0);

// Computes the payload checksum of a whole shard in memory (header + payload) and writes
// it into its header. kDataLoss when the header is bad or the shard is truncated.
absl::Status FinishShard(absl::Span<uint8_t> shard);
// Checks a whole shard in memory: header, size and payload checksum (which must be set).
// Returns the header.
absl::StatusOr<ShardHeader> VerifyShard(absl::Span<const uint8_t> shard);

// File names in a store directory: "step-<20 digits>.shard" (so names sort by step), the
// in-progress "step-<...>.tmp", and a skipped save's marker "step-<...>.skipped".
std::string ShardFileName(uint64_t step);
std::string TempShardFileName(uint64_t step);
std::string SkippedMarkerName(uint64_t step);
// The step of a complete shard's file name; nullopt-like false for any other name.
bool ParseShardFileName(const std::string& name, uint64_t* step);

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_CHECKPOINT_SHARD_FORMAT_H_
