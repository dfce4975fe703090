// Helpers shared by the NCCL trace parsers (nccl_trace.cc, nccl_debug_log.cc,
// kineto_trace.cc); internal to cli/analyze. Pure functions, no I/O.
#ifndef PEREGRINE_CLI_ANALYZE_NCCL_TRACE_INTERNAL_H_
#define PEREGRINE_CLI_ANALYZE_NCCL_TRACE_INTERNAL_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/analyze/nccl_trace.h"

namespace peregrine::nccl_internal {

// kInvalidArgument "SOURCE:NUMBER: message".
absl::Status LineError(absl::string_view source, int number, absl::string_view message);

// "0x55d0c1a2b300" -> its value; a decimal string -> its value; anything else -> a hash.
uint64_t CommIdFromString(absl::string_view s);

// torch dtype names (Kineto "dtype" args) and NCCL names -> ncclDataType_t values; an
// unknown name gets a stable code of 100 or more.
int32_t DatatypeFromName(absl::string_view name);

struct Timestamp {
  int64_t ns = 0;
  int fraction_digits = 0;
};

// "[YYYY-MM-DD HH:MM:SS(.frac)]", "[HH:MM:SS(.frac)]" or seconds, with or without brackets.
std::optional<Timestamp> ParseLogTimestamp(absl::string_view text);

// The tick of a timestamp with `fraction_digits` decimals, in ns.
int64_t ResolutionNs(int fraction_digits);

// Orders s.calls (and s.details with them) by enter_ns when s.has_timestamps; stable.
void SortByTime(NcclCallStream& s);

absl::StatusOr<NcclTrace> ParseNcclLog(absl::string_view text, absl::string_view source);
absl::StatusOr<NcclTrace> ParseKineto(absl::string_view text, absl::string_view source);

}  // namespace peregrine::nccl_internal

#endif  // PEREGRINE_CLI_ANALYZE_NCCL_TRACE_INTERNAL_H_
