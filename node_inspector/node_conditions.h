// The node inspector's results as Node conditions (the channel is described in
// controller/kube/node_findings.h, which names the condition types and reasons, and in
// docs/kubernetes.md "Node inspections").
//
// ConditionsFromResults groups the latest inspection results of the node into the four
// Peregrine conditions; MergeConditions folds them into the Node's status.conditions,
// leaving every other condition (the kubelet's Ready, other detectors') as it is. Both are
// pure (time is a parameter); thread-compatible.
#ifndef PEREGRINE_NODE_INSPECTOR_NODE_CONDITIONS_H_
#define PEREGRINE_NODE_INSPECTOR_NODE_CONDITIONS_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "agent/inspection/inspection_result.h"

namespace peregrine {

// The longest condition message written (longer ones are cut, with "...").
inline constexpr size_t kMaxConditionMessage = 1024;

struct NodeConditionReport {
  std::string type;    // kConditionKernelXid, kConditionNic, kConditionDisk, kConditionGpu
  std::string status;  // "True" (a problem), "False", "Unknown"
  std::string reason;  // kReason*
  std::string message;

  friend bool operator==(const NodeConditionReport&, const NodeConditionReport&) = default;
};

// The condition type a result belongs to: kind "xid" -> PeregrineKernelXid; kind "host"
// with a "/dev/..." component (block I/O errors from the kernel log) -> PeregrineDisk;
// "network" and "rdma" -> PeregrineNIC; "gpu" -> PeregrineGPU; "" for any other result
// (the job's volumes are the pod agent's).
std::string ConditionTypeOf(const InspectionResult& result);

// One report per condition type that has at least one result, in kNodeConditionTypes
// order. The worst result decides: a machine-attributed FAULT -> True/MachineFault, FAULT
// -> True/Fault, WARNING -> True/Warning; else CANNOT_SEE -> Unknown/CannotSee; else
// ERROR -> Unknown/InspectionError; else OK -> False/NoProblem; only NOT_PRESENT ->
// False/NotPresent. The message joins "component: summary" of the deciding results
// (at most kMaxConditionMessage characters).
std::vector<NodeConditionReport> ConditionsFromResults(const std::vector<InspectionResult>& results);

// A GPU node whose GPUs the inspector cannot see is not "no GPU": when the Node's
// status.allocatable has nvidia.com/gpu > 0 and the PeregrineGPU report says NotPresent
// (neither NVML nor nvidia-smi in the container: no NVIDIA runtime or RuntimeClass), the
// report becomes Unknown/CannotSee naming the count. Other reports are returned as given.
std::vector<NodeConditionReport> CheckGpuVisibility(std::vector<NodeConditionReport> reports,
                                                    const nlohmann::json& node);

struct MergedConditions {
  nlohmann::json conditions;  // the Node's full status.conditions after the merge
  bool changed = false;       // a report differs from the Node, or its heartbeat is due
};

// Folds `reports` into `current` (the Node's status.conditions; null or not an array:
// none). A condition of a reported type gets status, reason, message and
// lastHeartbeatTime = now; its lastTransitionTime stays unless status or reason change
// (then now). Other conditions are kept as they are, in place. `changed` is false when
// every report matches the Node and its lastHeartbeatTime is less than `heartbeat` old:
// nothing needs writing.
MergedConditions MergeConditions(const nlohmann::json& current, const std::vector<NodeConditionReport>& reports,
                                 absl::Time now, absl::Duration heartbeat);

}  // namespace peregrine

#endif  // PEREGRINE_NODE_INSPECTOR_NODE_CONDITIONS_H_
