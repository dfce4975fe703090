// Kueue admission of a TrainingJob, the pure part: the kueue.x-k8s.io/v1beta1 Workload
// Peregrine creates for a job labelled kueue.x-k8s.io/queue-name, how the Workload's
// status reads (admitted, evicted, waiting, finished), the node selectors and tolerations
// its admission's ResourceFlavors put on the job's pods, and the status writes Peregrine
// makes as the job's integration (quota released after an eviction, Finished). The I/O is
// kueue_gate.h; the decision to suspend is the core's (JobObservation::hold).
//
// Pod sets: "workers" (count spec.machines, the active pod's template) and, when the
// warm-standby pool is not empty, "standbys" (count: the pool size the core sizes from
// the spec, the standby pod's template). Standbys are a pod set of their own because they
// hold nodes and GPUs like the workers: quota that Kueue did not account for would let
// the job take more than its ClusterQueue allows.
//
// Pure functions; thread-safe.
#ifndef PEREGRINE_CONTROLLER_KUBE_KUEUE_WORKLOAD_H_
#define PEREGRINE_CONTROLLER_KUBE_KUEUE_WORKLOAD_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"
#include "controller/kube/pod_builder.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

inline constexpr char kKueueGroup[] = "kueue.x-k8s.io";
inline constexpr char kKueueVersion[] = "v1beta1";
inline constexpr char kWorkersPodSet[] = "workers";
inline constexpr char kStandbysPodSet[] = "standbys";
// Kueue's label naming the uid of the job a Workload belongs to.
inline constexpr char kKueueJobUidLabel[] = "kueue.x-k8s.io/job-uid";

kube::ResourcePath WorkloadsPath(const std::string& ns);
kube::ResourcePath ResourceFlavorsPath();  // cluster-scoped
kube::ResourcePath PriorityClassesPath();  // scheduling.k8s.io/v1, cluster-scoped

// The queue the job is labelled with; nullopt when it does not use Kueue.
std::optional<std::string> KueueQueueName(const TrainingJob& job);
// "trainingjob-<name>-<first 8 characters of the uid>": one Workload per job object.
std::string WorkloadName(const TrainingJob& job);

// The warm-standby pool the decision core keeps for this spec (its size does not depend
// on the job's state).
int StandbyPoolSizeOf(const TrainingJobSpec& spec);

// The pod standing for a pod set: slot 0's machine pod, or the first standby.
PodToCreate PodSetPod(const TrainingJob& job, bool standby);

// The job's pod sets, in order (workers, then standbys when the pool is not empty):
// {"name", "count", "template": {"metadata": {labels, annotations}, "spec": the pod's}}.
absl::StatusOr<nlohmann::json> BuildPodSets(const TrainingJob& job, const PodBuildOptions& options);

// The Workload to create: spec.queueName from the label, spec.podSets, and with the pod
// template's spec.priorityClassName its name, `priority` (the PriorityClass's value) and
// priorityClassSource scheduling.k8s.io/priorityclass; owned by the job (controller:
// true), labelled with the job's name and uid.
absl::StatusOr<nlohmann::json> BuildWorkload(const TrainingJob& job, const PodBuildOptions& options,
                                             std::optional<int32_t> priority);
// The pod template's spec.priorityClassName, "" when it has none.
std::string JobPriorityClassName(const TrainingJob& job);

// True when an existing Workload's pod sets are the ones the job needs now (same names,
// counts and containers' resources): otherwise the Workload is replaced (its pod sets
// cannot change).
bool PodSetsMatch(const nlohmann::json& workload, const nlohmann::json& pod_sets);

// What the Workload's status says, as Kueue's API defines it.
enum class WorkloadState {
  kPending,   // no quota reserved, or reserved but Admitted is not True (admission checks)
  kAdmitted,  // Admitted=True with status.admission
  kEvicted,   // Evicted=True: the job must stop; its quota is released once its pods are gone
  kFinished,  // Finished=True
};
struct WorkloadView {
  WorkloadState state = WorkloadState::kPending;
  std::string reason;   // the deciding condition's reason ("" when it has none)
  std::string message;  // ... and message
  bool has_admission = false;
  // Admitted: the flavors assigned to each pod set (status.admission.podSetAssignments
  // [].flavors values), by pod set name.
  std::map<std::string, std::set<std::string>> flavors;
};
WorkloadView ReadWorkload(const nlohmann::json& workload);

// The hold for the core while the Workload is not admitted; nullopt once it is.
std::optional<JobObservation::Hold> HoldFor(const std::string& workload_name, const WorkloadView& view);

// Node selector and tolerations of one pod set, from its assigned ResourceFlavors
// (spec.nodeLabels and spec.tolerations), as Kueue's job integrations apply them.
struct PodSetScheduling {
  std::map<std::string, std::string> node_selector;
  std::vector<nlohmann::json> tolerations;
  bool operator==(const PodSetScheduling&) const = default;
};
// kInvalidArgument when two flavors ask for different values of one node label.
absl::StatusOr<PodSetScheduling> SchedulingFromFlavors(const std::vector<nlohmann::json>& flavors);
// Adds the scheduling to a built pod: its node selector keys (kInvalidArgument naming the
// key when the pod template selects another value for it) and its tolerations (those the
// pod has already are not repeated).
absl::Status ApplyScheduling(const PodSetScheduling& scheduling, nlohmann::json* pod);

// Status writes (to the Workload's status subresource, on the object as read):
// after an eviction, once the job's pods are gone, the quota reservation is released as
// Kueue's integrations do (status.admission removed, QuotaReserved=False reason Pending
// and Admitted=False with the eviction's message, Requeued=True when it was preempted);
// when the job ends, Finished=True reason Succeeded or Failed. `now_rfc3339` stamps
// changed conditions. Each returns false when there is nothing to change.
bool ReleaseQuota(nlohmann::json* workload, const std::string& now_rfc3339);
bool MarkFinished(nlohmann::json* workload, bool succeeded, const std::string& message,
                  const std::string& now_rfc3339);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_KUEUE_WORKLOAD_H_
