#include "controller/kube/trainingjob_reconciler.h"

#include "controller/core/conditions.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/code_update.h"
#include "controller/core/conditions.h"
#include "controller/job_controller.h"
#include "controller/job_parser.h"
#include "controller/kube/kueue_workload.h"
#include "controller/kube/resources.h"
#include "controller/status_json.h"
#include "controller/kube/json_fields.h"

// One Reconcile(key), in order:
//   - not the leader: nothing (gaining the Lease enqueues every job again);
//   - the object is gone from the cache (deleted, finalizer removed): forget the job
//     (its controller stops, its agents are unbound and told, its metric series go);
//   - the object has a deletionTimestamp: delete its pods (actives and standbys) with
//     their grace period, then remove the finalizer peregrine.dev/teardown; the API
//     server's garbage collector then removes what the job owns (pods, headless Service,
//     CA ConfigMap);
//   - otherwise add the finalizer on first sight; parse and validate the spec
//     (ParseTrainingJob, ValidateForKubernetes): an invalid one is a terminal error,
//     Valid=False reason InvalidSpec with the message and observedGeneration, no pods;
//   - a generation whose pods the API server refused for good is left alone until the
//     spec changes;
//   - a new job, or a changed spec (generation) or peregrine.dev/hot-update annotation:
//     the job's objects are ensured (EnsureJobObjects) and its JobController is (re)built
//     from the object, resuming from the persisted status;
//   - a job labelled kueue.x-k8s.io/queue-name: its Kueue Workload is ensured and its
//     admission read (KubeCluster::SyncAdmission, kueue_gate.h) before the round, which
//     keeps the job suspended while it is not admitted; a finished job marks its
//     Workload Finished after the round;
//   - one round of the JobController (ReconcileOnce). A pod the API server refuses
//     (400/422 on create) is a terminal error: Valid=False reason PodRejected naming the
//     pod and the server's message, not retried (pods already running are left alone)
//     until the spec changes. The round writes its decided status before it acts
//     (docs/kubernetes.md, "Crash consistency"); when that write fails the round did
//     nothing and is retried after the job controller's write backoff (100 ms doubling,
//     at most 10 s) until it succeeds, and when it finds the job deleted
//     or re-created (another uid) the job's controller is dropped. Any other error of
//     the round is retried with backoff. A clean round asks to look again after the
//     plan's requeue delay, at most the resync period. (Stuck pods are the decision core's: condition PodsStuck and the standby
//     pending timeout, controller/core/pod_health.h.)
//
// The errors of a round come back from JobController::ReconcileOnce as values (its first
// error and its first pod refusal); nothing reads them through a side channel.

namespace peregrine {
namespace {

using nlohmann::json;
using kube::Path;
using kube::Str;

constexpr char kInvalidSpec[] = "InvalidSpec";
constexpr char kPodRejected[] = "PodRejected";

bool Deleting(const json& object) {
  const json* ts = Path(object, {"metadata", "deletionTimestamp"});
  return ts != nullptr && !ts->is_null();
}

bool HasFinalizer(const json& object) {
  const json* f = Path(object, {"metadata", "finalizers"});
  if (f == nullptr || !f->is_array()) return false;
  return std::any_of(f->begin(), f->end(), [](const json& v) { return v == kTeardownFinalizer; });
}

std::string MetaString(const json& object, const char* key) {
  const json* v = Path(object, {"metadata", key});
  return v && v->is_string() ? v->get<std::string>() : "";
}

// True when the object's status says the API server refused this generation's pods.
bool PodsRejected(const json& object, int64_t generation) {
  const json* conds = Path(object, {"status", "conditions"});
  if (conds == nullptr || !conds->is_array()) return false;
  for (const json& c : *conds) {
    if (c.value("type", "") == "Valid" && c.value("status", "") == "False" && c.value("reason", "") == kPodRejected &&
        c.value("observedGeneration", int64_t{-1}) == generation) {
      return true;
    }
  }
  return false;
}

// The identity of the TrainingJob object, enough for the cluster's per-job calls when the
// spec cannot be parsed (deletion of an invalid job).
TrainingJob MinimalJob(const json& object) {
  TrainingJob job;
  job.metadata.name = MetaString(object, "name");
  job.metadata.namespace_ = MetaString(object, "namespace");
  job.metadata.uid = MetaString(object, "uid");
  return job;
}

// Retried with backoff: on these paths a kInvalidArgument is one request refused (the
// finalizer, the job's Service or CA ConfigMap, a status write), not a verdict on the spec,
// so it is passed on as kFailedPrecondition. Only Terminal returns kInvalidArgument.
absl::Status Retryable(const absl::Status& s) {
  if (!absl::IsInvalidArgument(s)) return s;
  return absl::FailedPreconditionError(s.message());
}

}  // namespace

struct TrainingJobReconciler::JobEntry {
  std::string uid;
  int64_t generation = 0;
  std::string hot_update;  // the peregrine.dev/hot-update annotation (no generation bump)
  std::unique_ptr<JobController> controller;
};

// What one JobController round returned: when to look again, its first error and its
// first pod refusal (kInvalidArgument; OK when none).
struct TrainingJobReconciler::Round {
  int64_t requeue_ns = 0;
  absl::Status error;
  absl::Status rejection;
  absl::Status status_write;  // the round's intent write failed (it acted on nothing)
};

TrainingJobReconciler::TrainingJobReconciler(Deps deps, Options options)
    : deps_(std::move(deps)), options_(std::move(options)) {}

TrainingJobReconciler::~TrainingJobReconciler() { StopAll(); }

void TrainingJobReconciler::StopAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [key, entry] : entries_) entry->controller->Stop();
}

