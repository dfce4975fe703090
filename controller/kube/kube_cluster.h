// KubeCluster: the Kubernetes implementation of Cluster (cluster.h). It reads pods and
// nodes from informer caches and writes to the API server:
//   - CreatePod builds the pod from the TrainingJob's spec.template (a PodTemplateSpec)
//     with the agent injected: an init container (KubeClusterOptions::agent_image) copies
//     the agent's files into an emptyDir mounted at /peregrine; the training container
//     (the template's first container) runs
//       /peregrine/bin/peregrine-agent --controller <addr> --job <ns>/<name> --pod <pod>
//                                      --role active|standby --machine-id $(NODE_NAME)
//     with NODE_NAME from the downward API, PEREGRINE_TOKEN_FILE pointing at the
//     per-job token Secret mounted read-only and, when spec.failSlow.enabled,
//     PEREGRINE_NCCL_HOOK=/peregrine/lib/libperegrine_nccl.so. The init container runs
//     `cp -a /opt/peregrine/. /peregrine/`: the agent image (docker/Dockerfile, target
//     agent) holds bin/peregrine-agent and lib/libperegrine_nccl.so under
//     kAgentImagePrefix. Labels peregrine.dev/job, /role, /slot;
//     an ownerReference to the TrainingJob (controller, blockOwnerDeletion) so deleting
//     the job garbage-collects it; hostname = pod name and subdomain = the job's headless
//     Service, so rank 0 is reachable at <pod>.<job>.<ns>.svc; restartPolicy Never (the
//     controller, not the kubelet, replaces a failed machine).
//   - ListPods maps the cached pods labelled peregrine.dev/job=<name> (excluding those
//     with a deletionTimestamp) to PodObservation: phase Running -> running; Failed or
//     Succeeded (the agent never exits on its own while the job runs) -> failed; a node
//     whose Ready condition is False or Unknown -> failed ("node X NotReady"); a pod
//     stuck Pending carries the reason, and a standby stuck too long fails (ObservePod).
//   - PersistStatus adds the PodsStuck condition (from the last ListPods) to the status.
//   - DeletePod deletes with gracePeriodSeconds and a uid precondition (the uid cached),
//     so a pod re-created under the same name is never deleted by a stale decision.
//   - QuarantineMachine (called by JobController for every machine the decision engine
//     evicts) cordons the node (merge patch spec.unschedulable=true), labels it
//     peregrine.dev/quarantined=<short reason> with the full reason in an annotation, and
//     records a Warning Event PeregrineQuarantined on the Node. A node that is gone is
//     not an error. Uncordoning after repair is the administrator's (kubectl uncordon).
//   - RecordEvent goes through the EventRecorder; PersistStatus writes the status
//     subresource (409: re-read and retry), LoadStatus reads it back from the API server.
// Every write first asks `may_write` (the leader check): when it says no the write is
// refused with kUnavailable and nothing is sent, so a replica that lost its Lease stops
// acting at once.
//
// EnsureJobObjects creates the job's headless Service and token Secret (idempotent, both
// owned by the job) and returns the token the agents must present.
//
// Thread-safe (the informers, RestClient and EventRecorder are); each job's calls come
// from one work-queue worker at a time. The client, informers and recorder must outlive it.
#ifndef PEREGRINE_CONTROLLER_KUBE_KUBE_CLUSTER_H_
#define PEREGRINE_CONTROLLER_KUBE_KUBE_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/cluster.h"
#include "controller/job_parser.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

inline constexpr char kJobLabel[] = "peregrine.dev/job";
inline constexpr char kRoleLabel[] = "peregrine.dev/role";
inline constexpr char kSlotLabel[] = "peregrine.dev/slot";
inline constexpr char kQuarantineLabel[] = "peregrine.dev/quarantined";
inline constexpr char kQuarantineReasonAnnotation[] = "peregrine.dev/quarantine-reason";
// The pod informer's index: "<namespace>/<job>" from the pod's namespace and job label.
inline constexpr char kPodsByJobIndex[] = "job";
// The extended resource the NVIDIA device plugin advertises.
inline constexpr char kGpuResource[] = "nvidia.com/gpu";
// Where the agent image keeps the files the init container copies.
inline constexpr char kAgentImagePrefix[] = "/opt/peregrine";

// Resource paths (namespace filled in by the caller where it matters).
kube::ResourcePath TrainingJobsPath(const std::string& ns);
kube::ResourcePath PodsPath(const std::string& ns);
kube::ResourcePath NodesPath();
kube::ResourcePath ServicesPath(const std::string& ns);
kube::ResourcePath SecretsPath(const std::string& ns);

// Index function for kPodsByJobIndex.
std::vector<std::string> PodJobIndex(const nlohmann::json& pod);

struct KubeClusterOptions {
  std::string controller_address;  // host:port the agents dial (the gRPC Service)
  std::string agent_image;         // holds /opt/peregrine/bin/peregrine-agent
  uint32_t rendezvous_port = 29500;
  int heartbeat_ms = 0;            // 0: the agent's default
  // A standby pod still Pending with a stuck reason this long after its creation is
  // reported failed, so the decision engine deletes it and creates another.
  absl::Duration standby_pending_timeout = absl::Minutes(10);
};

