// Cluster: how the controller acts on "a cluster" (docs/architecture.md). Two implementations: the
// Kubernetes API (controller/kube/) and local processes (local_cluster.h).
//
// Contract for every method: idempotent where the name says so, returns absl::Status with
// the code saying what happens next (kUnavailable: retry with backoff; kAborted: re-read
// and decide again; kInvalidArgument: permanent). Thread-compatible: the job controller
// calls it from its one control loop.
#ifndef PEREGRINE_CONTROLLER_CLUSTER_H_
#define PEREGRINE_CONTROLLER_CLUSTER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

class Cluster {
 public:
  virtual ~Cluster() = default;

  // Creates the pod (one machine of the job) running peregrine-agent. Creating a pod
  // that already exists is OK.
  virtual absl::Status CreatePod(const TrainingJob& job, const PodToCreate& pod) = 0;
  // Deletes the pod: agents get SIGTERM and `grace_ms` before everything is killed.
  // Deleting a pod that does not exist is OK. Does not block for the grace period.
  virtual absl::Status DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) = 0;
  // The job's pods, excluding ones being deleted.
  virtual absl::StatusOr<std::vector<PodObservation>> ListPods(const TrainingJob& job) = 0;
  // Marks a machine unschedulable for node health management (cordon + label).
  virtual absl::Status QuarantineMachine(const std::string& machine_id, const std::string& reason) = 0;
  // Whether the machine was made unschedulable by someone other than Peregrine (asked
  // before QuarantineMachine; the job's cordon record says so and Peregrine never undoes
  // such a cordon). A cluster where only Peregrine cordons answers false.
  virtual bool CordonedByOthers(const std::string& machine_id) {
    (void)machine_id;
    return false;
  }
  // Why the cluster does not let the job run now (Kubernetes: Kueue has not admitted the
  // job's Workload, evicted it, or is not installed; JobObservation::hold). nullopt: nothing
  // holds it. A cluster without admission control answers nullopt.
  virtual std::optional<JobObservation::Hold> AdmissionHold(const TrainingJob& job) {
    (void)job;
    return std::nullopt;
  }
  // Records an event on the job (Kubernetes Event, or the local event log).
  virtual absl::Status RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t now) = 0;
  // Persists / loads the job status (status subresource, or the local state file).
  virtual absl::Status PersistStatus(const TrainingJob& job, const JobStatus& status) = 0;
  virtual absl::StatusOr<std::optional<JobStatus>> LoadStatus(const TrainingJob& job) = 0;
  // Rank 0's address is "<pod>.<domain>"; "" means 127.0.0.1 (see JobObservation).
  virtual std::string RendezvousDomain(const TrainingJob& job) = 0;
  // A port rank 0's rendezvous store can listen on for a new attempt.
  virtual absl::StatusOr<uint32_t> RendezvousPort(const TrainingJob& job) = 0;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CLUSTER_H_
