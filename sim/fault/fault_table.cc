#include "sim/fault/fault_table.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

// Version history of the fault-table file: 1 had 24-byte rank records without
// jitter_fraction; 2 added it; 3 grew link records to 32 bytes with flags (corrupt) and
// lets a link end be -1 ("every other machine"). The layout itself is in the header.

namespace peregrine::sim {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

uint64_t LoadGeneration(const FaultTableHeader* h) {
  return __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
}

// Copies `bytes` (a multiple of 8) with relaxed atomic word loads: the seqlock makes a
// torn copy detectable, the atomics keep the racing read well-defined.
void CopyWords(void* dst, const void* src, size_t bytes) {
  const uint64_t* s = static_cast<const uint64_t*>(src);
  uint64_t* d = static_cast<uint64_t*>(dst);
  for (size_t i = 0; i < bytes / 8; ++i) d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || *end != '\0' || x < 0 || x > 1 << 30) return -1;
  return static_cast<int>(x);
}

}  // namespace

RankFault FaultTableSnapshot::RankFaultFor(int machine_id, int local_rank) const {
  RankFault merged;
  if (machine_id < 0) return merged;
  for (const RankFaultEntry& e : ranks) {
    if (e.machine_id != machine_id) continue;
    if (e.local_rank != -1 && e.local_rank != local_rank) continue;
    merged.compute_slowdown = std::max(merged.compute_slowdown, e.fault.compute_slowdown);
    merged.hang |= e.fault.hang;
    merged.crash |= e.fault.crash;
    merged.nan |= e.fault.nan;
    merged.corrupt |= e.fault.corrupt;
    merged.jitter_fraction = std::max(merged.jitter_fraction, e.fault.jitter_fraction);
    merged.grad_corrupt |= e.fault.grad_corrupt;
    merged.intra_corrupt |= e.fault.intra_corrupt;
  }
  return merged;
}

LinkFault FaultTableSnapshot::LinkFaultFor(int src_machine, int dst_machine) const {
  LinkFault merged;
  if (src_machine < 0 || dst_machine < 0) return merged;
  for (const LinkFaultEntry& e : links) {
    const bool exact = e.src_machine == src_machine && e.dst_machine == dst_machine;
    const bool wildcard = src_machine != dst_machine &&
                          ((e.src_machine == src_machine && e.dst_machine == -1) ||
                           (e.src_machine == -1 && e.dst_machine == dst_machine));
    if (!exact && !wildcard) continue;
    merged.delay_us = std::max(merged.delay_us, e.fault.delay_us);
    if (e.fault.bandwidth_bytes_per_s > 0 &&
        (merged.bandwidth_bytes_per_s == 0 || e.fault.bandwidth_bytes_per_s < merged.bandwidth_bytes_per_s)) {
      merged.bandwidth_bytes_per_s = e.fault.bandwidth_bytes_per_s;
    }
    merged.corrupt |= e.fault.corrupt;
  }
  return merged;
}

void CorruptPayload(void* data, size_t bytes) {
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < bytes; i += 4) p[i] ^= 1u;
}

double JitterFactor(double fraction, uint64_t seed, uint64_t draw) {
  if (!(fraction > 0.0)) return 1.0;
  // splitmix64 of (seed, draw): 53 uniform bits -> [0, 1] -> [1 - f, 1 + f].
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t h = mix(mix(seed) ^ draw);
  const double u = static_cast<double>(h >> 11) / 9007199254740991.0;  // [0, 1]
  return 1.0 - fraction + 2.0 * fraction * u;
}

RankFaultRecord EncodeRankFault(const RankFaultEntry& entry) {
  RankFaultRecord r{};
  r.machine_id = entry.machine_id;
  r.local_rank = entry.local_rank;
  r.flags = (entry.fault.hang ? kFaultFlagHang : 0) | (entry.fault.crash ? kFaultFlagCrash : 0) |
            (entry.fault.nan ? kFaultFlagNan : 0) | (entry.fault.corrupt ? kFaultFlagCorrupt : 0) |
            (entry.fault.grad_corrupt ? kFaultFlagGradCorrupt : 0) |
            (entry.fault.intra_corrupt ? kFaultFlagIntraCorrupt : 0);
  r.compute_slowdown = entry.fault.compute_slowdown;
  r.jitter_fraction = entry.fault.jitter_fraction;
  return r;
}

RankFaultEntry DecodeRankFault(const RankFaultRecord& r) {
  RankFaultEntry e;
  e.machine_id = r.machine_id;
  e.local_rank = r.local_rank;
  e.fault.hang = (r.flags & kFaultFlagHang) != 0;
  e.fault.crash = (r.flags & kFaultFlagCrash) != 0;
  e.fault.nan = (r.flags & kFaultFlagNan) != 0;
  e.fault.corrupt = (r.flags & kFaultFlagCorrupt) != 0;
  e.fault.grad_corrupt = (r.flags & kFaultFlagGradCorrupt) != 0;
  e.fault.intra_corrupt = (r.flags & kFaultFlagIntraCorrupt) != 0;
  e.fault.compute_slowdown = r.compute_slowdown;
  e.fault.jitter_fraction = r.jitter_fraction;
  return e;
}

