// The shared-memory layout that libperegrine_nccl.so (the producer, inside a training
// process) and the agent's ring reader (the consumer, another process) agree on, plus
// the lock-free multi-producer append and the id hash both sides use.
//
// One file per process (POSIX shm "/peregrine-nccl-r<RANK>-p<PID>" or
// "$PEREGRINE_NCCL_RING_DIR/peregrine-nccl-r<RANK>-p<PID>.ring"):
//
//   offset 0                 RingHeader            (4 KiB, see below)
//   kCommTableOffset         CommSlot[kCommTableCapacity]  (128 B each)
//   RecordsOffset()          RingSlot[capacity]    (64 B each, capacity a power of two)
//
// The hook reserves the whole file (posix_fallocate) and maps it populated before the
// first record. When it cannot (full file system, RLIMIT_FSIZE), it creates no ring,
// forwards calls unrecorded and leaves "<dir>/peregrine-nccl-r<RANK>-p<PID>.unavailable"
// holding the reason (ring_reader.h: ListNcclRingFailures).
//
// Every field that changes after creation is accessed with atomic instructions
// (__atomic builtins on plain integers, so the struct is standard-layout and
// identical in C and C++). Record protocol (multi-producer, overwrite-oldest):
//   1. idx = fetch_add(write_index, 1)             reservation, no lock
//   2. claim slot idx % capacity by CAS of its seq word from an even value v < Writing(idx)
//      to Writing(idx); if the word is odd (another producer, a full lap behind, is
//      still writing) or already newer, the record is dropped (the reader sees it lost)
//   3. relaxed stores of the 7 payload words, then seq = Committed(idx) (release)
// Readers copy the payload between an acquire load of seq and a re-check (seqlock),
// so a record overwritten while being read is reported lost, never torn.
//
// Thread safety: every function here is safe to call from any thread and any process
// mapping the same memory. Nothing here allocates or makes a system call.
#ifndef PEREGRINE_AGENT_NCCL_RING_RING_FORMAT_H_
#define PEREGRINE_AGENT_NCCL_RING_RING_FORMAT_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/fnv1a.h"