// The condition KubeCluster adds to every status it writes: True while a pod of the
// job is stuck (ImagePullBackOff, ErrImagePull, CreateContainerConfigError, ...,
// Unschedulable), with the pods and reasons in the message.
inline constexpr char kPodsStuckCondition[] = "PodsStuck";

// Pure: one pod as the controller sees it at `now`. `node` is the pod's Node (nullptr
// when unknown). Running -> running; Failed/Succeeded -> failed with the container's
// termination reason; Node Ready False/Unknown -> failed "node X NotReady"; Pending with
// a container waiting on ErrImagePull, ImagePullBackOff, InvalidImageName,
// CreateContainerConfigError, CreateContainerError or RunContainerError, or with
// PodScheduled=False reason Unschedulable -> waiting_reason "<Reason>: <message>"; a
// standby (label peregrine.dev/role=standby) stuck so for longer than
// `standby_pending_timeout` since its creationTimestamp -> failed, with no machine_id
// (the node is not to blame for an image or scheduling problem).
PodObservation ObservePod(const nlohmann::json& pod, const nlohmann::json* node, absl::Time now,
                          absl::Duration standby_pending_timeout);

// The PodsStuck condition's message for `pods` ("" when none is stuck): at most five
// "<pod>: <waiting_reason>" entries joined by "; ", then "and N more".
std::string StuckPodsMessage(const std::vector<PodObservation>& pods);

// Names of the per-job objects.
std::string JobServiceName(const TrainingJob& job);  // the headless Service: the job's name
std::string JobSecretName(const TrainingJob& job);   // "<job>-peregrine-token"

// The pod KubeCluster::CreatePod submits (exposed for tests). The training container's
// resources get nvidia.com/gpu = spec.gpusPerMachine (the limit always; the request when
// the template has one). kInvalidArgument when the template is not a PodTemplateSpec
// with at least one container (or spec.codeVersion.image to make one), or when it sets an
// nvidia.com/gpu limit or request other than gpusPerMachine.
absl::StatusOr<nlohmann::json> BuildPod(const TrainingJob& job, const PodToCreate& pod,
                                        const KubeClusterOptions& options);

// Checks what the CRD schema cannot see but a cluster needs to run the job: that
// BuildPod can make the active pod of the last slot and a standby from spec.template
// (a container or codeVersion.image to make one, an image, no conflicting nvidia.com/gpu)
// and that the name fits the pod hostnames (kMaxJobNameLength, job_parser.h). OK, or kInvalidArgument
// naming the field; the controller reports it as Valid=False and creates nothing.
absl::Status ValidateForKubernetes(const TrainingJob& job);

// A short label value (<= 63 characters of [A-Za-z0-9._-], starting and ending
// alphanumeric) summarising `reason`; "unknown" when nothing is left.
std::string ShortLabelValue(const std::string& reason);

class KubeCluster final : public Cluster {
 public:
  KubeCluster(kube::RestClient* client, kube::Informer* pods, kube::Informer* nodes, kube::EventRecorder* events,
              KubeClusterOptions options, std::function<bool()> may_write);

  absl::Status CreatePod(const TrainingJob& job, const PodToCreate& pod) override;
  absl::Status DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) override;
  absl::StatusOr<std::vector<PodObservation>> ListPods(const TrainingJob& job) override;
  absl::Status QuarantineMachine(const std::string& machine_id, const std::string& reason) override;
  absl::Status RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t now) override;
  absl::Status PersistStatus(const TrainingJob& job, const JobStatus& status) override;
  absl::StatusOr<std::optional<JobStatus>> LoadStatus(const TrainingJob& job) override;
  std::string RendezvousDomain(const TrainingJob& job) override;
  absl::StatusOr<uint32_t> RendezvousPort(const TrainingJob& job) override;

  // Creates (or finds) the job's headless Service and token Secret; returns the token.
  absl::StatusOr<std::string> EnsureJobObjects(const TrainingJob& job);
  // Names of every cached pod of the job, including those being deleted.
  std::vector<std::string> CachedPodNames(const TrainingJob& job);
  // True when the stuck pods ListPods last saw differ from what the last PersistStatus
  // wrote into the PodsStuck condition (the caller then persists the status again).
  bool StuckPodsChanged(const TrainingJob& job);
  // Drops what is remembered about the job (it was deleted).
  void ForgetJob(const TrainingJob& job);

 private:
  absl::Status CheckMayWrite(const char* what) const;

  kube::RestClient* const client_;
  kube::Informer* const pods_;
  kube::Informer* const nodes_;
  kube::EventRecorder* const events_;
  const KubeClusterOptions options_;
  const std::function<bool()> may_write_;
  struct StuckState {
    std::string seen;       // StuckPodsMessage of the last ListPods
    std::string written;    // the message the last status write carried
    bool written_once = false;
    int64_t since_ns = 0;   // lastTransitionTime of the condition written
    bool stuck = false;     // its status
  };
  absl::Mutex stuck_mu_;
  std::map<std::string, StuckState> stuck_ ABSL_GUARDED_BY(stuck_mu_);
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_KUBE_CLUSTER_H_
