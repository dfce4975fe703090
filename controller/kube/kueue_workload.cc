#include "controller/kube/kueue_workload.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "controller/core/decision_engine.h"
#include "controller/core/standby_pool_size.h"
#include "controller/kube/json_fields.h"
#include "controller/kube/resources.h"

// How the Workload API is used (kueue.x-k8s.io/v1beta1, as Kueue's own batch/Job and
// JobSet integrations use it):
//   - the Workload lives in the job's namespace, owned by the TrainingJob (controller:
//     true), so deleting the job deletes it; spec.podSets cannot change, so a job whose
//     pod sets change (machines, the pool size, a container's resources) gets a new one;
//   - a pod set's template is the pod the job would create, reduced to what the API allows
//     in template.metadata (labels and annotations);
//   - Kueue reserves quota (condition QuotaReserved, status.admission with one
//     podSetAssignment per pod set naming a ResourceFlavor per resource) and, once its
//     admission checks pass, sets Admitted=True: only then may the job run;
//   - the assigned flavors' spec.nodeLabels become node selectors of the pod set's pods
//     and their spec.tolerations are added to the pods' tolerations;
//   - Evicted=True (preemption, a stopped queue, a PodsReady timeout, deactivation): the
//     job stops; once its pods are gone the integration clears status.admission and sets
//     QuotaReserved=False (reason Pending), Admitted=False, Requeued, so Kueue can admit it
//     again (it then sets Evicted=False);
//   - when the job ends, the integration sets Finished=True (reason Succeeded or Failed).