namespace peregrine::nccl_ring {

inline constexpr uint64_t kMagic = 0x474e495252474550ull;  // "PEGRRING" little-endian
inline constexpr uint32_t kVersion = 1;
inline constexpr uint32_t kHeaderSize = 4096;
inline constexpr uint32_t kCommTableCapacity = 256;
inline constexpr uint32_t kCommSlotSize = 128;
inline constexpr uint32_t kCommTableOffset = kHeaderSize;
inline constexpr uint32_t kRecordSlotSize = 64;
inline constexpr uint32_t kDefaultCapacity = 1u << 16;  // 4 MiB of records
inline constexpr uint32_t kMinCapacity = 2;
inline constexpr uint32_t kMaxCapacity = 1u << 24;

// Operation codes stored in a record. Values are part of the format: append only.
enum Op : uint8_t {
  kOpNone = 0,
  kOpGetUniqueId = 1,
  kOpCommInitRank = 2,
  kOpCommInitRankConfig = 3,
  kOpCommInitAll = 4,
  kOpCommSplit = 5,
  kOpCommDestroy = 6,
  kOpCommAbort = 7,
  kOpAllReduce = 8,
  kOpBroadcast = 9,
  kOpReduce = 10,
  kOpAllGather = 11,
  kOpReduceScatter = 12,
  kOpSend = 13,
  kOpRecv = 14,
  kOpGroupStart = 15,
  kOpGroupEnd = 16,
  kOpAlltoAll = 17,
  kOpGather = 18,
  kOpScatter = 19,
  kOpBcast = 20,
  kOpCommInitRankScalable = 21,
  kOpCommShrink = 22,
  kOpCommFinalize = 23,
  kOpCommRevoke = 24,        // count = revokeFlags
  kOpGroupSimulateEnd = 25,  // closes a group like GroupEnd (value = depth), launches nothing
  // Completion records (profiling only). `link` holds the seq of the call record.
  kOpHostExit = 100,    // value = host ns from entry to return; result = ncclResult_t
  kOpDeviceTime = 101,  // value = ns between CUDA events around the call; datatype = op timed
  kOpMax = 102,
};

// Record flags.
enum RecordFlag : uint8_t {
  kFlagTrapped = 1u << 0,   // the call waited in trap mode before entering NCCL
  kFlagInGroup = 1u << 1,   // issued between ncclGroupStart and ncclGroupEnd
  kFlagProfiled = 1u << 2,  // a kOpHostExit record follows for this call
};

// The payload of one record: 56 bytes, seven 64-bit words.
struct RecordPayload {
  uint64_t time_ns;   // CLOCK_MONOTONIC at entry (calls) or at exit (completions)
  uint64_t comm_id;   // cross-rank communicator id, 0 when the call has none / unknown
  uint64_t count;     // element count (sendcount / recvcount as NCCL names it)
  uint64_t link;      // calls: per-communicator call number; completions: call's seq
  uint64_t value;     // completions: duration in ns; calls: 0
  int32_t rank;       // caller's rank in the communicator, -1 unknown
  int32_t nranks;     // communicator size, -1 unknown
  int32_t peer;       // send/recv peer, root of rooted collectives, color for split, else -1
  uint8_t op;         // Op
  uint8_t datatype;   // ncclDataType_t
  uint8_t flags;      // RecordFlag bits
  int8_t result;      // completions: ncclResult_t returned; calls: 0
};
static_assert(sizeof(RecordPayload) == 56, "payload must be 7 words");

struct RingSlot {
  uint64_t seq;         // 0 empty; Writing(idx) while written; Committed(idx) when done
  uint64_t words[7];    // RecordPayload bytes
};
static_assert(sizeof(RingSlot) == kRecordSlotSize, "slot must be one cache line");

inline constexpr uint64_t Committed(uint64_t idx) { return (idx + 1) << 1; }
inline constexpr uint64_t Writing(uint64_t idx) { return ((idx + 1) << 1) | 1; }

// Communicator table entry. Written once by the creating thread under the hook's
// creation lock (seqlock `state`: odd while written, even when stable, 0 unused);
// `destroyed_ns` may be set later the same way.
struct CommSlot {
  uint64_t state;
  uint64_t comm_id;
  uint64_t parent_id;     // 0 for root communicators
  uint64_t created_ns;
  uint64_t destroyed_ns;  // 0 while alive
  int32_t rank;           // rank in the communicator, -1 unknown
  int32_t nranks;         // -1 unknown
  int32_t global_rank;    // the process's global rank (env RANK), -1 unknown
  int32_t color;          // split color, -1 otherwise
  int32_t key;            // split key, -1 otherwise
  int32_t device;         // CUDA device of the communicator, -1 unknown
  uint8_t created_by;     // Op that created it
  uint8_t pad[63];
};
static_assert(sizeof(CommSlot) == kCommSlotSize, "comm slot size is part of the format");

// Control words live on their own cache line so the hot path's relaxed loads do not
// share a line with the write index.
struct RingHeader {
  uint64_t magic;          // kMagic once fully initialised (stored last, release)
  uint32_t version;        // kVersion
  uint32_t header_size;    // kHeaderSize
  uint32_t capacity;       // records, power of two
  uint32_t record_size;    // kRecordSlotSize
  uint32_t comm_capacity;  // kCommTableCapacity
  uint32_t comm_slot_size; // kCommSlotSize
  int32_t pid;
  int32_t global_rank;     // env RANK, -1 unknown
  int32_t local_rank;      // env LOCAL_RANK, -1 unknown
  int32_t nccl_version;    // from ncclGetVersion of the real library, 0 unknown
  uint64_t created_ns;     // CLOCK_MONOTONIC at creation
  char lib_path[192];      // the real library the hook forwards to

  // --- producer cache line
  alignas(64) uint64_t write_index;   // next record index to reserve
  uint32_t comm_count;                // CommSlots in use
  uint32_t comm_overflow;             // communicators not tabled: table full
  uint64_t dropped_records;           // producer-side drops (slot held by a stalled writer)
  uint64_t profiling_skipped;         // calls not device-timed (event pool exhausted, CUDA error)

  // --- control cache line (written by the agent, read relaxed by the hook)
  alignas(64) uint32_t profiling;     // 1: record host exit times (+ CUDA events if present)
  uint32_t trap;                      // 1: calls wait at entry until released
  uint64_t release_epoch;             // bumped by the agent to release trapped calls
  uint32_t cuda_state;                // 0 not tried, 1 loading, 2 events ready, 3 unavailable
  uint32_t pad1;