absl::StatusOr<kube::ReconcileResult> TrainingJobReconciler::Reconcile(const std::string& key) {
  if (!deps_.is_leader()) return kube::ReconcileResult{};  // gaining the lease enqueues every job again
  kube::ObjectPtr object = deps_.jobs->Get(key);
  if (object == nullptr) {  // deleted (and its finalizer gone): forget it
    ForgetJob(key);
    return kube::ReconcileResult{};
  }
  if (Deleting(*object)) {
    if (!HasFinalizer(*object)) return kube::ReconcileResult{};
    if (absl::Status s = TearDown(key, *object); !s.ok()) return Retryable(s);
    return kube::ReconcileResult{};
  }
  if (!HasFinalizer(*object)) {
    if (absl::Status s = UpdateFinalizers(*object, /*add=*/true); !s.ok()) return Retryable(s);
  }
  return ReconcileJob(key, *object);
}

absl::StatusOr<kube::ReconcileResult> TrainingJobReconciler::ReconcileJob(const std::string& key, const json& object) {
  json manifest = object;
  manifest.erase("status");
  absl::StatusOr<TrainingJob> job = ParseTrainingJob(manifest.dump());
  if (job.ok()) {
    if (absl::Status s = ValidateForKubernetes(*job); !s.ok()) job = s;
  }
  if (!job.ok()) return Terminal(key, object, job.status(), kInvalidSpec);
  const std::string rejection_key = absl::StrCat(job->metadata.uid, "/", job->metadata.generation);
  bool rejected_here = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = rejected_.find(key);
    rejected_here = it != rejected_.end() && it->second == rejection_key;
    if (it != rejected_.end() && !rejected_here) rejected_.erase(it);
  }
  if (rejected_here || PodsRejected(object, job->metadata.generation)) {
    // This generation's pods were refused by the API server: wait for a spec change.
    RemoveEntry(key);
    return kube::ReconcileResult{};
  }
  JobEntry* entry = FindEntry(key);
  const auto hot = job->metadata.annotations.find(kHotUpdateAnnotation);
  const std::string hot_update = hot == job->metadata.annotations.end() ? "" : hot->second;
  if (entry != nullptr && (entry->uid != job->metadata.uid || entry->generation != job->metadata.generation ||
                           entry->hot_update != hot_update)) {
    RemoveEntry(key);  // the spec changed: decide from the new one, resuming the status
    entry = nullptr;
  }
  if (entry == nullptr) {
    if (absl::Status s = deps_.cluster->EnsureJobObjects(*job); !s.ok()) return Retryable(s);
    auto fresh = std::make_unique<JobEntry>();
    fresh->uid = job->metadata.uid;
    fresh->generation = job->metadata.generation;
    fresh->hot_update = hot_update;
    JobController::Options jopts;
    jopts.decision = options_.decision;
    jopts.clock = deps_.clock;
    jopts.resync_ns = absl::ToInt64Nanoseconds(options_.resync);
    fresh->controller =
        std::make_unique<JobController>(*job, deps_.cluster, deps_.registry, deps_.metrics, jopts);
    if (absl::Status s = fresh->controller->Start(/*run_loop=*/false); !s.ok()) return Retryable(s);
    AgentRegistry::JobBinding binding;
    binding.spec = job->spec;
    binding.job_uid = job->metadata.uid;
    deps_.registry->BindJob(key, binding);
    absl::MutexLock lock(&mu_);
    entry = fresh.get();
    entries_[key] = std::move(fresh);
  }
  if (!deps_.is_leader()) return kube::ReconcileResult{};
  // Kueue: the Workload is ensured and its admission read before the round decides (a
  // failed read retries the key; the round never runs on a stale admission).
  if (absl::Status s = deps_.cluster->SyncAdmission(*job, deps_.clock->UnixNanos()); !s.ok()) return Retryable(s);
  const Round round = RunRound(*entry);
  if (!round.rejection.ok()) {
    // Not retried: the same pod would be refused again. Pods already running are left
    // alone; fixing the spec (a new generation) starts reconciling again.
    {
      absl::MutexLock lock(&mu_);
      rejected_[key] = rejection_key;
    }
    return Terminal(key, object, round.rejection, kPodRejected);
  }
  if (absl::IsNotFound(round.status_write)) {
    // The job was deleted or re-created (another uid) since the cache showed it: this
    // controller stops; the next reconcile starts from what the cache shows then.
    RemoveEntry(key);
    return kube::ReconcileResult{.requeue = true};
  }
  // Any other failed status write: the round acted on nothing; it is retried after the
  // job controller's write backoff (100 ms doubling, at most 10 s), not the queue's
  // (which grows to 1000 s), until the write succeeds.
  if (!round.status_write.ok()) return kube::ReconcileResult{.requeue_after = absl::Nanoseconds(round.requeue_ns)};
  if (!round.error.ok()) return Retryable(round.error);
  if (KueueQueueName(*job)) {
    // A finished job finishes its Workload (Kueue then releases the quota).
    const JobStatus st = entry->controller->Snapshot();
    if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) {
      const Condition* ready = FindCondition(st, "Ready");
      const std::string message = ready != nullptr ? ready->message : JobPhaseName(st.phase);
      if (absl::Status s = deps_.cluster->FinishAdmission(*job, st.phase == JobPhase::kSucceeded, message,
                                                          deps_.clock->UnixNanos());
          !s.ok()) {
        return Retryable(s);
      }
    }
  }
  CountConnectedAgents(key);
  kube::ReconcileResult result;
  result.requeue_after = options_.resync;
  if (round.requeue_ns > 0) result.requeue_after = std::min(result.requeue_after, absl::Nanoseconds(round.requeue_ns));
  return result;
}

