// Faults of a simulated job: what happens to which machine and when, drawn from a model
// of published failure rates or read from a trace file.
//
// A FaultEvent is one machine's trouble over [start_ns, end_ns) of simulated time (time 0
// is the job's start). For a fail-stop kind (gpu, memory, nic, host, software) the machine
// stops at start_ns and is repaired (usable again) at end_ns; for a fail-slow kind the
// machine runs slower by `severity` (the fraction its step time grows: 0.3 = 30% slower)
// over the whole interval. Machines are numbered 0..machines-1.
//
// GenerateFaults is deterministic for a seed. ParseFaultTrace refuses bad input with the
// line number and the reason. Pure: no clocks, no I/O. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_FAULT_MODEL_H_
#define PEREGRINE_FLEETSIM_FAULT_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace peregrine::fleetsim {

enum class FaultKind {
  kGpu,          // fail-stop: GPU lost or Xid that needs a reset, uncorrectable ECC
  kMemory,       // fail-stop: host memory
  kNic,          // fail-stop: NIC or link down
  kHost,         // fail-stop: kernel, power, disk, node lost
  kSoftware,     // fail-stop: the training process crashes; the machine is healthy
  kSlowCompute,  // fail-slow: a GPU computes slower (thermal, clocks, PCIe)
  kSlowLink,     // fail-slow: a link or NIC transfers slower (congestion, degraded link)
};

bool IsFailSlow(FaultKind kind);
std::string_view FaultKindName(FaultKind kind);  // "gpu", ..., "slow", "slow-link"

struct FaultEvent {
  int machine = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  FaultKind kind = FaultKind::kGpu;
  double severity = 0;  // fail-slow only: fractional step-time growth (> 0)
};

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_FAULT_MODEL_H_
