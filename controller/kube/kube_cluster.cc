#include "controller/kube/kube_cluster.h"

#include <cctype>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/kube/json_fields.h"
#include "controller/kube/node_findings.h"
#include "controller/kube/node_health_controller.h"
#include "controller/status_json.h"

// What each method does against the API server:
//   - Ownership: a pod is the job's only when its metadata.ownerReferences hold the job's
//     uid (OwnedByJob). The peregrine.dev/job label only narrows the pod informer; a pod
//     carrying the label without that ownerReference (made by hand, by another tool, or
//     owned by an older job of the same name) is never listed, adopted or deleted.
//   - CreatePod submits BuildPod's pod, which carries the ownerReference; a cached pod
//     of that name owned by the job is OK, one not owned by it is kFailedPrecondition.
//   - ListPods maps the cached pods labelled peregrine.dev/job=<name> and owned by the
//     job (excluding those being deleted: with a deletionTimestamp, or a uid this process
//     deleted whose deletion the cache has not shown yet) to PodObservation with
//     ObservePodObject (pod_observer.h); what a stuck pod means is the decision core's
//     (controller/core/pod_health.h).
//   - DeletePod deletes only a cached pod the job owns, with gracePeriodSeconds and a uid
//     precondition (the uid cached), so a pod re-created under the same name is never
//     deleted by a stale decision; a uid this process deleted already is not deleted
//     again while the cache lags. A pod not in the cache is left alone (its owner cannot
//     be checked; once cached, the next round's orphan sweep deletes it if it is the
//     job's), one cached but not owned is kFailedPrecondition and left alone.
//   - CachedPodNames (the tear-down's list) names only the pods the job owns.
//   - QuarantineMachine (called by JobController for every machine the decision engine
//     evicts) hands the machine to the node health lifecycle (node_health_controller.h):
//     the Node is cordoned, tainted peregrine.dev/quarantined:NoSchedule, labelled
//     peregrine.dev/quarantined=<short reason> (full reason in an annotation) and carries
//     the peregrine.dev/health record, with an Event per transition; sweeps return it or
//     retire it. A node that is gone is not an error; a machine already out of service
//     (a restart between the cordon and the status write that records it) is left alone.
//   - RecordEvent goes through the EventRecorder; PersistStatus writes the status
//     subresource (409: re-read and retry; a job deleted or re-created under another uid
//     is kNotFound), LoadStatus reads it back from the API server.
//   - EnsureJobObjects creates the job's headless Service (idempotent, owned by the
//     job) and, with agent TLS, the job's CA ConfigMap (AgentCaPublisher). Agents
//     authenticate with per-pod credentials (controller/agent_credentials.h): no Secret.

namespace peregrine {
namespace {

using nlohmann::json;
using kube::Path;
using kube::Str;

std::string PodKey(const TrainingJob& job, const std::string& name) {
  return absl::StrCat(job.metadata.namespace_, "/", name);
}

absl::Status NotOwned(const char* what, const TrainingJob& job, const json& pod) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " ", job.metadata.namespace_, "/", Str(pod["metadata"], "name"),
      ": the pod is not owned by TrainingJob ", job.metadata.namespace_, "/", job.metadata.name,
      " (no ownerReference with uid ", job.metadata.uid.empty() ? "<none>" : job.metadata.uid,
      "); it is left alone"));
}

}  // namespace

bool OwnedByJob(const json& pod, const std::string& job_uid) {
  if (job_uid.empty()) return false;
  const json* refs = Path(pod, {"metadata", "ownerReferences"});
  if (refs == nullptr || !refs->is_array()) return false;
  for (const json& r : *refs) {
    if (r.is_object() && Str(r, "uid") == job_uid) return true;
  }
  return false;
}

std::string ShortLabelValue(const std::string& reason) {
  std::string out;
  for (char c : reason) {
    if (out.size() >= 63) break;
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '.' || c == '_' || c == '-') {
      out.push_back(c);
    } else if (!out.empty() && out.back() != '-') {
      out.push_back('-');
    }
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  size_t first = 0;
  while (first < out.size() && !std::isalnum(static_cast<unsigned char>(out[first]))) ++first;
  out = out.substr(first);
  return out.empty() ? "unknown" : out;
}

