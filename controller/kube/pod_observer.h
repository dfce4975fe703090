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
//   Node Ready False/Unknown -> failed, reason "node X NotReady";
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

// The Node's Ready condition: "True", "False", "Unknown" or "" when absent.
std::string NodeReadyStatus(const nlohmann::json& node);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_POD_OBSERVER_H_
