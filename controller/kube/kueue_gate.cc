#include "controller/kube/kueue_gate.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/kube/json_fields.h"
#include "controller/status_json.h"

// One Sync, in order:
//   - GET the Workload (WorkloadName). Absent: build it (with the job's PriorityClass's
//     value when the pod template names one) and create it; a 404 on the create means the
//     API server does not serve workloads.kueue.x-k8s.io (Kueue is not installed): the job
//     is held with KueueNotInstalled and the next reconcile tries again. Created: held
//     until Kueue admits it.
//   - Present but its pod sets are not the job's any more (spec.podSets cannot change):
//     deleted (uid precondition); the next Sync creates the new one; held meanwhile.
//   - Evicted with its admission still set and the job's pods gone: the quota is released
//     (kueue_workload.h ReleaseQuota) with a conditional status write.
//   - Admitted: every assigned ResourceFlavor is read and each pod set's node selector and
//     tolerations are computed and checked against the job's pod template (a conflict
//     holds the job with AdmissionConflict: its pods could not be placed as admitted).
//   - Otherwise the hold says why (kueue_workload.h HoldFor).

namespace peregrine {
namespace {

using nlohmann::json;
using kube::Path;
using kube::Str;

KueueGate::Admission Held(const char* reason, std::string message) {
  KueueGate::Admission out;
  out.hold = JobObservation::Hold{reason, std::move(message)};
  return out;
}

}  // namespace

KueueGate::KueueGate(kube::RestClient* client, PodBuildOptions pod_options, std::function<bool()> may_write)
    : client_(client), pod_options_(std::move(pod_options)), may_write_(std::move(may_write)) {}

absl::Status KueueGate::CheckMayWrite(const char* what) const {
  if (may_write_ && !may_write_()) return absl::UnavailableError(absl::StrCat("not the leader: refusing to ", what));
  return absl::OkStatus();
}

absl::StatusOr<KueueGate::Admission> KueueGate::Sync(const TrainingJob& job, bool pods_gone, int64_t now) {
  const std::string name = WorkloadName(job);
  const kube::ResourcePath path = WorkloadsPath(job.metadata.namespace_);
  auto pod_sets = BuildPodSets(job, pod_options_);
  if (!pod_sets.ok()) return pod_sets.status();
  auto workload = client_->Get(path, name);
  if (absl::IsNotFound(workload.status())) return Create(job);
  if (!workload.ok()) return workload.status();
  WorkloadView view = ReadWorkload(*workload);
  if (view.state != WorkloadState::kFinished && !PodSetsMatch(*workload, *pod_sets)) {
    if (auto s = CheckMayWrite("replace a Workload"); !s.ok()) return s;
    kube::DeleteOptions options;
    options.precondition_uid = Str((*workload)["metadata"], "uid");
    if (absl::Status s = client_->Delete(path, name, options); !s.ok() && !absl::IsNotFound(s)) return s;
    return Held("WorkloadReplaced",
                          absl::StrCat("the job's pod sets changed (machines, standby pool or resources): Workload ",
                                       name, " was deleted and is created again for Kueue to admit"));
  }
  if (view.state == WorkloadState::kEvicted && view.has_admission && pods_gone) {
    json released = *workload;
    if (ReleaseQuota(&released, FormatRfc3339(now))) {
      if (auto s = CheckMayWrite("release a Workload's quota"); !s.ok()) return s;
      auto written = client_->UpdateStatus(path, name, released);  // conditional on the read resourceVersion
      if (!written.ok()) return written.status();
      view = ReadWorkload(*written);
    }
  }
  if (view.state == WorkloadState::kAdmitted) return Admitted(job, view);
  Admission out;
  out.hold = HoldFor(name, view);
  return out;
}

absl::StatusOr<KueueGate::Admission> KueueGate::Create(const TrainingJob& job) {
  std::optional<int32_t> priority;
  if (const std::string pc = JobPriorityClassName(job); !pc.empty()) {
    auto klass = client_->Get(PriorityClassesPath(), pc);
    if (absl::IsNotFound(klass.status())) {
      return Held("PriorityClassNotFound",
                            absl::StrCat("spec.template.spec.priorityClassName names PriorityClass ", pc,
                                         ", which does not exist: the Workload needs its value"));
    }
    if (!klass.ok()) return klass.status();
    const json* value = Path(*klass, {"value"});
    if (value == nullptr || !value->is_number_integer()) {
      return absl::DataLossError(absl::StrCat("PriorityClass ", pc, " has no integer value"));
    }
    priority = value->get<int32_t>();
  }
  auto workload = BuildWorkload(job, pod_options_, priority);
  if (!workload.ok()) return workload.status();
  if (auto s = CheckMayWrite("create a Workload"); !s.ok()) return s;
  const std::string name = WorkloadName(job);
  auto created = client_->Create(WorkloadsPath(job.metadata.namespace_), *workload);
  if (absl::IsNotFound(created.status())) {
    return Held("KueueNotInstalled",
                          absl::StrCat("the job is labelled ", kKueueQueueNameLabel, "=", *KueueQueueName(job),
                                       " but the API server does not serve workloads.", kKueueGroup, "/", kKueueVersion,
                                       " (404): install Kueue, or remove the label to run without queueing; the job "
                                       "waits and never runs unadmitted"));
  }
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) return created.status();
  return Held("WorkloadNotAdmitted", absl::StrCat("created Workload ", name, " in queue ",
                                                            *KueueQueueName(job), "; waiting for Kueue to admit it"));
}

absl::StatusOr<KueueGate::Admission> KueueGate::Admitted(const TrainingJob& job, const WorkloadView& view) {
  Admission out;
  std::map<std::string, json> flavors;
  for (const auto& [pod_set, names] : view.flavors) {
    for (const std::string& f : names) {
      if (flavors.count(f)) continue;
      auto flavor = client_->Get(ResourceFlavorsPath(), f);
      if (!flavor.ok()) return flavor.status();  // admitted with a flavor we cannot read: retry
      flavors[f] = *std::move(flavor);
    }
  }
  for (const auto& [pod_set, names] : view.flavors) {
    std::vector<json> assigned;
    for (const std::string& f : names) assigned.push_back(flavors[f]);
    auto scheduling = SchedulingFromFlavors(assigned);
    if (!scheduling.ok()) return Held("AdmissionConflict", std::string(scheduling.status().message()));
    // The pods must take the selector: check it against the job's own template.
    const bool standby = pod_set == kStandbysPodSet;
    auto pod = BuildPod(job, PodSetPod(job, standby), pod_options_);
    if (!pod.ok()) return pod.status();
    if (absl::Status s = ApplyScheduling(*scheduling, &*pod); !s.ok()) {
      return Held("AdmissionConflict", absl::StrCat("pod set ", pod_set, ": ", s.message()));
    }
    out.pod_sets[pod_set] = *std::move(scheduling);
  }
  return out;
}

absl::Status KueueGate::Finish(const TrainingJob& job, bool succeeded, const std::string& message, int64_t now) {
  const std::string name = WorkloadName(job);
  const kube::ResourcePath path = WorkloadsPath(job.metadata.namespace_);
  auto workload = client_->Get(path, name);
  if (absl::IsNotFound(workload.status())) return absl::OkStatus();
  if (!workload.ok()) return workload.status();
  json finished = *workload;
  if (!MarkFinished(&finished, succeeded, message, FormatRfc3339(now))) return absl::OkStatus();
  if (auto s = CheckMayWrite("finish a Workload"); !s.ok()) return s;
  return client_->UpdateStatus(path, name, finished).status();
}

}  // namespace peregrine
