// NCCL call sequences from users' files, for `peregrinectl analyze nccl` (docs/failslow.md).
//
// ParseNcclTrace(text, source) detects the text format from the content and returns one
// call stream per rank / process: (a) JSON lines, one NcclCallRecord per line; (b)
// NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs, optionally timestamped, with or without a
// launcher's line prefix (nccl_debug_log.cc); (c) PyTorch profiler (Kineto) Chrome-trace
// JSON (kineto_trace.cc). (The fourth input, a binary ring file written by
// libperegrine_nccl.so, is read by ring_file.h; gzip is undone before, by input_file.h.)
// The accepted syntax of each format is described in its .cc. Every error is
// kInvalidArgument "SOURCE:LINE: problem" (JSON errors also give the column). An NCCL log
// whose call lines are partly unreadable yields the readable calls, with the count of
// skipped lines and the first problem in `notes`; it is an error only when no call is left.
//
// MergeNcclTraces combines the traces of several files (one per rank, typically) into
// one, for the cross-rank analyses (nccl_desync.h).
//
// Pure parsing, no I/O. Thread-compatible.
#ifndef PEREGRINE_CLI_ANALYZE_NCCL_TRACE_H_
#define PEREGRINE_CLI_ANALYZE_NCCL_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "diagnosis/iteration_period.h"

namespace peregrine {

enum class NcclTraceFormat { kPeregrineJsonl, kNcclDebugLog, kKinetoTrace, kPeregrineRing };
// "peregrine-jsonl", "nccl-debug-log", "kineto-trace", "peregrine-ring".
const char* NcclTraceFormatName(NcclTraceFormat format);

// "AllReduce", "AllGather", ... (NCCL's spelling).
const char* NcclOpName(NcclOp op);
// Parses "AllReduce", "all_reduce", "allreduce", "_allgather_base", ... ; kOther if unknown.
NcclOp NcclOpFromName(absl::string_view name);

// One "ProfilerStep#N" annotation.
struct ProfilerStepSpan {
  int64_t step = 0;
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
};

// What some formats tell about a call beyond NcclCallRecord.
struct NcclCallDetail {
  int64_t op_count = -1;  // NCCL's opCount (per communicator, hex in the log); -1: unknown
  int nranks = 0;         // the communicator's size ([nranks=N], Kineto "Group size"); 0: unknown
  int line = 0;           // 1-based line of the call in its file; 0: not a line format
};

// The calls of one process / rank, in time order (file order when there are no times).
struct NcclCallStream {
  std::string label;  // "rank 3", "host-a:1234", "trace"
  int rank = -1;      // -1 when the input does not say
  std::vector<NcclCallRecord> calls;
  std::vector<NcclCallDetail> details;  // empty, or one per call (same order)
  // True when comm_id names the same communicator in every stream (a process group's
  // name, NCCL's commId); false for per-process communicator addresses.
  bool global_comm_ids = false;
  int cuda_dev = -1;  // the "[N]" device of NCCL's log prefix; -1 when not logged
  bool has_timestamps = false;
  // The coarsest tick of the timestamps (1e9 for "[%F %T]" without fractions).
  int64_t timestamp_resolution_ns = 1;
  std::vector<ProfilerStepSpan> profiler_steps;  // ordered by start
};

struct NcclTrace {
  NcclTraceFormat format = NcclTraceFormat::kPeregrineJsonl;
  std::vector<NcclCallStream> streams;  // by rank when known, else order of appearance
  std::vector<std::string> notes;       // facts about the input worth telling the user
  int skipped_lines = 0;                // unreadable call lines / events left out
};

absl::StatusOr<NcclTrace> ParseNcclTrace(absl::string_view text, absl::string_view source);

// One trace of the streams of `parts` (each from the file named by its `sources` entry):
// the format of the first (notes say when formats differ), labels prefixed with the file
// name where two streams would share one, notes prefixed with the file name, skipped
// lines summed. `parts` and `sources` have the same length, at least one.
NcclTrace MergeNcclTraces(std::vector<NcclTrace> parts, const std::vector<std::string>& sources);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_NCCL_TRACE_H_
