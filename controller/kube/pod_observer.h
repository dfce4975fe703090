// How the controller reads one pod (and its Node) from the informer caches: a pure
// mapping from the Pod and Node objects to the PodObservation the decision engine sees.
// No clock: the standby pending timeout is applied by KubeCluster (kube_cluster.h).
// Pure functions; thread-safe.
#ifndef PEREGRINE_CONTROLLER_KUBE_POD_OBSERVER_H_
#define PEREGRINE_CONTROLLER_KUBE_POD_OBSERVER_H_

#include <string>

#include <nlohmann/json.hpp>

#include "controller/core/job_state.h"

namespace peregrine {

// One pod as it stands. `node` is the pod's Node (nullptr when unknown).
//   phase Running -> running;
//   Failed/Succeeded -> failed, reason the first terminated container's reason and exit code, else the pod's reason and message;
//   lost for a cause that is not the machine's (NotMachineFaultReason) -> failed and
//     not_machine_fault, reason that cause;
//   Node Ready False/Unknown -> node_unready (not failed: the decision engine judges it),
//     reason "node X NotReady (Ready=Unknown)";
//   Pending and stuck (PodStuckReason) -> waiting_reason.
// machine_id is spec.nodeName.
PodObservation ObservePodObject(const nlohmann::json& pod, const nlohmann::json* node);

// Why a Pending pod cannot start, or "" when it is just on its way (ContainerCreating,
// PodInitializing, waiting to be scheduled without a verdict yet): a container (init or
// not) waiting on ErrImagePull, ImagePullBackOff, InvalidImageName,
// CreateContainerConfigError, CreateContainerError or RunContainerError ("<Reason>
// (container <name>): <message>"), or PodScheduled=False reason Unschedulable
// ("Unschedulable: <message>"). Messages are cut at 200 characters.
std::string PodStuckReason(const nlohmann::json& pod);

// Why the pod was lost for a cause that is not its machine's, or "": a container
// OOMKilled, status.reason Evicted or Preempting, condition DisruptionTarget=True for a
// preemption, an eviction through the API or the kubelet, or a deletionTimestamp set.
std::string NotMachineFaultReason(const nlohmann::json& pod);

// The Node's Ready condition: "True", "False", "Unknown" or "" when absent.
std::string NodeReadyStatus(const nlohmann::json& node);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_POD_OBSERVER_H_
