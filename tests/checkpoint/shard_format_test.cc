#include "checkpoint/shard_format.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

namespace peregrine::checkpoint {
namespace {

// A whole shard in memory: header then the segments at their offsets.
std::vector<uint8_t> MakeShard(const std::vector<std::string>& segments, uint64_t step = 42) {
  std::vector<uint64_t> lengths;
  for (const std::string& s : segments) lengths.push_back(s.size());
  absl::StatusOr<ShardHeader> h = LayoutShard(step, 3, 8, 1700000000000000000, lengths);
  REQUIRE(h.ok());
  std::vector<uint8_t> shard(ShardFileBytes(*h), 0xEE);
  EncodeShardHeader(*h, absl::MakeSpan(shard).subspan(0, kShardHeaderBytes));
  for (size_t i = 0; i < segments.size(); ++i) {
    std::memcpy(shard.data() + kShardHeaderBytes + h->segments[i].offset, segments[i].data(), segments[i].size());
  }
  return shard;
}

TEST_CASE("CRC-32C matches the standard check value and continues across calls", "[unit]") {
  const std::string check = "123456789";
  const auto bytes = absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(check.data()), check.size());
  CHECK(Crc32c(bytes) == 0xE3069283u);  // RFC 3720's CRC-32C check value
  CHECK(Crc32c(bytes.subspan(4), Crc32c(bytes.subspan(0, 4))) == 0xE3069283u);
  // Long inputs exercise the 8-byte path; every split point gives the same result.
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  const uint32_t whole = Crc32c(data);
  for (size_t cut : {1, 7, 8, 9, 500, 999}) {
    CHECK(Crc32c(absl::MakeConstSpan(data).subspan(cut), Crc32c(absl::MakeConstSpan(data).subspan(0, cut))) == whole);
  }
}

TEST_CASE("A shard round-trips: layout, header, checksum, segments", "[unit]") {
  std::vector<uint8_t> shard = MakeShard({"skeleton", std::string(100, 'w'), "", std::string(65, 'm')});
  // Before the store finishes it, a shard is not loadable.
  absl::StatusOr<ShardHeader> unfinished = VerifyShard(shard);
  REQUIRE_FALSE(unfinished.ok());
  CHECK(unfinished.status().message().find("checksum not set") != std::string::npos);

  REQUIRE(FinishShard(absl::MakeSpan(shard)).ok());
  absl::StatusOr<ShardHeader> h = VerifyShard(shard);
  REQUIRE(h.ok());
  CHECK(h->step == 42);
  CHECK(h->global_rank == 3);
  CHECK(h->world_size == 8);
  CHECK(h->checksum_set);
  REQUIRE(h->segments.size() == 4);
  for (const ShardHeader::Segment& s : h->segments) CHECK(s.offset % kSegmentAlignment == 0);
  CHECK(std::string(reinterpret_cast<const char*>(shard.data() + kShardHeaderBytes + h->segments[3].offset),
                    h->segments[3].length) == std::string(65, 'm'));
  CHECK(h->segments[2].length == 0);
}

TEST_CASE("A corrupt, truncated or foreign shard is refused with the reason", "[unit]") {
  std::vector<uint8_t> good = MakeShard({"state", std::string(4000, 'x')});
  REQUIRE(FinishShard(absl::MakeSpan(good)).ok());
  struct Case {
    const char* name;
    void (*damage)(std::vector<uint8_t>&);
    const char* message;
  };
  const Case cases[] = {
      {"payload bit flip", [](std::vector<uint8_t>& s) { s[kShardHeaderBytes + 100] ^= 0x10; }, "payload checksum mismatch"},
      {"header bit flip", [](std::vector<uint8_t>& s) { s[20] ^= 0x01; }, "header checksum mismatch"},
      {"truncated payload", [](std::vector<uint8_t>& s) { s.resize(s.size() - 1); }, "its header says"},
      {"truncated header", [](std::vector<uint8_t>& s) { s.resize(100); }, "header truncated"},
      {"not a shard", [](std::vector<uint8_t>& s) { std::memcpy(s.data(), "GARBAGE!", 8); }, "bad magic"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    std::vector<uint8_t> s = good;
    c.damage(s);
    absl::StatusOr<ShardHeader> h = VerifyShard(s);
    REQUIRE_FALSE(h.ok());
    CHECK(h.status().code() == absl::StatusCode::kDataLoss);
    CHECK(h.status().message().find(c.message) != std::string::npos);
  }
}

TEST_CASE("Too many segments is a clear error", "[unit]") {
  std::vector<uint64_t> lengths(kMaxSegments + 1, 8);
  absl::StatusOr<ShardHeader> h = LayoutShard(1, 0, 1, 0, lengths);
  REQUIRE_FALSE(h.ok());
  CHECK(h.status().message().find("at most 250 segments") != std::string::npos);
  lengths.pop_back();
  CHECK(LayoutShard(1, 0, 1, 0, lengths).ok());
}

TEST_CASE("Shard file names sort by step and parse back", "[unit]") {
  CHECK(ShardFileName(7) == "step-00000000000000000007.shard");
  CHECK(ShardFileName(7) < ShardFileName(10));
  uint64_t step = 0;
  CHECK(ParseShardFileName(ShardFileName(18446744073709551615ull), &step));
  CHECK(step == 18446744073709551615ull);
  for (const char* bad : {"step-7.shard", "step-00000000000000000007.tmp", "step-0000000000000000000x.shard",
                          "free-0.buf", "step-99999999999999999999.shard", ""}) {
    INFO(bad);
    CHECK_FALSE(ParseShardFileName(bad, &step));
  }
  CHECK(TempShardFileName(7) == "step-00000000000000000007.tmp");
  CHECK(SkippedMarkerName(7) == "step-00000000000000000007.skipped");
}

}  // namespace
}  // namespace peregrine::checkpoint