namespace peregrine {

using nlohmann::json;
using kube::Path;
using kube::Str;

kube::ResourcePath WorkloadsPath(const std::string& ns) {
  return kube::ResourcePath{kKueueGroup, kKueueVersion, "workloads", ns};
}
kube::ResourcePath ResourceFlavorsPath() { return kube::ResourcePath{kKueueGroup, kKueueVersion, "resourceflavors", ""}; }
kube::ResourcePath PriorityClassesPath() { return kube::ResourcePath{"scheduling.k8s.io", "v1", "priorityclasses", ""}; }

std::optional<std::string> KueueQueueName(const TrainingJob& job) {
  auto it = job.metadata.labels.find(kKueueQueueNameLabel);
  if (it == job.metadata.labels.end()) return std::nullopt;
  return it->second;
}

std::string WorkloadName(const TrainingJob& job) {
  return absl::StrCat("trainingjob-", job.metadata.name, "-", job.metadata.uid.substr(0, 8));
}

int StandbyPoolSizeOf(const TrainingJobSpec& spec) {
  StandbyPoolInputs in;
  in.machines = spec.machines;
  in.daily_failure_rate = spec.standby.daily_failure_rate;
  in.replenish_horizon_hours = spec.standby.replenish_horizon_hours;
  in.percentile = spec.standby.percentile;
  in.min = spec.standby.min;
  in.max = spec.standby.max;
  auto k = StandbyPoolSize(in);
  return k.ok() ? static_cast<int>(*k) : spec.standby.min;  // as the core's SizeStandbyPool
}

namespace {

json Template(const json& pod) {
  json meta = json::object();
  if (const json* l = Path(pod, {"metadata", "labels"}); l != nullptr && l->is_object()) meta["labels"] = *l;
  if (const json* a = Path(pod, {"metadata", "annotations"}); a != nullptr && a->is_object()) meta["annotations"] = *a;
  return json{{"metadata", meta}, {"spec", pod.value("spec", json::object())}};
}

// name -> (count, every container's resources) of a podSets array.
std::map<std::string, std::pair<int64_t, json>> Shape(const json& pod_sets) {
  std::map<std::string, std::pair<int64_t, json>> out;
  if (!pod_sets.is_array()) return out;
  for (const json& ps : pod_sets) {
    json resources = json::array();
    if (const json* cs = Path(ps, {"template", "spec", "containers"}); cs != nullptr && cs->is_array()) {
      for (const json& c : *cs) resources.push_back(c.value("resources", json::object()));
    }
    const json* count = Path(ps, {"count"});
    out[Str(ps, "name")] = {count != nullptr && count->is_number_integer() ? count->get<int64_t>() : -1, resources};
  }
  return out;
}

const json* FindCondition(const json& workload, const std::string& type) {
  const json* conds = Path(workload, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return nullptr;
  for (const json& c : *conds) {
    if (Str(c, "type") == type) return &c;
  }
  return nullptr;
}

bool IsTrue(const json* condition) { return condition != nullptr && Str(*condition, "status") == "True"; }

// Sets a metav1.Condition on the workload's status; false when it was already so.
bool SetCondition(json* workload, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, const std::string& now) {
  json& conds = (*workload)["status"]["conditions"];
  if (!conds.is_array()) conds = json::array();
  const std::string status = value ? "True" : "False";
  for (json& c : conds) {
    if (Str(c, "type") != type) continue;
    if (Str(c, "status") == status && Str(c, "reason") == reason && Str(c, "message") == message) return false;
    if (Str(c, "status") != status) c["lastTransitionTime"] = now;
    c["status"] = status;
    c["reason"] = reason;
    c["message"] = message;
    return true;
  }
  conds.push_back(
      json{{"type", type}, {"status", status}, {"reason", reason}, {"message", message}, {"lastTransitionTime", now}});
  return true;
}

}  // namespace

std::string JobPriorityClassName(const TrainingJob& job) {
  if (job.spec.template_json.empty()) return "";
  json t = json::parse(job.spec.template_json, nullptr, /*allow_exceptions=*/false);
  const json* name = Path(t, {"spec", "priorityClassName"});
  return name != nullptr && name->is_string() ? name->get<std::string>() : "";
}

PodToCreate PodSetPod(const TrainingJob& job, bool standby) {
  PodToCreate pod;
  pod.name = standby ? StandbyPodName(job.metadata.name, 0) : ActivePodName(job.metadata.name, 0);
  pod.role = standby ? PodRole::kStandby : PodRole::kActive;
  pod.slot = standby ? -1 : 0;
  return pod;
}

absl::StatusOr<json> BuildPodSets(const TrainingJob& job, const PodBuildOptions& options) {
  json pod_sets = json::array();
  auto worker = BuildPod(job, PodSetPod(job, false), options);
  if (!worker.ok()) return worker.status();
  pod_sets.push_back(json{{"name", kWorkersPodSet}, {"count", job.spec.machines}, {"template", Template(*worker)}});
  if (const int standbys = StandbyPoolSizeOf(job.spec); standbys > 0) {
    auto standby = BuildPod(job, PodSetPod(job, true), options);
    if (!standby.ok()) return standby.status();
    pod_sets.push_back(json{{"name", kStandbysPodSet}, {"count", standbys}, {"template", Template(*standby)}});
  }
  return pod_sets;
}

absl::StatusOr<json> BuildWorkload(const TrainingJob& job, const PodBuildOptions& options,
                                   std::optional<int32_t> priority) {
  const std::optional<std::string> queue = KueueQueueName(job);
  if (!queue) return absl::InvalidArgumentError("the job has no kueue.x-k8s.io/queue-name label");
  auto pod_sets = BuildPodSets(job, options);
  if (!pod_sets.ok()) return pod_sets.status();
  json spec = {{"queueName", *queue}, {"podSets", *pod_sets}};
  if (const std::string pc = JobPriorityClassName(job); !pc.empty()) {
    if (!priority) return absl::InvalidArgumentError(absl::StrCat("the value of PriorityClass ", pc, " is needed"));
    spec["priorityClassName"] = pc;
    spec["priority"] = *priority;
    spec["priorityClassSource"] = "scheduling.k8s.io/priorityclass";
  }
  return json{{"apiVersion", absl::StrCat(kKueueGroup, "/", kKueueVersion)},
              {"kind", "Workload"},
              {"metadata",
               {{"name", WorkloadName(job)},
                {"namespace", job.metadata.namespace_},
                {"labels", {{kJobLabel, job.metadata.name}, {kKueueJobUidLabel, job.metadata.uid}}},
                {"ownerReferences", json::array({JobOwnerReference(job)})}}},
              {"spec", spec}};
}

bool PodSetsMatch(const json& workload, const json& pod_sets) {
  const json* existing = Path(workload, {"spec", "podSets"});
  return existing != nullptr && Shape(*existing) == Shape(pod_sets);
}

WorkloadView ReadWorkload(const json& workload) {
  WorkloadView v;
  const json* admission = Path(workload, {"status", "admission"});
  v.has_admission = admission != nullptr && admission->is_object();
  auto take = [&](WorkloadState state, const json* c) {
    v.state = state;
    if (c != nullptr) {
      v.reason = Str(*c, "reason");
      v.message = Str(*c, "message");
    }
  };
  if (const json* finished = FindCondition(workload, "Finished"); IsTrue(finished)) {
    take(WorkloadState::kFinished, finished);
  } else if (const json* evicted = FindCondition(workload, "Evicted"); IsTrue(evicted)) {
    take(WorkloadState::kEvicted, evicted);
  } else if (const json* admitted = FindCondition(workload, "Admitted"); IsTrue(admitted) && v.has_admission) {
    take(WorkloadState::kAdmitted, admitted);
  } else {
    // Waiting: the reason Kueue gives in QuotaReserved (no flavor fits, the queue does not
    // exist, ...), or in Admitted while admission checks run.
    const json* reserved = FindCondition(workload, "QuotaReserved");
    take(WorkloadState::kPending, IsTrue(reserved) ? FindCondition(workload, "Admitted") : reserved);
  }
  if (v.state == WorkloadState::kAdmitted) {
    if (const json* psa = Path(*admission, {"podSetAssignments"}); psa != nullptr && psa->is_array()) {
      for (const json& a : *psa) {
        std::set<std::string>& names = v.flavors[Str(a, "name")];
        if (const json* f = Path(a, {"flavors"}); f != nullptr && f->is_object()) {
          for (const auto& [resource, flavor] : f->items()) {
            if (flavor.is_string()) names.insert(flavor.get<std::string>());
          }
        }
      }
    }
  }
  return v;
}

std::optional<JobObservation::Hold> HoldFor(const std::string& workload_name, const WorkloadView& view) {
  const std::string why = view.message.empty() ? "" : absl::StrCat(": ", view.message);
  switch (view.state) {
    case WorkloadState::kAdmitted:
      return std::nullopt;
    case WorkloadState::kEvicted:
      return JobObservation::Hold{"WorkloadEvicted",
                                  absl::StrCat("Kueue evicted Workload ", workload_name, " (", view.reason, why,
                                               "); the job waits to be admitted again")};
    case WorkloadState::kFinished:
      return JobObservation::Hold{"WorkloadFinished",
                                  absl::StrCat("Workload ", workload_name, " is Finished (", view.reason, why,
                                               ") although the job is not")};
    case WorkloadState::kPending:
      break;
  }
  return JobObservation::Hold{"WorkloadNotAdmitted",
                              absl::StrCat("waiting for Kueue to admit Workload ", workload_name,
                                           view.reason.empty() ? "" : absl::StrCat(" (", view.reason, why, ")"))};
}

absl::StatusOr<PodSetScheduling> SchedulingFromFlavors(const std::vector<json>& flavors) {
  PodSetScheduling out;
  for (const json& f : flavors) {
    const std::string name = Str(f.value("metadata", json::object()), "name");
    if (const json* labels = Path(f, {"spec", "nodeLabels"}); labels != nullptr && labels->is_object()) {
      for (const auto& [key, value] : labels->items()) {
        if (!value.is_string()) continue;
        auto [it, added] = out.node_selector.emplace(key, value.get<std::string>());
        if (!added && it->second != value.get<std::string>()) {
          return absl::InvalidArgumentError(absl::StrCat("ResourceFlavor ", name, " asks for node label ", key, "=",
                                                         value.get<std::string>(), ", another assigned flavor for ",
                                                         key, "=", it->second));
        }
      }
    }
    if (const json* tol = Path(f, {"spec", "tolerations"}); tol != nullptr && tol->is_array()) {
      for (const json& t : *tol) {
        if (std::find(out.tolerations.begin(), out.tolerations.end(), t) == out.tolerations.end()) {
          out.tolerations.push_back(t);
        }
      }
    }
  }
  return out;
}

absl::Status ApplyScheduling(const PodSetScheduling& scheduling, json* pod) {
  json& spec = (*pod)["spec"];
  if (!scheduling.node_selector.empty()) {
    json& selector = spec["nodeSelector"];
    if (!selector.is_object()) selector = json::object();
    for (const auto& [key, value] : scheduling.node_selector) {
      if (selector.contains(key) && selector[key] != value) {
        return absl::InvalidArgumentError(absl::StrCat("spec.template.spec.nodeSelector[", key, "] is ",
                                                       selector[key].dump(), " but the admitted ResourceFlavor asks for ",
                                                       value));
      }
      selector[key] = value;
    }
  }
  if (!scheduling.tolerations.empty()) {
    json& tolerations = spec["tolerations"];
    if (!tolerations.is_array()) tolerations = json::array();
    for (const json& t : scheduling.tolerations) {
      if (std::find(tolerations.begin(), tolerations.end(), t) == tolerations.end()) tolerations.push_back(t);
    }
  }
  return absl::OkStatus();
}

bool ReleaseQuota(json* workload, const std::string& now_rfc3339) {
  const WorkloadView v = ReadWorkload(*workload);
  if (v.state != WorkloadState::kEvicted || !v.has_admission) return false;
  const std::string message = v.message.empty() ? "evicted" : v.message;
  (*workload)["status"].erase("admission");
  SetCondition(workload, "QuotaReserved", false, "Pending", message, now_rfc3339);
  SetCondition(workload, "Admitted", false, "NoReservation", "The workload has no reservation", now_rfc3339);
  SetCondition(workload, "Requeued", v.reason == "Preempted", v.reason.empty() ? "Evicted" : v.reason, message,
               now_rfc3339);
  return true;
}

bool MarkFinished(json* workload, bool succeeded, const std::string& message, const std::string& now_rfc3339) {
  if (IsTrue(FindCondition(*workload, "Finished"))) return false;
  return SetCondition(workload, "Finished", true, succeeded ? "Succeeded" : "Failed", message, now_rfc3339);
}

}  // namespace peregrine
