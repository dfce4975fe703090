// NCCL call sequences from users' files, for `peregrinectl analyze nccl`. Three text
// formats, detected from the content (the fourth input, a binary ring file written by
// libperegrine_nccl.so, is read by ring_file.h):
//
//  (a) JSON lines: one object per line, one NCCL call each (for tools that export calls;
//      Peregrine itself writes binary rings, see ring_file.h):
//        {"op":"AllReduce","comm":"0x55d0c1a2b300","count":262144,"datatype":7,
//         "time_ns":1712000000123456789,"rank":0}
//      op: NCCL's name (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, Send, Recv,
//      AllToAll; case and '_' ignored); comm: a number or a hex string; datatype: the
//      ncclDataType_t value; time_ns: the call's enter time (any epoch); rank optional
//      (calls are grouped into one stream per rank). These are NcclCallRecord fields.
//  (b) NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL logs. NCCL (src/enqueue.cc) prints one line per
//      call, after the "host:pid:tid [cudaDev] NCCL INFO " prefix:
//        "AllReduce: opCount 1a sendbuff 0x.. recvbuff 0x.. count 262144 datatype 7 op 0
//         root 0 comm 0x55.. [nranks=8] stream 0x.."
//      Since NCCL 2.26, NCCL_DEBUG_TIMESTAMP_LEVELS=INFO prefixes a strftime timestamp,
//      "[%F %T] " by default; "%Nf" adds fractions ("[%F %T.%6f] "). Accepted timestamps:
//      "[YYYY-MM-DD HH:MM:SS(.frac)]", "[HH:MM:SS(.frac)]" or a number of seconds, with or
//      without brackets. Lines of other subsystems and program output are skipped. One
//      stream per host:pid; its rank comes from the "comm 0x.. rank R nranks N ... Init
//      COMPLETE" line of the first communicator that process initialised, when logged.
//  (c) PyTorch profiler (Kineto) Chrome-trace JSON: {"traceEvents":[...]} or a bare array.
//      NCCL calls are the complete ("ph":"X") CPU events named "nccl:<collective>" when
//      any exist, else the GPU kernels named "ncclDevKernel_<Op>_..." / "ncclKernel_<Op>_..."
//      (args "In msg nelems", "dtype", "Process Group Name" give count, datatype and
//      communicator when present); ts/dur are microseconds. "ProfilerStep#N" events mark
//      iterations. The rank comes from "distributedInfo": {"rank": R} when present.
//
// Every error is kInvalidArgument "SOURCE:LINE: problem" (JSON errors also give the
// column). Pure parsing, no I/O. Thread-compatible.
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