  // --- status written by the hook while trapping
  alignas(64) uint32_t trapped_now;   // threads currently waiting in the trap
  uint32_t pad2;
  uint64_t trapped_total;             // calls that have waited in the trap
};
static_assert(sizeof(RingHeader) <= kHeaderSize, "header must fit its page");

inline constexpr size_t RecordsOffset() {
  return kCommTableOffset + static_cast<size_t>(kCommTableCapacity) * kCommSlotSize;
}
inline constexpr size_t RingBytes(uint32_t capacity) {
  return RecordsOffset() + static_cast<size_t>(capacity) * kRecordSlotSize;
}
inline constexpr bool ValidCapacity(uint64_t capacity) {
  return capacity >= kMinCapacity && capacity <= kMaxCapacity &&
         (capacity & (capacity - 1)) == 0;
}

inline CommSlot* CommTable(void* base) {
  return reinterpret_cast<CommSlot*>(static_cast<char*>(base) + kCommTableOffset);
}
inline RingSlot* Records(void* base) {
  return reinterpret_cast<RingSlot*>(static_cast<char*>(base) + RecordsOffset());
}

template <typename T>
inline T LoadRelaxed(const T* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
template <typename T>
inline T LoadAcquire(const T* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
template <typename T>
inline void StoreRelaxed(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
template <typename T>
inline void StoreRelease(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// Formats an all-zero mapping of RingBytes(capacity) bytes. Call once, before any
// other process reads it; `magic` is published last.
inline void InitRing(void* base, uint32_t capacity, int32_t pid, int32_t global_rank,
                     int32_t local_rank, uint64_t now_ns) {
  RingHeader* h = static_cast<RingHeader*>(base);
  h->version = kVersion;
  h->header_size = kHeaderSize;
  h->capacity = capacity;
  h->record_size = kRecordSlotSize;
  h->comm_capacity = kCommTableCapacity;
  h->comm_slot_size = kCommSlotSize;
  h->pid = pid;
  h->global_rank = global_rank;
  h->local_rank = local_rank;
  h->created_ns = now_ns;
  StoreRelease(&h->magic, kMagic);
}

// Appends one record. Returns the sequence number it was given (also when the
// record had to be dropped because its slot was still held a full lap behind).
// Lock-free, wait-free apart from a CAS retry against a concurrent claim.
inline uint64_t AppendRecord(RingHeader* h, RingSlot* slots, const RecordPayload& p) {
  const uint64_t idx = __atomic_fetch_add(&h->write_index, 1, __ATOMIC_RELAXED);
  RingSlot* slot = &slots[idx & (static_cast<uint64_t>(h->capacity) - 1)];
  const uint64_t writing = Writing(idx);
  uint64_t cur = LoadRelaxed(&slot->seq);
  for (;;) {
    if ((cur & 1) != 0 || cur >= writing) {
      __atomic_fetch_add(&h->dropped_records, 1, __ATOMIC_RELAXED);
      return idx;
    }
    if (__atomic_compare_exchange_n(&slot->seq, &cur, writing, /*weak=*/true,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      break;
    }
  }
  // Order the claim before the payload stores (seqlock writer side).
  __atomic_thread_fence(__ATOMIC_RELEASE);
  uint64_t words[7];
  memcpy(words, &p, sizeof(words));
  for (int i = 0; i < 7; ++i) StoreRelaxed(&slot->words[i], words[i]);
  StoreRelease(&slot->seq, Committed(idx));
  // The ring is larger than the caches: fetch the next slot's line for writing now, so
  // the next record (normally the next NCCL call, far later) does not stall on it.
  __builtin_prefetch(&slots[(idx + 1) & (static_cast<uint64_t>(h->capacity) - 1)], 1, 3);
  return idx;
}

// Outcome of reading the slot for sequence number `idx`.
enum class SlotRead { kOk, kNotYet, kLost };

// Reads record `idx` into `out`. kNotYet: not committed yet (its writer is still
// between reservation and commit); kLost: overwritten by a later lap or dropped.
inline SlotRead ReadRecord(const RingHeader* h, const RingSlot* slots, uint64_t idx,
                           RecordPayload* out) {
  const RingSlot* slot = &slots[idx & (static_cast<uint64_t>(h->capacity) - 1)];
  const uint64_t s1 = LoadAcquire(&slot->seq);
  if (s1 != Committed(idx)) {
    if (s1 > Writing(idx)) return SlotRead::kLost;
    // Not committed for idx. If writers have since reserved a full lap past idx, the
    // slot belongs to a later record now, so idx will never appear.
    const uint64_t w = LoadAcquire(&h->write_index);
    if (w > idx + h->capacity) return SlotRead::kLost;
    return SlotRead::kNotYet;
  }
  uint64_t words[7];
  for (int i = 0; i < 7; ++i) words[i] = LoadRelaxed(&slot->words[i]);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  if (LoadRelaxed(&slot->seq) != s1) return SlotRead::kLost;
  memcpy(out, words, sizeof(words));
  return SlotRead::kOk;
}

// 64-bit FNV-1a over bytes (from the offset basis xor seed), finished with a splitmix64
// avalanche; never returns 0 (0 means "no communicator"). Used for communicator ids on
// every rank alike.
inline uint64_t HashBytes(const void* data, size_t n, uint64_t seed = 0) {
  uint64_t x = Fnv1aBytes(data, n, kFnv1aOffsetBasis ^ seed);
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x == 0 ? 1 : x;
}

// Id of a communicator created by ncclCommSplit: identical on every member because
// all members of the parent call split the same number of times in the same order.
inline uint64_t SplitCommId(uint64_t parent_id, int32_t color, uint64_t split_seq) {
  uint64_t buf[3] = {parent_id, static_cast<uint64_t>(static_cast<uint32_t>(color)),
                     split_seq};
  return HashBytes(buf, sizeof(buf), /*seed=*/0x5350u);
}

}  // namespace peregrine::nccl_ring

#endif  // PEREGRINE_AGENT_NCCL_RING_RING_FORMAT_H_
