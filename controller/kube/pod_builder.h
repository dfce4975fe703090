// The pod KubeCluster creates for one machine of a TrainingJob: spec.template (a
// PodTemplateSpec) with the agent injected (an init container copying the agent's files,
// the training container running peregrine-agent, the token Secret mounted; with agent TLS
// the CA ConfigMap too), the peregrine.dev labels, an ownerReference to the job and nvidia.com/gpu = gpusPerMachine.
// Pure functions; thread-safe. The layout of the pod is described in pod_builder.cc.
#ifndef PEREGRINE_CONTROLLER_KUBE_POD_BUILDER_H_
#define PEREGRINE_CONTROLLER_KUBE_POD_BUILDER_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

// The extended resource the NVIDIA device plugin advertises.
inline constexpr char kGpuResource[] = "nvidia.com/gpu";
// Where the agent image keeps the files the init container copies.
inline constexpr char kAgentImagePrefix[] = "/opt/peregrine";

struct PodBuildOptions {
  std::string controller_address;  // host:port the agents dial (the gRPC Service)
  std::string agent_image;         // holds /opt/peregrine/bin/peregrine-agent
  int heartbeat_ms = 0;            // 0: the agent's default
  // The agents dial with TLS: the job's CA ConfigMap (JobCaConfigMapName) is mounted and
  // passed as --tls-ca.
  bool agent_tls = false;
  // The node inspector DaemonSet runs the kernel-log, NIC/RDMA and GPU/DCGM inspections:
  // the agent is started with --host-inspections node (only the volume inspection).
  bool host_inspections_on_node = false;
};

// The pod to submit for `pod`. The training container's image is pod.image (the running
// code version's, decided by the core), else the template's, else spec.codeVersion.image.
// Its resources get nvidia.com/gpu =
// spec.gpusPerMachine (the limit always; the request when the template has one).
// kInvalidArgument naming the field when the template is not a PodTemplateSpec with at
// least one container (or spec.codeVersion.image to make one), has no image, or sets an
// nvidia.com/gpu limit or request other than gpusPerMachine.
absl::StatusOr<nlohmann::json> BuildPod(const TrainingJob& job, const PodToCreate& pod,
                                        const PodBuildOptions& options);

// Checks what the CRD schema cannot see but a cluster needs to run the job: that
// BuildPod can make the active pod of the last slot and a standby from spec.template
// and that the name fits the pod hostnames (kMaxJobNameLength, job_parser.h), and with
// spec.checkpoint.persistEverySteps > 0 that persistPath is set and lies on a writable
// volumeMount of the training container whose volume outlives the pod (not emptyDir,
// configMap, secret, downwardAPI or projected). OK, or
// kInvalidArgument naming the field (reported as Valid=False; nothing is created).
absl::Status ValidateForKubernetes(const TrainingJob& job);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_POD_BUILDER_H_
