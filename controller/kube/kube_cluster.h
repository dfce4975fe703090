// KubeCluster: the Kubernetes implementation of Cluster (cluster.h). Reads pods and nodes
// from informer caches (pods mapped by pod_observer.h), writes to the API server (pods
// built by pod_builder.h); every write first asks `may_write` (the leader check) and is
// refused with kUnavailable when it says no. The behaviour of each method is described in
// kube_cluster.cc and docs/kubernetes.md.
//
// Thread-safe (the informers, RestClient and EventRecorder are); each job's calls come
// from one work-queue worker at a time. The client, informers and recorder must outlive it.
#ifndef PEREGRINE_CONTROLLER_KUBE_KUBE_CLUSTER_H_
#define PEREGRINE_CONTROLLER_KUBE_KUBE_CLUSTER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "controller/cluster.h"
#include "controller/kube/agent_ca_configmap.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/kueue_gate.h"
#include "controller/kube/pod_builder.h"
#include "controller/kube/pod_observer.h"
#include "controller/kube/resources.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

class NodeHealthController;

// The pod's options (controller address, agent image, heartbeat) and the cluster's.
struct KubeClusterOptions : PodBuildOptions {
  uint32_t rendezvous_port = 29500;
  // With agent TLS: publishes the CA bundle to the job's ConfigMap (must outlive the cluster).
  AgentCaPublisher* ca_publisher = nullptr;
  // Carries out QuarantineMachine through the node health lifecycle (must outlive the
  // cluster; required for QuarantineMachine).
  NodeHealthController* node_health = nullptr;
};

// A short label value (<= 63 characters of [A-Za-z0-9._-], starting and ending
// alphanumeric) summarising `reason`; "unknown" when nothing is left.
std::string ShortLabelValue(const std::string& reason);

// True when the pod's metadata.ownerReferences hold `job_uid` (never for an empty uid):
// the only test of a pod being a job's; the peregrine.dev/job label is not ownership.
bool OwnedByJob(const nlohmann::json& pod, const std::string& job_uid);

class KubeCluster final : public Cluster {
 public:
  KubeCluster(kube::RestClient* client, kube::Informer* pods, kube::Informer* nodes, kube::EventRecorder* events,
              KubeClusterOptions options, std::function<bool()> may_write);

  absl::Status CreatePod(const TrainingJob& job, const PodToCreate& pod) override;
  absl::Status DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) override;
  absl::StatusOr<std::vector<PodObservation>> ListPods(const TrainingJob& job) override;
  // The node health lifecycle's fault eviction (or over-eviction) input for the machine's
  // Node: cordon + taint + the record (NodeHealthController::Quarantine).
  absl::Status QuarantineMachine(const std::string& machine_id, const std::string& reason) override;
  // The cached node is unschedulable without Peregrine's quarantine label, or Peregrine
  // found it so when it labelled it (annotation peregrine.dev/cordoned-before).
  bool CordonedByOthers(const std::string& machine_id) override;
  absl::Status RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t now) override;
  absl::Status PersistStatus(const TrainingJob& job, const JobStatus& status) override;
  absl::StatusOr<std::optional<JobStatus>> LoadStatus(const TrainingJob& job) override;
  // A job labelled kueue.x-k8s.io/queue-name is held until the last SyncAdmission found
  // its Workload admitted (held too before any SyncAdmission); other jobs never are.
  std::optional<JobObservation::Hold> AdmissionHold(const TrainingJob& job) override;
  std::string RendezvousDomain(const TrainingJob& job) override;
  absl::StatusOr<uint32_t> RendezvousPort(const TrainingJob& job) override;

  // Creates (or finds) the job's headless Service (and, with a CA publisher, makes its
  // CA ConfigMap current).
  absl::Status EnsureJobObjects(const TrainingJob& job);
  // Names of every cached pod the job owns (OwnedByJob), including those being deleted.
  std::vector<std::string> CachedPodNames(const TrainingJob& job);
  // Kueue admission (kueue_gate.h) of a job labelled kueue.x-k8s.io/queue-name: ensures
  // its Workload and keeps what AdmissionHold answers and the node selector and
  // tolerations CreatePod adds to each pod set's pods. A job without the label: forgets
  // what was kept. An API error is returned and the kept admission is left as it was.
  absl::Status SyncAdmission(const TrainingJob& job, int64_t now);
  // The job ended: its Workload is marked Finished (no-op without the label).
  absl::Status FinishAdmission(const TrainingJob& job, bool succeeded, const std::string& message, int64_t now);
  void ForgetAdmission(const std::string& job_key);

 private:
  absl::Status CheckMayWrite(const char* what) const;

  kube::RestClient* const client_;
  kube::Informer* const pods_;
  kube::Informer* const nodes_;
  kube::EventRecorder* const events_;
  const KubeClusterOptions options_;
  const std::function<bool()> may_write_;
  KueueGate kueue_;
  absl::Mutex admission_mu_;
  std::map<std::string, KueueGate::Admission> admissions_ ABSL_GUARDED_BY(admission_mu_);  // by job key
  absl::Mutex deleted_mu_;
  std::set<std::string> deleted_uids_ ABSL_GUARDED_BY(deleted_mu_);  // pods this process deleted
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_KUBE_CLUSTER_H_
