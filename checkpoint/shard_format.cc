#include "checkpoint/shard_format.h"

#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace peregrine::checkpoint {
namespace {

// Header layout (little-endian), offsets in bytes:
//   0 magic "PGSHARD1" | 8 version u32 | 12 header bytes u32 | 16 step u64
//   24 global rank u32 | 28 world size u32 | 32 created ns i64 | 40 payload bytes u64
//   48 segment count u32 | 52 flags u32 (bit 0: checksum set) | 56 payload crc u32
//   60 header crc u32 (of bytes 0..kShardHeaderBytes with this field zero)
//   64 segment table: offset u64, length u64 per segment
constexpr char kMagic[8] = {'P', 'G', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr size_t kTableOffset = 64;
constexpr size_t kHeaderCrcOffset = 60;
constexpr uint32_t kFlagChecksumSet = 1;
static_assert(kTableOffset + 16 * kMaxSegments <= kShardHeaderBytes);

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Slicing-by-8 tables for the reflected Castagnoli polynomial.
struct CrcTables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  CrcTables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

uint32_t Crc32cSoftware(const uint8_t* p, size_t n, uint32_t crc) {
  static const CrcTables tables;
  const auto& t = tables.t;
  while (n >= 8) {
    const uint64_t w = Get64(p) ^ crc;
    crc = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
          t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

uint32_t HeaderCrc(absl::Span<const uint8_t> header) {
  uint8_t zero[4] = {0, 0, 0, 0};
  uint32_t crc = Crc32c(header.subspan(0, kHeaderCrcOffset));
  crc = Crc32c(absl::MakeConstSpan(zero, 4), crc);
  return Crc32c(header.subspan(kHeaderCrcOffset + 4, kShardHeaderBytes - kHeaderCrcOffset - 4), crc);
}

uint64_t AlignUp(uint64_t v) { return (v + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment; }

}  // namespace

uint32_t Crc32c(absl::Span<const uint8_t> data, uint32_t crc) {
  crc = ~crc;
#if defined(__x86_64__)
  if (HaveSse42()) return ~Crc32cHardware(data.data(), data.size(), crc);
#endif
  return ~Crc32cSoftware(data.data(), data.size(), crc);
}

absl::StatusOr<ShardHeader> LayoutShard(uint64_t step, uint32_t global_rank, uint32_t world_size,
                                        int64_t created_unix_nanos, absl::Span<const uint64_t> segment_lengths) {
  if (segment_lengths.size() > kMaxSegments) {
    return absl::InvalidArgumentError(absl::StrCat("a shard holds at most ", kMaxSegments, " segments, not ",
                                                   segment_lengths.size(), " (merge small tensors)"));
  }
  ShardHeader h;
  h.step = step;
  h.global_rank = global_rank;
  h.world_size = world_size;
  h.created_unix_nanos = created_unix_nanos;
  uint64_t offset = 0;
  for (uint64_t len : segment_lengths) {
    h.segments.push_back({offset, len});
    offset = AlignUp(offset + len);
  }
  h.payload_bytes = offset;
  return h;
}

void EncodeShardHeader(const ShardHeader& h, absl::Span<uint8_t> out) {
  std::memset(out.data(), 0, kShardHeaderBytes);
  uint8_t* p = out.data();
  std::memcpy(p, kMagic, 8);
  Put32(p + 8, kShardFormatVersion);
  Put32(p + 12, kShardHeaderBytes);
  Put64(p + 16, h.step);
  Put32(p + 24, h.global_rank);
  Put32(p + 28, h.world_size);
  Put64(p + 32, static_cast<uint64_t>(h.created_unix_nanos));
  Put64(p + 40, h.payload_bytes);
  Put32(p + 48, static_cast<uint32_t>(h.segments.size()));
  Put32(p + 52, h.checksum_set ? kFlagChecksumSet : 0);
  Put32(p + 56, h.payload_crc32c);
  for (size_t i = 0; i < h.segments.size(); ++i) {
    Put64(p + kTableOffset + 16 * i, h.segments[i].offset);
    Put64(p + kTableOffset + 16 * i + 8, h.segments[i].length);
  }
  Put32(p + kHeaderCrcOffset, HeaderCrc(absl::MakeConstSpan(out.data(), kShardHeaderBytes)));
}

absl::StatusOr<ShardHeader> DecodeShardHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kShardHeaderBytes) {
    return absl::DataLossError(absl::StrCat("shard header truncated: ", bytes.size(), " of ", kShardHeaderBytes, " bytes"));
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 8) != 0) return absl::DataLossError("not a checkpoint shard (bad magic)");
  if (Get32(p + 8) != kShardFormatVersion) {
    return absl::DataLossError(absl::StrCat("shard format version ", Get32(p + 8), " is not ", kShardFormatVersion));
  }
  if (Get32(p + kHeaderCrcOffset) != HeaderCrc(bytes.subspan(0, kShardHeaderBytes))) {
    return absl::DataLossError("shard header checksum mismatch");
  }
  ShardHeader h;
  h.step = Get64(p + 16);
  h.global_rank = Get32(p + 24);
  h.world_size = Get32(p + 28);
  h.created_unix_nanos = static_cast<int64_t>(Get64(p + 32));
  h.payload_bytes = Get64(p + 40);
  const uint32_t n = Get32(p + 48);
  h.checksum_set = (Get32(p + 52) & kFlagChecksumSet) != 0;
  h.payload_crc32c = Get32(p + 56);
  if (n > kMaxSegments) return absl::DataLossError(absl::StrCat("shard segment count ", n, " above ", kMaxSegments));
  for (uint32_t i = 0; i < n; ++i) {
    ShardHeader::Segment s{Get64(p + kTableOffset + 16 * i), Get64(p + kTableOffset + 16 * i + 8)};
    if (s.offset > h.payload_bytes || s.length > h.payload_bytes - s.offset) {
      return absl::DataLossError(absl::StrCat("shard segment ", i, " lies outside the payload"));
    }
    h.segments.push_back(s);
  }
  return h;
}

absl::Status FinishShard(absl::Span<uint8_t> shard) {
  absl::StatusOr<ShardHeader> h = DecodeShardHeader(shard);
  if (!h.ok()) return h.status();
  if (shard.size() < ShardFileBytes(*h)) {
    return absl::DataLossError(absl::StrCat("shard truncated: ", shard.size(), " of ", ShardFileBytes(*h), " bytes"));
  }
  h->payload_crc32c = Crc32c(absl::MakeConstSpan(shard.data() + kShardHeaderBytes, h->payload_bytes));
  h->checksum_set = true;
  EncodeShardHeader(*h, shard.subspan(0, kShardHeaderBytes));
  return absl::OkStatus();
}

absl::StatusOr<ShardHeader> VerifyShard(absl::Span<const uint8_t> shard) {
  absl::StatusOr<ShardHeader> h = DecodeShardHeader(shard);
  if (!h.ok()) return h.status();
  if (shard.size() != ShardFileBytes(*h)) {
    return absl::DataLossError(absl::StrCat("shard is ", shard.size(), " bytes, its header says ", ShardFileBytes(*h)));
  }
  if (!h->checksum_set) return absl::DataLossError("shard checksum not set (the store never finished it)");
  const uint32_t crc = Crc32c(absl::MakeConstSpan(shard.data() + kShardHeaderBytes, h->payload_bytes));
  if (crc != h->payload_crc32c) {
    return absl::DataLossError(absl::StrFormat("shard payload checksum mismatch: %08x, header says %08x", crc,
                                               h->payload_crc32c));
  }
  return h;
}

std::string ShardFileName(uint64_t step) { return absl::StrFormat("step-%020d.shard", step); }
std::string TempShardFileName(uint64_t step) { return absl::StrFormat("step-%020d.tmp", step); }
std::string SkippedMarkerName(uint64_t step) { return absl::StrFormat("step-%020d.skipped", step); }

bool ParseShardFileName(const std::string& name, uint64_t* step) {
  constexpr size_t kDigits = 20;
  if (name.size() != 5 + kDigits + 6 || name.compare(0, 5, "step-") != 0 || name.compare(5 + kDigits, 6, ".shard") != 0) {
    return false;
  }
  uint64_t v = 0;
  for (size_t i = 5; i < 5 + kDigits; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    const uint64_t d = static_cast<uint64_t>(name[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *step = v;
  return true;
}

}  // namespace peregrine::checkpoint
