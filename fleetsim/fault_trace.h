// Fault traces: a CSV of observed faults replayed on the simulated job's machines.
//
// Format (docs/simulation.md, "Faults"): one fault a line, `node,start_s,end_s,kind[,severity]`.
//   node      the job's machine: without names, an index `k` or `m<k>` in 0..machines-1;
//             with FaultTraceOptions::node_names, exactly one of those names (name i is
//             machine i) and nothing else
//   start_s   seconds since the job's start, >= 0; end_s >= start_s (at most 100 years)
//   kind      gpu, memory, nic, host, software (fail-stop: the machine is down until end_s);
//             slow (= slow-compute) or slow-link (fail-slow over [start_s, end_s))
//   severity  fail-slow only, required, > 0 and <= 1000: fractional step-time growth;
//             refused on a fail-stop kind (an empty fifth field is allowed there)
// An optional header line whose first field is `node`, comment lines starting with `#`,
// blank lines, surrounding spaces and CRLF line ends are accepted. A fail-slow line needs
// end_s > start_s. Overlapping faults on one machine are kept as written.
//
// ParseFaultTrace is strict: the first bad line refuses the whole trace, with its line
// number and the reason. ReadFaultTrace keeps every good line and counts the bad ones.
// Both return faults sorted like GenerateFaults (SortFaults). Pure (takes text, no I/O).
// Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_FAULT_TRACE_H_
#define PEREGRINE_FLEETSIM_FAULT_TRACE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "fleetsim/fault_model.h"

namespace peregrine::fleetsim {

struct FaultTraceOptions {
  // The job's machine names (size == machines, no duplicates, none empty). Empty: nodes
  // are written `k` or `m<k>`.
  std::vector<std::string> node_names;
};

struct FaultTraceRead {
  std::vector<FaultEvent> faults;
  int64_t fault_lines = 0;    // lines that held a fault and were kept
  int64_t skipped_lines = 0;  // lines refused
  std::vector<std::string> errors;  // "line N: reason" of the first 20 refused lines
};

// Every good line, the bad ones counted. kInvalidArgument only for bad arguments
// (machines < 0, node_names of the wrong size, duplicated or empty).
absl::StatusOr<FaultTraceRead> ReadFaultTrace(std::string_view text, int machines,
                                              const FaultTraceOptions& options = {});

// The whole trace, or kInvalidArgument "fault trace line N: reason" for the first bad line
// (or the bad argument).
absl::StatusOr<std::vector<FaultEvent>> ParseFaultTrace(std::string_view text, int machines,
                                                        const FaultTraceOptions& options = {});

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_FAULT_TRACE_H_