absl::StatusOr<std::vector<PodObservation>> KubeCluster::ListPods(const TrainingJob& job) {
  if (!pods_->HasSynced()) return absl::UnavailableError("the pod cache has not synced yet");
  std::vector<PodObservation> out;
  for (const kube::ObjectPtr& pod : pods_->ByIndex(kPodsByJobIndex, absl::StrCat(job.metadata.namespace_, "/",
                                                                                   job.metadata.name))) {
    if (const json* ts = Path(*pod, {"metadata", "deletionTimestamp"}); ts != nullptr && !ts->is_null()) continue;
    // The label is not ownership: an un-owned pod (or an older job's) is not this job's.
    if (!OwnedByJob(*pod, job.metadata.uid)) continue;
    // Deleted already, the cache lagging: a decision must not take it for a live pod (a
    // suspended job resumed at once would count its old pods as its new ones).
    if (const json* uid = Path(*pod, {"metadata", "uid"}); uid != nullptr && uid->is_string()) {
      absl::MutexLock lock(&deleted_mu_);
      if (deleted_uids_.count(uid->get<std::string>()) > 0) continue;
    }
    kube::ObjectPtr node;
    if (const json* n = Path(*pod, {"spec", "nodeName"}); n && n->is_string() && !n->get<std::string>().empty()) {
      node = nodes_->Get(n->get<std::string>());
    }
    out.push_back(ObservePodObject(*pod, node.get()));
    if (node != nullptr) out.back().node_findings = NodeFindings(*node);
  }
  return out;
}

absl::Status KubeCluster::PersistStatus(const TrainingJob& job, const JobStatus& engine_status) {
  const JobStatus& status = engine_status;
  json body = json::parse(JobStatusToJson(status), nullptr, false);
  if (body.is_discarded()) return absl::InternalError("JobStatusToJson produced invalid JSON");
  if (auto s = CheckMayWrite("write status"); !s.ok()) return s;
  auto written = kube::UpdateWithRetryOnConflict(
      *client_, TrainingJobsPath(job.metadata.namespace_), job.metadata.name, /*status_subresource=*/true,
      [&](json& object) -> absl::Status {
        if (!job.metadata.uid.empty() && Str(object["metadata"], "uid") != job.metadata.uid) {
          // Not this job any more: its controller must stop (kNotFound, as for a deleted job).
          return absl::NotFoundError(absl::StrCat("trainingjob ", job.metadata.namespace_, "/", job.metadata.name,
                                                  " was re-created (uid changed)"));
        }
        // Re-checked on every retry: a lost Lease stops the retry loop too.
        if (auto s = CheckMayWrite("write status"); !s.ok()) return s;
        object["status"] = body;
        return absl::OkStatus();
      });
  if (!written.ok()) return written.status();
  return absl::OkStatus();
}

KubeCluster::KubeCluster(kube::RestClient* client, kube::Informer* pods, kube::Informer* nodes,
                         kube::EventRecorder* events, KubeClusterOptions options, std::function<bool()> may_write)
    : client_(client),
      pods_(pods),
      nodes_(nodes),
      events_(events),
      options_(std::move(options)),
      may_write_(std::move(may_write)),
      kueue_(client_, options_, may_write_) {}

namespace {
std::string JobKeyOf(const TrainingJob& job) { return absl::StrCat(job.metadata.namespace_, "/", job.metadata.name); }
}  // namespace

std::optional<JobObservation::Hold> KubeCluster::AdmissionHold(const TrainingJob& job) {
  if (!KueueQueueName(job)) return std::nullopt;
  absl::MutexLock lock(&admission_mu_);
  auto it = admissions_.find(JobKeyOf(job));
  if (it == admissions_.end()) {
    return JobObservation::Hold{"WorkloadNotAdmitted", "the job's Kueue Workload has not been read yet"};
  }
  return it->second.hold;
}

absl::Status KubeCluster::SyncAdmission(const TrainingJob& job, int64_t now) {
  if (!KueueQueueName(job)) {
    ForgetAdmission(JobKeyOf(job));
    return absl::OkStatus();
  }
  auto admission = kueue_.Sync(job, CachedPodNames(job).empty(), now);
  if (!admission.ok()) return admission.status();
  absl::MutexLock lock(&admission_mu_);
  admissions_[JobKeyOf(job)] = *std::move(admission);
  return absl::OkStatus();
}

