// The client tests' store: a TempDir named by PEREGRINE_CHECKPOINT_DIR (set in-process,
// as the agent sets it for one rank), the agent's FinishShard in-process, and helpers that
// save and load strings through the C ABI. Tests only.
#ifndef PEREGRINE_TESTS_CLIENT_CLIENT_STORE_H_
#define PEREGRINE_TESTS_CLIENT_CLIENT_STORE_H_

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "checkpoint/shard_format.h"
#include "client/peregrine_client.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::client_testing {

namespace ckpt = checkpoint;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

// A store directory named by the environment, as the agent sets it for one rank.
struct Store {
  TempDir dir{"client-store"};
  // mode: PEREGRINE_CHECKPOINT_MODE for the saves ("copy" or "snapshot").
  explicit Store(const char* mode = "copy") {
    setenv("PEREGRINE_CHECKPOINT_MODE", mode, 1);
    setenv("PEREGRINE_CHECKPOINT_DIR", dir.path().c_str(), 1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
    unsetenv("PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES");
    unsetenv("PEREGRINE_RESUME_STEP");
  }
  ~Store() {
    unsetenv("PEREGRINE_CHECKPOINT_DIR");
    unsetenv("PEREGRINE_CHECKPOINT_MODE");
  }
  std::string Shard(uint64_t step) const { return dir.Path(ckpt::ShardFileName(step)); }
  std::string Temp(uint64_t step) const { return dir.Path(ckpt::TempShardFileName(step)); }
  std::string Skipped(uint64_t step) const { return dir.Path(ckpt::SkippedMarkerName(step)); }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.path())) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
};

// What the agent's store does before a shard counts as stored.
inline void Finish(const std::string& path) {
  std::string bytes = ReadFile(path);
  REQUIRE(ckpt::FinishShard(absl::MakeSpan(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size())).ok());
  WriteFile(path, bytes);
}

inline std::string Pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

inline int SaveStrings(uint64_t step, const std::vector<std::string>& segments, std::string* message = nullptr) {
  std::vector<const void*> data;
  std::vector<uint64_t> lengths;
  for (const auto& s : segments) {
    data.push_back(s.data());
    lengths.push_back(s.size());
  }
  char err[512] = "unchanged";
  const int rc = pg_save(step, data.data(), lengths.data(), static_cast<uint32_t>(segments.size()), err, sizeof(err));
  if (message != nullptr) *message = err;
  return rc;
}

inline std::vector<std::string> LoadStrings(uint64_t step) {
  pg_shard* shard = nullptr;
  char err[512] = "";
  const int rc = pg_load(step, &shard, err, sizeof(err));
  INFO(err);
  REQUIRE(rc == PG_OK);
  REQUIRE(pg_shard_step(shard) == step);
  std::vector<std::string> out;
  for (uint32_t i = 0; i < pg_shard_segment_count(shard); ++i) {
    uint64_t length = 0;
    const void* p = pg_shard_segment(shard, i, &length);
    out.emplace_back(static_cast<const char*>(p), length);
  }
  pg_shard_close(shard);
  return out;
}

}  // namespace peregrine::client_testing

#endif  // PEREGRINE_TESTS_CLIENT_CLIENT_STORE_H_
