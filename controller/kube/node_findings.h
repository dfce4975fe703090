// Node findings: what the node inspector (peregrine-node-inspector, a DaemonSet; see
// node_inspector/) reports on its Node, read back by the controller. The channel is the
// node-problem-detector pattern: the inspector writes Node conditions of four types, one
// per inspection area, into the Node's status (PATCH nodes/<name>/status):
//   PeregrineKernelXid  Xids in the kernel log           (finding kind "xid")
//   PeregrineNIC        NIC and RDMA port state/counters (finding kind "network")
//   PeregrineDisk       block I/O errors in the kernel log (finding kind "host")
//   PeregrineGPU        GPUs (NVML / nvidia-smi) and DCGM health (finding kind "gpu")
// status "True" = a problem (reason MachineFault: a FAULT that indicts the machine, Fault,
// Warning), "False" = none (NoProblem, NotPresent), "Unknown" = the inspector cannot tell
// (CannotSee: it cannot see from where it runs; InspectionError: the inspection failed).
// message: the worst results, "component: summary; ...". lastTransitionTime moves only
// when status or reason change.
//
// NodeFindings is pure: Node JSON -> the findings as InspectionObservations (the decision
// core's type), which controller/core/node_findings.h attributes to the pods on the Node.
// Thread-safe (no state).
#ifndef PEREGRINE_CONTROLLER_KUBE_NODE_FINDINGS_H_
#define PEREGRINE_CONTROLLER_KUBE_NODE_FINDINGS_H_

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/core/job_state.h"

namespace peregrine {

inline constexpr char kConditionKernelXid[] = "PeregrineKernelXid";
inline constexpr char kConditionNic[] = "PeregrineNIC";
inline constexpr char kConditionDisk[] = "PeregrineDisk";
inline constexpr char kConditionGpu[] = "PeregrineGPU";
inline constexpr std::array<const char*, 4> kNodeConditionTypes = {kConditionKernelXid, kConditionNic,
                                                                   kConditionDisk, kConditionGpu};

// Reasons (CamelCase, as Kubernetes wants them).
inline constexpr char kReasonMachineFault[] = "MachineFault";     // True: FAULT, the machine at fault
inline constexpr char kReasonFault[] = "Fault";                   // True: FAULT, not the machine's
inline constexpr char kReasonWarning[] = "Warning";               // True: WARNING
inline constexpr char kReasonNoProblem[] = "NoProblem";           // False
inline constexpr char kReasonNotPresent[] = "NotPresent";         // False: no such hardware
inline constexpr char kReasonCannotSee[] = "CannotSee";           // Unknown
inline constexpr char kReasonInspectionError[] = "InspectionError";  // Unknown

// The finding kind of a condition type ("xid", "network", "host", "gpu"); "" for a type
// that is not one of ours.
std::string NodeFindingKind(const std::string& condition_type);

// The Node's findings: one InspectionObservation per Peregrine condition that is not
// "False" (kind as NodeFindingKind, component "node/<type>", summary "node inspector:
// <message>", at = lastTransitionTime in Unix ns, 0 when absent or unparseable).
// True + MachineFault -> FAULT, machine_attributed; True + Fault -> FAULT; True + Warning
// or any other reason -> WARNING; Unknown + InspectionError -> ERROR; Unknown otherwise ->
// CANNOT_SEE. Other conditions (Ready, ...) and malformed entries are ignored.
std::vector<InspectionObservation> NodeFindings(const nlohmann::json& node);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_NODE_FINDINGS_H_
