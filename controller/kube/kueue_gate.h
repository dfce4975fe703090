// KueueGate: the I/O of Kueue admission for TrainingJobs labelled
// kueue.x-k8s.io/queue-name (the objects and their reading are kueue_workload.h). Each
// Sync ensures the job's Workload exists and is current, reads its admission, releases the
// quota of an evicted Workload once the job's pods are gone, and returns what holds the
// job (JobObservation::hold for the decision core) and, once admitted, the node selector
// and tolerations of each pod set. Finish marks the Workload Finished when the job ends.
//
// Errors: an API failure is returned as is (the caller retries the reconcile; nothing is
// decided on a partial picture, so a running job is never suspended by a failed read).
// What is the cluster's or the job's to fix is a hold, not an error: Kueue not installed
// (404 for the workloads resource: KueueNotInstalled), a missing PriorityClass
// (PriorityClassNotFound), flavors asking for conflicting node labels (AdmissionConflict).
//
// Thread-safe (the RestClient is; no state of its own). The client must outlive it.
#ifndef PEREGRINE_CONTROLLER_KUBE_KUEUE_GATE_H_
#define PEREGRINE_CONTROLLER_KUBE_KUEUE_GATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"
#include "controller/kube/kueue_workload.h"
#include "controller/kube/pod_builder.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

class KueueGate {
 public:
  // `may_write` is asked before every write (the leader check); a refused write is
  // kUnavailable.
  KueueGate(kube::RestClient* client, PodBuildOptions pod_options, std::function<bool()> may_write);

  struct Admission {
    std::optional<JobObservation::Hold> hold;           // nullopt: admitted, the job may run
    std::map<std::string, PodSetScheduling> pod_sets;  // by pod set name, when admitted
  };
  // `pods_gone`: no pod of the job exists any more (an evicted Workload's quota may be
  // released). `now` stamps the conditions Peregrine writes.
  absl::StatusOr<Admission> Sync(const TrainingJob& job, bool pods_gone, int64_t now);
  // Finished=True (Succeeded or Failed) on the job's Workload; OK when it is already
  // Finished or does not exist (Kueue not installed, never created).
  absl::Status Finish(const TrainingJob& job, bool succeeded, const std::string& message, int64_t now);

 private:
  absl::StatusOr<Admission> Create(const TrainingJob& job);
  absl::StatusOr<Admission> Admitted(const TrainingJob& job, const WorkloadView& view);
  absl::Status CheckMayWrite(const char* what) const;

  kube::RestClient* const client_;
  const PodBuildOptions pod_options_;
  const std::function<bool()> may_write_;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_KUEUE_GATE_H_