absl::Status KubeCluster::FinishAdmission(const TrainingJob& job, bool succeeded, const std::string& message,
                                          int64_t now) {
  if (!KueueQueueName(job)) return absl::OkStatus();
  return kueue_.Finish(job, succeeded, message, now);
}

void KubeCluster::ForgetAdmission(const std::string& job_key) {
  absl::MutexLock lock(&admission_mu_);
  admissions_.erase(job_key);
}

absl::Status KubeCluster::CheckMayWrite(const char* what) const {
  if (may_write_ && !may_write_()) {
    return absl::UnavailableError(absl::StrCat(what, ": this replica does not hold the leader lease"));
  }
  return absl::OkStatus();
}

absl::Status KubeCluster::CreatePod(const TrainingJob& job, const PodToCreate& request) {
  if (kube::ObjectPtr cached = pods_->Get(PodKey(job, request.name)); cached != nullptr) {
    return OwnedByJob(*cached, job.metadata.uid) ? absl::OkStatus() : NotOwned("create pod", job, *cached);
  }
  auto pod = BuildPod(job, request, options_);
  if (!pod.ok()) return pod.status();
  if (KueueQueueName(job)) {
    // Only an admitted job gets here (AdmissionHold); its pods take the admission's
    // node selector and tolerations (kueue_workload.h ApplyScheduling).
    absl::MutexLock lock(&admission_mu_);
    auto it = admissions_.find(JobKeyOf(job));
    if (it == admissions_.end() || it->second.hold) {
      return absl::FailedPreconditionError(absl::StrCat("pod ", request.name, ": the job's Workload is not admitted"));
    }
    auto set = it->second.pod_sets.find(request.role == PodRole::kStandby ? kStandbysPodSet : kWorkersPodSet);
    if (set != it->second.pod_sets.end()) {
      if (absl::Status s = ApplyScheduling(set->second, &*pod); !s.ok()) return absl::FailedPreconditionError(s.message());
    }
  }
  if (auto s = CheckMayWrite("create pod"); !s.ok()) return s;
  auto created = client_->Create(PodsPath(job.metadata.namespace_), *pod);
  if (!created.ok() && !absl::IsAlreadyExists(created.status())) return created.status();
  return absl::OkStatus();
}

absl::Status KubeCluster::DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) {
  kube::DeleteOptions options;
  options.grace_period_seconds = (grace_ms + 999) / 1000;
  kube::ObjectPtr cached = pods_->Get(PodKey(job, name));
  // Only a pod the cache shows owned by the job is deleted: one not cached cannot be
  // checked (the next round's orphan sweep deletes it once cached, if it is the job's).
  if (cached == nullptr) return absl::OkStatus();
  if (!OwnedByJob(*cached, job.metadata.uid)) return NotOwned("delete pod", job, *cached);
  if (const json* ts = Path(*cached, {"metadata", "deletionTimestamp"}); ts != nullptr && !ts->is_null()) {
    return absl::OkStatus();  // already being deleted
  }
  if (const json* uid = Path(*cached, {"metadata", "uid"}); uid && uid->is_string()) {
    options.precondition_uid = uid->get<std::string>();
  }
  // The cache lags behind our own delete: a pod (this uid) deleted already is not
  // deleted again by the next round's orphan sweep.
  if (!options.precondition_uid.empty()) {
    absl::MutexLock lock(&deleted_mu_);
    if (deleted_uids_.count(options.precondition_uid) > 0) return absl::OkStatus();
  }
  if (auto s = CheckMayWrite("delete pod"); !s.ok()) return s;
  absl::Status s = client_->Delete(PodsPath(job.metadata.namespace_), name, options);
  if ((s.ok() || absl::IsNotFound(s)) && !options.precondition_uid.empty()) {
    absl::MutexLock lock(&deleted_mu_);
    if (deleted_uids_.size() >= 4096) deleted_uids_.clear();  // bounded; a repeat costs one 404
    deleted_uids_.insert(options.precondition_uid);
  }
  if (absl::IsNotFound(s)) return absl::OkStatus();
  return s;
}

std::vector<std::string> KubeCluster::CachedPodNames(const TrainingJob& job) {
  std::vector<std::string> out;
  for (const kube::ObjectPtr& pod :
       pods_->ByIndex(kPodsByJobIndex, absl::StrCat(job.metadata.namespace_, "/", job.metadata.name))) {
    if (OwnedByJob(*pod, job.metadata.uid)) out.push_back(Str((*pod)["metadata"], "name"));
  }
  return out;
}