LinkFaultRecord EncodeLinkFault(const LinkFaultEntry& entry) {
  LinkFaultRecord r{};
  r.src_machine = entry.src_machine;
  r.dst_machine = entry.dst_machine;
  r.delay_us = entry.fault.delay_us;
  r.bandwidth_bytes_per_s = entry.fault.bandwidth_bytes_per_s;
  r.flags = entry.fault.corrupt ? kLinkFlagCorrupt : 0;
  return r;
}

LinkFaultEntry DecodeLinkFault(const LinkFaultRecord& r) {
  LinkFaultEntry e;
  e.src_machine = r.src_machine;
  e.dst_machine = r.dst_machine;
  e.fault.delay_us = r.delay_us;
  e.fault.bandwidth_bytes_per_s = r.bandwidth_bytes_per_s;
  e.fault.corrupt = (r.flags & kLinkFlagCorrupt) != 0;
  return e;
}

bool ReadMappedFaultTable(const void* base, size_t bytes, FaultTableSnapshot* out,
                          std::string* error) {
  if (bytes < sizeof(FaultTableHeader)) {
    *error = "fault table is smaller than its header";
    return false;
  }
  const auto* h = static_cast<const FaultTableHeader*>(base);
  FaultTableHeader fixed{};
  CopyWords(&fixed, h, sizeof(fixed));
  if (std::memcmp(fixed.magic, kFaultTableMagic, sizeof(kFaultTableMagic)) != 0) {
    *error = "fault table has a bad magic";
    return false;
  }
  if (fixed.version != kFaultTableVersion) {
    *error = "fault table has version " + std::to_string(fixed.version) + ", this build reads version " +
             std::to_string(kFaultTableVersion) + " only (re-create the table)";
    return false;
  }
  if (fixed.header_bytes != sizeof(FaultTableHeader)) {
    *error = "fault table header is " + std::to_string(fixed.header_bytes) + " bytes, expected " +
             std::to_string(sizeof(FaultTableHeader));
    return false;
  }
  const size_t need = sizeof(FaultTableHeader) + fixed.rank_capacity * sizeof(RankFaultRecord) +
                      fixed.link_capacity * sizeof(LinkFaultRecord);
  if (bytes < need || fixed.rank_capacity > 1u << 20 || fixed.link_capacity > 1u << 20) {
    *error = "fault table is truncated";
    return false;
  }
  const char* rank_base = static_cast<const char*>(base) + sizeof(FaultTableHeader);
  const char* link_base = rank_base + fixed.rank_capacity * sizeof(RankFaultRecord);
  std::vector<RankFaultRecord> rank_records;
  std::vector<LinkFaultRecord> link_records;
  for (int attempt = 0;; ++attempt) {
    const uint64_t g1 = LoadGeneration(h);
    if (g1 & 1) {
      if (attempt > 1000000) {
        *error = "fault table writer never finished (generation stays odd)";
        return false;
      }
      sched_yield();
      continue;
    }
    FaultTableHeader now{};
    CopyWords(&now, h, sizeof(now));
    const uint32_t rc = std::min(now.rank_count, fixed.rank_capacity);
    const uint32_t lc = std::min(now.link_count, fixed.link_capacity);
    rank_records.resize(rc);
    link_records.resize(lc);
    CopyWords(rank_records.data(), rank_base, rc * sizeof(RankFaultRecord));
    CopyWords(link_records.data(), link_base, lc * sizeof(LinkFaultRecord));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (LoadGeneration(h) != g1) continue;
    out->generation = g1;
    out->ranks.clear();
    out->links.clear();
    for (const auto& r : rank_records) out->ranks.push_back(DecodeRankFault(r));
    for (const auto& l : link_records) out->links.push_back(DecodeLinkFault(l));
    return true;
  }
}

FaultTableReader::FaultTableReader(std::string path) : path_(std::move(path)) {}

FaultTableReader::~FaultTableReader() {
  if (base_ != nullptr) munmap(const_cast<void*>(base_), bytes_);
}

void FaultTableReader::TryMap() {
  const int64_t now = MonotonicNs();
  if (now < next_open_attempt_ns_) return;
  next_open_attempt_ns_ = now + 1000000000;
  int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error_ = "cannot open fault table " + path_ + ": " + std::strerror(errno);
    return;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(FaultTableHeader)) {
    error_ = "fault table " + path_ + " is too small";
    close(fd);
    return;
  }
  void* p = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    error_ = "cannot map fault table " + path_ + ": " + std::strerror(errno);
    return;
  }
  FaultTableSnapshot probe;
  if (!ReadMappedFaultTable(p, st.st_size, &probe, &error_)) {
    munmap(p, st.st_size);
    return;
  }
  base_ = p;
  bytes_ = st.st_size;
  error_.clear();
}

const FaultTableSnapshot& FaultTableReader::Poll() {
  if (path_.empty()) return snapshot_;
  if (base_ == nullptr) {
    TryMap();
    if (base_ == nullptr) return snapshot_;
  }
  const uint64_t g = LoadGeneration(static_cast<const FaultTableHeader*>(base_));
  if (g == seen_generation_) return snapshot_;
  FaultTableSnapshot fresh;
  if (ReadMappedFaultTable(base_, bytes_, &fresh, &error_)) {
    snapshot_ = std::move(fresh);
    seen_generation_ = snapshot_.generation;
  }
  return snapshot_;
}

int MachineIdFromEnv() { return EnvInt("PEREGRINE_MACHINE_ID"); }
int LocalRankFromEnv() { return EnvInt("LOCAL_RANK"); }

}  // namespace peregrine::sim
