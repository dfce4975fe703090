// Shards in the real byte format (checkpoint/shard_format.h) for the store's tests:
// SampleShard builds one in memory (checksum unset, as the client publishes it);
// PublishShard writes one into a rank directory the way the client does (.tmp, rename).
#ifndef PEREGRINE_TESTS_AGENT_CHECKPOINT_SHARD_SAMPLES_H_
#define PEREGRINE_TESTS_AGENT_CHECKPOINT_SHARD_SAMPLES_H_

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/shard_format.h"

namespace peregrine::testing {

// A shard of `payload_bytes` bytes of segment data (two segments, a pattern seeded by
// step and rank), checksum unset; `finished` fills the checksum in as the store would.
inline std::vector<uint8_t> SampleShard(uint64_t step, uint32_t rank, uint64_t payload_bytes, bool finished = false) {
  const uint64_t first = payload_bytes / 3;
  const std::vector<uint64_t> lengths = {first, payload_bytes - first};
  absl::StatusOr<checkpoint::ShardHeader> h = checkpoint::LayoutShard(step, rank, 8, 1700000000000000000, lengths);
  REQUIRE(h.ok());
  std::vector<uint8_t> shard(checkpoint::ShardFileBytes(*h));
  checkpoint::EncodeShardHeader(*h, absl::MakeSpan(shard).subspan(0, checkpoint::kShardHeaderBytes));
  uint32_t x = static_cast<uint32_t>(step * 7919 + rank * 104729 + 1);
  for (size_t i = checkpoint::kShardHeaderBytes; i < shard.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    shard[i] = static_cast<uint8_t>(x >> 24);
  }
  if (finished) REQUIRE(checkpoint::FinishShard(absl::MakeSpan(shard)).ok());
  return shard;
}

inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Publishes `shard` into `dir` as the client does: step-N.tmp, then rename to step-N.shard.
inline std::string PublishShard(const std::string& dir, uint64_t step, const std::vector<uint8_t>& shard) {
  const std::string temp = dir + "/" + checkpoint::TempShardFileName(step);
  const std::string final_path = dir + "/" + checkpoint::ShardFileName(step);
  WriteBytes(temp, shard);
  REQUIRE(std::rename(temp.c_str(), final_path.c_str()) == 0);
  return final_path;
}

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_AGENT_CHECKPOINT_SHARD_SAMPLES_H_
