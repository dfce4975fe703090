// NCCL call sequences from users' files, for `peregrinectl analyze nccl` (docs/failslow.md).
//
// ParseNcclTrace(text, source) detects the text format from the content and returns one
// call stream per rank / process: (a) JSON lines, one NcclCallRecord per line; (b)
// NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs, optionally timestamped; (c) PyTorch profiler
// (Kineto) Chrome-trace JSON. (The fourth input, a binary ring file written by
// libperegrine_nccl.so, is read by ring_file.h.) The accepted syntax of each format is
// described in nccl_trace.cc. Every error is kInvalidArgument "SOURCE:LINE: problem" (JSON
// errors also give the column).
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

// The calls of one process / rank, in time order (file order when there are no times).
struct NcclCallStream {
  std::string label;  // "rank 3", "host-a:1234", "trace"
  int rank = -1;      // -1 when the input does not say
  std::vector<NcclCallRecord> calls;
  bool has_timestamps = false;
  // The coarsest tick of the timestamps (1e9 for "[%F %T]" without fractions).
  int64_t timestamp_resolution_ns = 1;
  std::vector<ProfilerStepSpan> profiler_steps;  // ordered by start
};

struct NcclTrace {
  NcclTraceFormat format = NcclTraceFormat::kPeregrineJsonl;
  std::vector<NcclCallStream> streams;  // by rank when known, else order of appearance
  std::vector<std::string> notes;       // facts about the input worth telling the user
};

absl::StatusOr<NcclTrace> ParseNcclTrace(absl::string_view text, absl::string_view source);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_NCCL_TRACE_H_