TrainingJobReconciler::Round TrainingJobReconciler::RunRound(JobEntry& entry) {
  const auto started = std::chrono::steady_clock::now();
  const JobController::RoundResult result = entry.controller->ReconcileOnce();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  Round round;
  round.requeue_ns = result.requeue_after_ns;
  round.error = result.error;
  round.status_write = result.status_write;
  round.rejection = result.pod_rejected;
  deps_.metrics->ObserveReconcile(seconds, !round.error.ok());
  return round;
}

// The one place a terminal error is reported: the job's controller goes, Valid=False
// with `reason` is written, and the caller forgets the key (kInvalidArgument). When the
// write fails, its error is returned instead and the key is retried.
absl::StatusOr<kube::ReconcileResult> TrainingJobReconciler::Terminal(const std::string& key, const json& object,
                                                                      const absl::Status& why, const char* reason) {
  RemoveEntry(key);
  if (absl::Status s = MarkInvalid(object, why, reason); !s.ok()) return Retryable(s);
  return absl::InvalidArgumentError(why.message());
}

TrainingJobReconciler::JobEntry* TrainingJobReconciler::FindEntry(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second.get();
}

// JobDirectory for the HTTP API: the jobs this replica reconciles right now (a
// follower has none). The map lock is held while fn runs, so RemoveEntry waits.
void TrainingJobReconciler::ForEachJob(const std::function<void(JobController&)>& fn) {
  absl::MutexLock lock(&mu_);
  for (auto& [key, entry] : entries_) fn(*entry->controller);
}
bool TrainingJobReconciler::WithJob(const std::string& ns, const std::string& name, const std::function<void(JobController&)>& fn) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(absl::StrCat(ns, "/", name));
  if (it == entries_.end()) return false;
  fn(*it->second->controller);
  return true;
}
// A code update is a change of the TrainingJob object (spec.codeVersion and the
// hot-update annotation), read-modify-written with conflict retries, so the API
// server stays the source of truth; the leader's informer then brings it to the job's
// controller like any kubectl edit. Any replica may do it.
absl::StatusOr<std::string> TrainingJobReconciler::UpdateCode(const std::string& ns, const std::string& name,
                                       const CodeUpdateRequest& request) {
  const std::string key = absl::StrCat(ns, "/", name);
  kube::ObjectPtr cached = deps_.jobs->Get(key);
  if (cached == nullptr) return absl::NotFoundError(absl::StrCat("no TrainingJob ", key));
  const std::string uid = MetaString(*cached, "uid");
  json manifest = *cached;
  manifest.erase("status");
  absl::StatusOr<TrainingJob> job = ParseTrainingJob(manifest.dump());
  if (job.ok()) {
    if (absl::Status s = ValidateForKubernetes(*job); !s.ok()) job = s;
  }
  if (!job.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainingJob ", key, " is invalid already (fix it with kubectl): ", job.status().message()));
  }
  if (absl::Status s = ValidateTrainingJob(ApplyCodeUpdate(*job, request)); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("update of TrainingJob ", key, " rejected: ", s.message()));
  }
  auto written = kube::UpdateWithRetryOnConflict(
      *deps_.client, TrainingJobsPath(ns), name, /*status_subresource=*/false, [&](json& o) -> absl::Status {
        if (MetaString(o, "uid") != uid) return absl::FailedPreconditionError("trainingjob was re-created");
        if (Deleting(o)) return absl::FailedPreconditionError("trainingjob is being deleted");
        json& code = o["spec"]["codeVersion"];
        code["revision"] = request.revision;
        if (request.image) code["image"] = *request.image;
        if (request.command) code["command"] = *request.command;
        json& annotations = o["metadata"]["annotations"];
        if (request.urgent) {
          annotations[kHotUpdateAnnotation] = "urgent";
        } else if (annotations.is_object()) {
          annotations.erase(kHotUpdateAnnotation);
        }
        if (annotations.is_null()) o["metadata"].erase("annotations");
        return absl::OkStatus();
      });
  if (!written.ok()) return written.status();
  const json* generation = Path(*written, {"metadata", "generation"});
  return absl::StrCat("TrainingJob ", key, " now asks for code revision ", request.revision, " (generation ",
                      generation != nullptr && generation->is_number() ? generation->get<int64_t>() : 0, "); ",
                      request.urgent ? "urgent: training restarts in place with it now"
                                     : "lazy: applied at the next failure-triggered restart or when the "
                                       "hot-update window expires");
}

