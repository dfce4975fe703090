// NcclRingReader: the agent's view of one training process's NCCL call ring, written by
// libperegrine_nccl.so (format in ring_format.h).
//
// Contract:
//  - Open() maps a ring file (POSIX shm objects live under /dev/shm) and validates its
//    header against the file size; it fails with kNotFound / kInvalidArgument /
//    kFailedPrecondition (not yet initialised: retry later) naming the file and the field.
//  - Poll(cursor) returns the records with sequence numbers in [cursor, write index) in
//    order, stopping at the first record whose writer has not committed yet, plus how
//    many records between cursor and the returned next_cursor were lost (overwritten
//    before they were read, or dropped by the producer). Start with cursor 0.
//  - Control: SetProfiling / SetTrap write control words the hook reads at every call;
//    Release() lets every call currently waiting in the trap go (the trap stays armed for
//    later calls); clearing the trap releases everyone too.
//
// Thread safety: one NcclRingReader may be used from several threads; all reads are
// atomic snapshots. Ownership: the reader owns its mapping (unmapped on destruction);
// the file itself is left in place (RemoveRing deletes it).
#ifndef PEREGRINE_AGENT_NCCL_RING_RING_READER_H_
#define PEREGRINE_AGENT_NCCL_RING_RING_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "diagnosis/iteration_period.h"

namespace peregrine {

// One record, decoded. Field meanings depend on `op` (nccl_ring::Op):
//  - traffic calls: comm_id/rank/nranks of the communicator, count, datatype, peer (send/
//    recv peer or root, -1 otherwise), call_index = n-th call on that communicator.
//  - kOpCommInitRank*/InitAll: comm_id = the new communicator's id, rank/nranks its own.
//  - kOpCommSplit/Shrink: comm_id = parent, peer = color, count = key, value = child id.
//  - kOpGetUniqueId: comm_id = the id's hash (equals the comm_id of the communicators
//    later created from it).
//  - kOpHostExit: call_seq = seq of the call, value = host ns in the call, result.
//  - kOpDeviceTime: call_seq = seq of the call, value = ns between the CUDA events,
//    timed_op = the op timed (kOpGroupEnd: a whole group).
struct NcclRecord {
  uint64_t seq = 0;
  uint8_t op = 0;
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC of the training process's host
  uint64_t comm_id = 0;
  int32_t rank = -1;
  int32_t nranks = -1;
  int32_t peer = -1;
  uint64_t count = 0;
  uint8_t datatype = 0;
  uint8_t flags = 0;     // nccl_ring::RecordFlag
  uint64_t call_index = 0;
  uint64_t call_seq = 0;
  uint64_t value = 0;
  int32_t result = 0;
  uint8_t timed_op = 0;
};

// "AllReduce", "Send", ... ("Unknown(n)" for codes this build does not know).
std::string NcclOpName(uint8_t op);
// True for the ops that move data (collectives, send, recv).
bool IsNcclTrafficOp(uint8_t op);
// The iteration-period analysis' op for a ring op code (kOther for ops it does not tell
// apart, e.g. Gather, Scatter, communicator calls).
NcclOp NcclOpOfRingOp(uint8_t op);
// The iteration-period analysis' view of a record (op, communicator, count, datatype, entry
// time), as the agent's fail-slow monitor and peregrinectl's offline analysis read rings;
// nullopt for a record that is not a traffic call (IsNcclTrafficOp).
std::optional<NcclCallRecord> CallRecordOf(const NcclRecord& rec);

struct NcclCommInfo {
  uint64_t comm_id = 0;
  uint64_t parent_id = 0;
  int32_t rank = -1;
  int32_t nranks = -1;
  int32_t global_rank = -1;  // the process's RANK
  int32_t color = -1;
  int32_t key = -1;
  int32_t device = -1;
  uint8_t created_by = 0;
  uint64_t created_ns = 0;
  uint64_t destroyed_ns = 0;  // 0 while alive
};

struct NcclRingInfo {
  int32_t pid = 0;
  int32_t global_rank = -1;
  int32_t local_rank = -1;
  int32_t nccl_version = 0;
  uint32_t capacity = 0;
  std::string lib_path;
  uint64_t created_ns = 0;
  uint64_t write_index = 0;
  uint64_t dropped_records = 0;
  uint64_t profiling_skipped = 0;
  uint32_t comm_overflow = 0;
  bool profiling = false;
  bool trap = false;
  uint64_t release_epoch = 0;
  uint32_t cuda_state = 0;  // 0 not tried, 1 loading, 2 CUDA events, 3 host timing only
  uint32_t trapped_now = 0;
  uint64_t trapped_total = 0;
};

struct NcclPollResult {
  std::vector<NcclRecord> records;
  uint64_t lost = 0;
  uint64_t next_cursor = 0;
};

// A ring file found by ListRings.
struct NcclRingFile {
  std::string path;
  int32_t pid = 0;
  int32_t global_rank = -1;  // -1 when the process had no RANK
  bool process_alive = false;
};

class NcclRingReader {
 public:
  static absl::StatusOr<std::unique_ptr<NcclRingReader>> Open(const std::string& path);
  ~NcclRingReader();
  NcclRingReader(const NcclRingReader&) = delete;
  NcclRingReader& operator=(const NcclRingReader&) = delete;

  // At most max_records records from `cursor` on; never blocks.
  NcclPollResult Poll(uint64_t cursor, size_t max_records = 65536) const;
  // Every communicator the process created (destroyed ones have destroyed_ns set).
  std::vector<NcclCommInfo> Comms() const;
  NcclRingInfo Info() const;

  void SetProfiling(bool on);
  void SetTrap(bool on);
  // Releases the calls waiting in the trap now. Returns the new epoch.
  uint64_t Release();

  const std::string& path() const { return path_; }

 private:
  NcclRingReader(std::string path, void* base, size_t bytes)
      : path_(std::move(path)), base_(base), bytes_(bytes) {}
  std::string path_;
  void* base_;
  size_t bytes_;
};

// Ring files in `dir` ("/dev/shm" for the default POSIX shm objects, or the
// PEREGRINE_NCCL_RING_DIR of the training processes), sorted by rank then pid.
absl::StatusOr<std::vector<NcclRingFile>> ListNcclRings(const std::string& dir);
// Deletes a ring file (after its process exited and its records were read). Also used
// for the failure markers below.
absl::Status RemoveNcclRing(const std::string& path);

// A process whose hook could not create its ring and only forwards NCCL calls: the hook
// leaves "peregrine-nccl-r<rank|x>-p<pid>.unavailable" in the ring directory with the
// step that failed and why (e.g. "posix_fallocate: No space left on device").
struct NcclRingFailure {
  std::string path;  // the marker file
  int32_t pid = 0;
  int32_t global_rank = -1;
  bool process_alive = false;
  std::string reason;  // "(no reason recorded)" when the marker is empty
};
// The failure markers in `dir`, sorted by rank then pid. kNotFound when `dir` is missing.
absl::StatusOr<std::vector<NcclRingFailure>> ListNcclRingFailures(const std::string& dir);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_NCCL_RING_RING_READER_H_
