// InspectionResult: the plain-struct outcome of one inspection of one component, mirroring
// peregrine.v1.InspectionResult (proto/peregrine/v1/agent.proto) without depending on it;
// the agent translates. Value type; thread-compatible.
#ifndef PEREGRINE_AGENT_INSPECTION_INSPECTION_RESULT_H_
#define PEREGRINE_AGENT_INSPECTION_INSPECTION_RESULT_H_

#include <map>
#include <string>

#include "absl/time/time.h"

namespace peregrine {

// What one inspection run found for one component (the controller keeps it, from the wire,
// as its own InspectionStatus).
enum class InspectionOutcome {
  kOk,
  kNotPresent,  // no such hardware on this machine: never a fault
  kWarning,
  kFault,
  kError,  // the inspection itself failed (unreadable file, unparseable output)
  // The inspection cannot see what it inspects from where it runs (a pod without
  // CAP_SYSLOG cannot read /dev/kmsg, DCGM's host engine is unreachable, only the pod's
  // network namespace is visible): neither a pass nor a fault; the summary says why.
  kCannotSee,
};

// "OK", "NOT_PRESENT", "WARNING", "FAULT", "ERROR", "CANNOT_SEE".
const char* InspectionOutcomeName(InspectionOutcome status);

// Severity order for alarms: kOk = kNotPresent = kError = kCannotSee < kWarning < kFault.
int InspectionSeverity(InspectionOutcome status);

struct InspectionResult {
  std::string kind;       // "gpu", "xid", "network", "rdma", "host"
  std::string component;  // "gpu0", "PCI:0000:3b:00", "eth0", "mlx5_0/1", "/data"
  InspectionOutcome status = InspectionOutcome::kOk;
  std::string summary;
  std::map<std::string, std::string> details;
  bool machine_attributed = false;  // the machine is at fault (fatal Xid, GPU lost, ECC, disk)
  absl::Time observed_at = absl::InfinitePast();

  std::string DebugString() const;  // "gpu/gpu0 FAULT: summary"
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_INSPECTION_RESULT_H_