// peregrine_agents_connected: the sum over jobs of their connected agents, recounted
// for a job each time it is reconciled (an agent connecting or leaving wakes its job).
void TrainingJobReconciler::CountConnectedAgents(const std::string& key) {
  const int n = deps_.registry->ConnectedCount(key);
  absl::MutexLock lock(&mu_);
  if (n == 0) {
    connected_agents_.erase(key);
  } else {
    connected_agents_[key] = n;
  }
  int total = 0;
  for (const auto& [job, count] : connected_agents_) total += count;
  deps_.metrics->SetAgentsConnected(total);
}

// The job is deleted: its controller stops, its agents are told and disconnected,
// and its metric series go away.
void TrainingJobReconciler::ForgetJob(const std::string& key) {
  RemoveEntry(key);
  deps_.cluster->ForgetAdmission(key);
  {
    absl::MutexLock lock(&mu_);
    rejected_.erase(key);
    connected_agents_.erase(key);
    int total = 0;
    for (const auto& [job, count] : connected_agents_) total += count;
    deps_.metrics->SetAgentsConnected(total);
  }
  deps_.registry->UnbindJob(key, absl::StrCat("TrainingJob ", key, " was deleted"));
  const size_t slash = key.find('/');
  deps_.metrics->ForgetJob(key.substr(0, slash), key.substr(slash + 1));
}

