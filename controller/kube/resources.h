// The Kubernetes objects Peregrine reads and writes: their resource paths, the labels
// and annotations it sets, the pod informer's job index and the names of the per-job
// objects. Pure functions and constants; thread-safe.
#ifndef PEREGRINE_CONTROLLER_KUBE_RESOURCES_H_
#define PEREGRINE_CONTROLLER_KUBE_RESOURCES_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/core/job_spec.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

inline constexpr char kJobLabel[] = "peregrine.dev/job";
inline constexpr char kRoleLabel[] = "peregrine.dev/role";
inline constexpr char kSlotLabel[] = "peregrine.dev/slot";
inline constexpr char kQuarantineLabel[] = "peregrine.dev/quarantined";
inline constexpr char kQuarantineReasonAnnotation[] = "peregrine.dev/quarantine-reason";
// The finalizer that makes a deleted TrainingJob wait for its pods' teardown.
inline constexpr char kTeardownFinalizer[] = "peregrine.dev/teardown";
// The label the leading replica puts on its own pod (the agents' Service selects it).
inline constexpr char kLeaderLabel[] = "peregrine.dev/leader";
// The key of the CA bundle in the job's CA ConfigMap (JobCaConfigMapName).
inline constexpr char kJobCaKey[] = "ca.crt";
// The pod informer's index: "<namespace>/<job>" from the pod's namespace and job label.
inline constexpr char kPodsByJobIndex[] = "job";

// Resource paths (namespace filled in by the caller where it matters).
kube::ResourcePath TrainingJobsPath(const std::string& ns);
kube::ResourcePath PodsPath(const std::string& ns);
kube::ResourcePath NodesPath();
kube::ResourcePath ServicesPath(const std::string& ns);
kube::ResourcePath ConfigMapsPath(const std::string& ns);

// Index function for kPodsByJobIndex.
std::vector<std::string> PodJobIndex(const nlohmann::json& pod);

// The ownerReference every object of the job carries (controller, blockOwnerDeletion),
// so deleting the job garbage-collects it.
nlohmann::json JobOwnerReference(const TrainingJob& job);

// Names of the per-job objects.
std::string JobServiceName(const TrainingJob& job);  // the headless Service: the job's name
std::string JobCaConfigMapName(const TrainingJob& job);  // "<job>-peregrine-ca"

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_RESOURCES_H_
