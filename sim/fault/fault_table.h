// Fault table of the stand-in cluster: which injected faults are active right now.
//
// A small memory-mapped file (path in env PEREGRINE_SIM_FAULTS; absent means no faults),
// written by a controller process (sim/fault/fault_control.h) and read live by every
// training process (this header). Faults are keyed by PHYSICAL identity, never by rank:
// machine id (env PEREGRINE_MACHINE_ID) and local rank (env LOCAL_RANK; -1 in a fault =
// every GPU of that machine), so a fault disappears when its machine is replaced.
//
// File layout (version 3, little-endian, all fields naturally aligned, 8-byte words). A
// reader accepts exactly its own version and names both versions when it rejects a file
// (CreateFaultTable re-creates a table left by an older build; history in the .cc).
//   offset 0, 64 bytes: FaultTableHeader
//     char     magic[8]        "PRGFLT\0\1"
//     uint32_t version         3
//     uint32_t header_bytes    64
//     uint32_t rank_capacity   kRankFaultCapacity
//     uint32_t link_capacity   kLinkFaultCapacity
//     uint64_t generation      seqlock: odd while a writer is changing the table; bumped
//                              by 2 per completed change
//     uint32_t rank_count      live RankFaultRecords
//     uint32_t link_count      live LinkFaultRecords
//     uint8_t  reserved[24]
//   offset 64: RankFaultRecord[rank_capacity], 32 bytes each
//     int32_t machine_id; int32_t local_rank (-1 = whole machine);
//     uint32_t flags (bit 0 hang, 1 crash, 2 nan, 3 corrupt, 4 grad_corrupt,
//                     5 intra_corrupt); uint32_t reserved;
//     double compute_slowdown (>= 1)
//     double jitter_fraction (in [0, 1): compute stretched by a factor uniform in
//            [1 - j, 1 + j], see JitterFactor)
//   then: LinkFaultRecord[link_capacity], 32 bytes each (directional src -> dst; an end
//   of -1 means every machine other than the other end: a machine's NIC)
//     int32_t src_machine; int32_t dst_machine; int64_t delay_us;
//     double bandwidth_bytes_per_s (0 = unlimited);
//     uint32_t flags (bit 0 corrupt); uint32_t reserved
// Writers serialise with flock(LOCK_EX) and bracket every change with the generation
// seqlock; readers never lock: they copy with atomic word loads and retry while the
// generation is odd or moved during the copy.
//
// No Abseil dependency: this part is linked into the stand-in libnccl.so.2.
// Thread safety: FaultTableReader is thread-compatible (callers serialise Poll()); the
// snapshot it returns stays valid until the next Poll(). Value types are thread-compatible.
#ifndef PEREGRINE_SIM_FAULT_FAULT_TABLE_H_
#define PEREGRINE_SIM_FAULT_FAULT_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace peregrine::sim {

inline constexpr char kFaultTableMagic[8] = {'P', 'R', 'G', 'F', 'L', 'T', '\0', '\1'};
inline constexpr uint32_t kFaultTableVersion = 3;
inline constexpr uint32_t kRankFaultCapacity = 256;
inline constexpr uint32_t kLinkFaultCapacity = 256;

inline constexpr uint32_t kFaultFlagHang = 1u << 0;
inline constexpr uint32_t kFaultFlagCrash = 1u << 1;
inline constexpr uint32_t kFaultFlagNan = 1u << 2;
inline constexpr uint32_t kFaultFlagCorrupt = 1u << 3;
inline constexpr uint32_t kFaultFlagGradCorrupt = 1u << 4;
inline constexpr uint32_t kFaultFlagIntraCorrupt = 1u << 5;
inline constexpr uint32_t kLinkFlagCorrupt = 1u << 0;

struct FaultTableHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t rank_capacity;
  uint32_t link_capacity;
  uint64_t generation;
  uint32_t rank_count;
  uint32_t link_count;
  uint8_t reserved[24];
};
static_assert(sizeof(FaultTableHeader) == 64);

struct RankFaultRecord {
  int32_t machine_id;
  int32_t local_rank;
  uint32_t flags;
  uint32_t reserved;
  double compute_slowdown;
  double jitter_fraction;
};
static_assert(sizeof(RankFaultRecord) == 32);

struct LinkFaultRecord {
  int32_t src_machine;
  int32_t dst_machine;
  int64_t delay_us;
  double bandwidth_bytes_per_s;
  uint32_t flags;
  uint32_t reserved;
};
static_assert(sizeof(LinkFaultRecord) == 32);

// Total file size of a table with the default capacities.
inline constexpr size_t kFaultTableBytes = sizeof(FaultTableHeader) +
                                           kRankFaultCapacity * sizeof(RankFaultRecord) +
                                           kLinkFaultCapacity * sizeof(LinkFaultRecord);