namespace {
bool Unschedulable(const json& node) {
  const json* u = Path(node, {"spec", "unschedulable"});
  return u != nullptr && u->is_boolean() && u->get<bool>();
}
}  // namespace

bool KubeCluster::CordonedByOthers(const std::string& machine_id) {
  kube::ObjectPtr node = nodes_->Get(machine_id);
  if (node == nullptr || !Unschedulable(*node)) return false;
  const json* label = Path(*node, {"metadata", "labels", kQuarantineLabel});
  const json* before = Path(*node, {"metadata", "annotations", kCordonedBeforeAnnotation});
  return label == nullptr || (before != nullptr && before->is_string() && before->get<std::string>() == "true");
}

absl::Status KubeCluster::QuarantineMachine(const std::string& machine_id, const std::string& reason) {
  if (machine_id.empty()) return absl::InvalidArgumentError("quarantine: empty machine id");
  if (options_.node_health == nullptr) {
    return absl::FailedPreconditionError("quarantine: no node health controller configured");
  }
  if (auto s = CheckMayWrite("quarantine node"); !s.ok()) return s;
  return options_.node_health->Quarantine(machine_id, reason);
}

absl::Status KubeCluster::RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t) {
  if (auto s = CheckMayWrite("record event"); !s.ok()) return s;
  kube::ObjectReference ref{"peregrine.dev/v1alpha1", "TrainingJob", job.metadata.namespace_, job.metadata.name,
                            job.metadata.uid};
  return events_->Record(ref, event.type == JobEventType::kWarning ? kube::EventType::kWarning : kube::EventType::kNormal,
                         event.reason, event.message);
}

absl::StatusOr<std::optional<JobStatus>> KubeCluster::LoadStatus(const TrainingJob& job) {
  auto object = client_->Get(TrainingJobsPath(job.metadata.namespace_), job.metadata.name);
  if (absl::IsNotFound(object.status())) return std::optional<JobStatus>();
  if (!object.ok()) return object.status();
  if (!job.metadata.uid.empty() && Str((*object)["metadata"], "uid") != job.metadata.uid) {
    return std::optional<JobStatus>();
  }
  auto it = object->find("status");
  if (it == object->end() || !it->is_object() || !it->contains("phase")) return std::optional<JobStatus>();
  auto status = JobStatusFromJson(it->dump());
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat("trainingjob ", job.metadata.namespace_, "/", job.metadata.name,
                                            ": unreadable status: ", status.status().message()));
  }
  return std::optional<JobStatus>(*std::move(status));
}

std::string KubeCluster::RendezvousDomain(const TrainingJob& job) {
  return absl::StrCat(JobServiceName(job), ".", job.metadata.namespace_, ".svc");
}

absl::StatusOr<uint32_t> KubeCluster::RendezvousPort(const TrainingJob&) { return options_.rendezvous_port; }

absl::Status KubeCluster::EnsureJobObjects(const TrainingJob& job) {
  const std::string& ns = job.metadata.namespace_;
  json labels = {{kJobLabel, job.metadata.name}};
  json owners = json::array({JobOwnerReference(job)});
  auto service = client_->Get(ServicesPath(ns), JobServiceName(job));
  if (absl::IsNotFound(service.status())) {
    if (auto s = CheckMayWrite("create service"); !s.ok()) return s;
    json body = {{"apiVersion", "v1"},
                 {"kind", "Service"},
                 {"metadata", {{"name", JobServiceName(job)}, {"namespace", ns}, {"labels", labels},
                               {"ownerReferences", owners}}},
                 {"spec",
                  {{"clusterIP", "None"},
                   {"selector", labels},
                   {"publishNotReadyAddresses", true},
                   {"ports", json::array({json{{"name", "rendezvous"},
                                               {"port", options_.rendezvous_port},
                                               {"targetPort", options_.rendezvous_port}}})}}}};
    service = client_->Create(ServicesPath(ns), body);
    if (absl::IsAlreadyExists(service.status())) service = json::object();
  }
  if (!service.ok()) return service.status();
  if (options_.ca_publisher != nullptr) {
    if (absl::Status s = options_.ca_publisher->Publish(job); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace peregrine