void TrainingJobReconciler::RemoveEntry(const std::string& key) {
  std::unique_ptr<JobEntry> gone;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    gone = std::move(it->second);
    entries_.erase(it);
  }
  gone->controller->Stop();
  deps_.registry->SetDesired(key, {});
}

// Writes Valid=False with `reason` (keeping whatever else the status holds) unless it
// is there already. kInvalidSpec: the spec cannot run; kPodRejected: the API server
// refused a pod built from it (400/422), so the same round would fail again.
absl::Status TrainingJobReconciler::MarkInvalid(const json& object, const absl::Status& why, const char* reason) {
  const int64_t generation = Path(object, {"metadata", "generation"}) && (*Path(object, {"metadata", "generation"})).is_number()
                                 ? (*Path(object, {"metadata", "generation"})).get<int64_t>()
                                 : 0;
  const std::string message(why.message());
  JobStatus status;
  if (const json* st = Path(object, {"status"}); st != nullptr && st->is_object() && st->contains("phase")) {
    if (auto parsed = JobStatusFromJson(st->dump()); parsed.ok()) status = *std::move(parsed);
  }
  if (std::string(reason) == kPodRejected) {
    // The job's controller may have written a newer status this round than the cache.
    auto loaded = deps_.cluster->LoadStatus(MinimalJob(object));
    if (!loaded.ok()) return loaded.status();
    if (loaded->has_value()) status = **std::move(loaded);
  }
  // The same condition (one owner: controller/core/conditions.h); nothing to write when
  // it is there already.
  if (!SetCondition(status, "Valid", false, reason, message, generation, deps_.clock->UnixNanos())) return absl::OkStatus();
  status.observed_generation = generation;
  TrainingJob job = MinimalJob(object);
  return deps_.cluster->PersistStatus(job, status);
}

absl::Status TrainingJobReconciler::UpdateFinalizers(const json& object, bool add) {
  if (!deps_.is_leader()) return absl::UnavailableError("not the leader");
  const std::string ns = MetaString(object, "namespace");
  const std::string uid = MetaString(object, "uid");
  auto written = kube::UpdateWithRetryOnConflict(
      *deps_.client, TrainingJobsPath(ns), MetaString(object, "name"), /*status_subresource=*/false,
      [&](json& o) -> absl::Status {
        if (MetaString(o, "uid") != uid) return absl::FailedPreconditionError("trainingjob was re-created");
        if (!deps_.is_leader()) return absl::UnavailableError("not the leader");
        json finalizers = json::array();
        if (const json* f = Path(o, {"metadata", "finalizers"}); f && f->is_array()) {
          for (const json& v : *f) {
            if (v != kTeardownFinalizer) finalizers.push_back(v);
          }
        }
        if (add) {
          if (Deleting(o)) return absl::FailedPreconditionError("trainingjob is being deleted");
          finalizers.push_back(kTeardownFinalizer);
        }
        o["metadata"]["finalizers"] = finalizers;
        return absl::OkStatus();
      });
  if (absl::IsNotFound(written.status())) return absl::OkStatus();
  return written.status();
}

// Deletion: stop the pods (graceful), then let the garbage collector take the rest.
absl::Status TrainingJobReconciler::TearDown(const std::string& key, const json& object) {
  const TrainingJob job = MinimalJob(object);
  int grace_ms = 10'000;
  if (JobEntry* entry = FindEntry(key); entry != nullptr) {
    grace_ms = entry->controller->job().spec.fault_tolerance.restart_grace_seconds * 1000;
  }
  ForgetJob(key);
  absl::Status first;
  for (const std::string& pod : deps_.cluster->CachedPodNames(job)) {
    if (absl::Status s = deps_.cluster->DeletePod(job, pod, grace_ms); !s.ok() && first.ok()) first = s;
  }
  if (!first.ok()) return first;
  return UpdateFinalizers(object, /*add=*/false);
}
}  // namespace peregrine