// A fault on one GPU (or every GPU of a machine). The default value means "healthy".
struct RankFault {
  double compute_slowdown = 1.0;  // the trainer stretches its compute by this factor
  bool hang = false;              // the trainer blocks until the fault is cleared
  bool crash = false;             // the trainer prints a CUDA-style error and aborts
  bool nan = false;               // the rank contributes NaN (floating types) to NCCL ops
  bool corrupt = false;           // the rank contributes values scaled by (1 + 1e-3)
  // Random per-iteration noise: the trainer stretches each iteration's compute by a
  // factor uniform in [1 - jitter_fraction, 1 + jitter_fraction] (JitterFactor), on top
  // of compute_slowdown. In [0, 1); 0 = none.
  double jitter_fraction = 0.0;
  // Silent data corruption in the training step's backward kernel only: the trainer scales
  // this rank's gradient contributions by 64 (a flipped exponent bit). The self-tests (EUD,
  // NCCL checks) and the alignment reference step do not run that kernel and see nothing.
  bool grad_corrupt = false;
  // A bad intra-machine transport (NVLink / NVSwitch): every payload this GPU sends to a
  // GPU of the SAME machine arrives with bits flipped (sim::CorruptPayload). Its own
  // compute, its self-test and its traffic to other machines are unaffected.
  bool intra_corrupt = false;
  bool Any() const {
    return compute_slowdown != 1.0 || hang || crash || nan || corrupt || grad_corrupt || intra_corrupt ||
           jitter_fraction != 0.0;
  }
  bool operator==(const RankFault&) const = default;
};

// A fault on the directional link src machine -> dst machine. Default: healthy.
struct LinkFault {
  int64_t delay_us = 0;               // extra latency per message
  double bandwidth_bytes_per_s = 0;   // cap on payload rate; 0 = unlimited
  bool corrupt = false;               // payload arrives with bits flipped (CorruptPayload)
  bool Any() const { return delay_us != 0 || bandwidth_bytes_per_s != 0 || corrupt; }
  bool operator==(const LinkFault&) const = default;
};

struct RankFaultEntry {
  int machine_id = 0;
  int local_rank = -1;
  RankFault fault;
  bool operator==(const RankFaultEntry&) const = default;
};

struct LinkFaultEntry {
  int src_machine = 0;  // -1: every machine other than dst_machine
  int dst_machine = 0;  // -1: every machine other than src_machine
  LinkFault fault;
  bool operator==(const LinkFaultEntry&) const = default;
};

// A consistent copy of the table.
struct FaultTableSnapshot {
  uint64_t generation = 0;
  std::vector<RankFaultEntry> ranks;
  std::vector<LinkFaultEntry> links;

  // The fault that applies to GPU (machine_id, local_rank): the machine-wide entry
  // (local_rank -1) merged with the GPU's own entry (flags OR-ed, largest slowdown,
  // largest jitter).
  // machine_id < 0 (identity unknown) never matches.
  RankFault RankFaultFor(int machine_id, int local_rank) const;
  // The fault on the directional link src -> dst: the exact entry merged with the
  // wildcard entries (src, -1) and (-1, dst) when src != dst (largest delay, smallest
  // non-zero bandwidth cap, corrupt OR-ed); healthy when absent or unknown (< 0).
  LinkFault LinkFaultFor(int src_machine, int dst_machine) const;
};

// The compute stretch of a jittering GPU for one draw: uniform in
// [1 - fraction, 1 + fraction], a pure function of (seed, draw) (the trainer uses its
// global rank as the seed and the step as the draw, so a rank's noise is reproducible and
// ranks are independent). fraction <= 0 gives exactly 1.
double JitterFactor(double fraction, uint64_t seed, uint64_t draw);

// Flips the lowest bit of every 4th byte (offsets 0, 4, 8, ...) of a payload in place: the
// lowest mantissa bit of each fp32 element (of every element of 2-byte types at even
// positions, of one mantissa byte of each fp64), so a bit-exact check sees it while finite
// training values stay finite. Applying it twice restores the payload.
void CorruptPayload(void* data, size_t bytes);

// Encodes/decodes one record (shared by reader and writer).
RankFaultRecord EncodeRankFault(const RankFaultEntry& entry);
RankFaultEntry DecodeRankFault(const RankFaultRecord& record);
LinkFaultRecord EncodeLinkFault(const LinkFaultEntry& entry);
LinkFaultEntry DecodeLinkFault(const LinkFaultRecord& record);

// Copies a consistent snapshot out of a mapped table (seqlock read). Returns false with
// *error set when the mapping is not a valid table of kFaultTableVersion (the error names
// the file's version and the supported one).
bool ReadMappedFaultTable(const void* base, size_t bytes, FaultTableSnapshot* out,
                          std::string* error);

// Reads the table at `path`, following changes cheaply. An empty path means "no faults".
// A missing or invalid file reads as an empty table and is retried at most once a second,
// so a table created after the process started is picked up.
class FaultTableReader {
 public:
  explicit FaultTableReader(std::string path);
  ~FaultTableReader();
  FaultTableReader(const FaultTableReader&) = delete;
  FaultTableReader& operator=(const FaultTableReader&) = delete;

  // Returns the current snapshot. When the generation is unchanged this costs one atomic
  // load; otherwise the records are copied again.
  const FaultTableSnapshot& Poll();

  // Human-readable reason the file could not be used (empty when it is mapped).
  const std::string& error() const { return error_; }

 private:
  void TryMap();

  std::string path_;
  const void* base_ = nullptr;
  size_t bytes_ = 0;
  int64_t next_open_attempt_ns_ = 0;
  uint64_t seen_generation_ = ~uint64_t{0};
  FaultTableSnapshot snapshot_;
  std::string error_;
};

// The physical identity of this process from its environment: PEREGRINE_MACHINE_ID
// (-1 when absent or malformed) and LOCAL_RANK (-1 when absent or malformed).
int MachineIdFromEnv();
int LocalRankFromEnv();

}  // namespace peregrine::sim

#endif  // PEREGRINE_SIM_FAULT_FAULT_TABLE_H_
