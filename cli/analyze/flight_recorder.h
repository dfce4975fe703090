// PyTorch's NCCL flight recorder dumps, read without Python. With
// TORCH_NCCL_TRACE_BUFFER_SIZE (or TORCH_FR_BUFFER_SIZE) > 0, ProcessGroupNCCL keeps a ring
// of its last collectives and p2p ops and, on a timeout or on demand, writes one file per
// rank, <TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank> (default /tmp/nccl_trace_rank_<rank>): a
// pickle (libtorch's Pickler, protocol 2) of a dict with "version" ("2.x"), "pg_config",
// "pg_status", "comm_lib_version" and "entries", one dict per op (fields in FrEntry).
//
// ParseFlightRecorderDump turns one file's bytes into an FrDump: kInvalidArgument naming
// the source and the reason when the bytes are not a pickle, not a dict, or carry a version
// other than 2.x; an entry without a field the analysis needs (profiling_name,
// collective_seq_id, state, the process group) is skipped and counted, with a note naming
// it. Missing optional fields keep their defaults. Pure; thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_FLIGHT_RECORDER_H_
#define PEREGRINE_CLI_ANALYZE_FLIGHT_RECORDER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

enum class FrState { kScheduled, kStarted, kCompleted };
absl::string_view FrStateName(FrState state);  // "scheduled", "started", "completed"

struct FrFrame {
  std::string name, filename;
  int64_t line = 0;
};

struct FrEntry {
  int64_t record_id = 0;
  int64_t pg_id = 0;
  std::string pg_name;  // process_group[0]: the group's name, the same on every rank
  std::string pg_desc;  // process_group[1]: e.g. "default_pg"
  int64_t collective_seq_id = 0;
  int64_t p2p_seq_id = 0;
  int64_t op_id = 0;
  std::string profiling_name;  // "nccl:all_reduce", "nccl:send 0->1", "nccl:recv 1<-0"
  std::string op;              // "all_reduce", "send", "recv" (profiling_name without "nccl:")
  int p2p_src = -1, p2p_dst = -1;  // group ranks of a send/recv, from profiling_name
  std::optional<int64_t> time_created_ns;
  std::vector<std::vector<int64_t>> input_sizes, output_sizes;
  std::vector<std::string> input_dtypes, output_dtypes;
  FrState state = FrState::kScheduled;
  std::optional<int64_t> time_discovered_started_ns, time_discovered_completed_ns;
  std::optional<int64_t> timeout_ms;
  std::optional<double> duration_ms;
  bool retired = false;
  bool is_p2p = false;  // the is_p2p field, or a send/recv op when the field is absent
  std::vector<FrFrame> frames;
};

struct FrGroupConfig {
  std::string name, desc;
  std::vector<int> ranks;  // global ranks, from the "[0, 1, 2]" string; empty if unparsable
};

struct FrGroupStatus {
  int64_t last_enqueued = -1, last_started = -1, last_completed = -1;
};

struct FrDump {
  std::string source;
  std::string version;           // "2.10"
  std::string comm_lib_version;  // NCCL version, when recorded
  std::map<std::string, FrGroupConfig> pg_config;  // by group name
  std::map<std::string, FrGroupStatus> pg_status;  // by pg_id (as text)
  std::vector<FrEntry> entries;                   // in recording order
  int skipped_entries = 0;
  std::vector<std::string> notes;  // why entries were skipped (the first few)
};

absl::StatusOr<FrDump> ParseFlightRecorderDump(absl::string_view bytes, absl::string_view source);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_FLIGHT_RECORDER_H_
