#include "controller/kube/kube_mode.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "controller/code_update.h"
#include "controller/controller_metrics.h"
#include "controller/http_server.h"
#include "controller/job_controller.h"
#include "controller/job_parser.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/rest_client.h"
#include "controller/kube/work_queue.h"
#include "controller/kube/kube_cluster.h"
#include "controller/status_json.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace peregrine {
namespace {

using nlohmann::json;

int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const json* Path(const json& j, std::initializer_list<const char*> keys) {
  const json* cur = &j;
  for (const char* k : keys) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

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

constexpr char kInvalidSpec[] = "InvalidSpec";
constexpr char kPodRejected[] = "PodRejected";

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

// API request metrics and the counts the tests read. Lease requests are counted in the
// metrics but not in the test counts (they are the elector's, not the reconciler's).
class ApiObserver final : public kube::RequestObserver {
 public:
  explicit ApiObserver(prometheus::Registry& registry)
      : duration_(prometheus::BuildHistogram()
                      .Name("peregrine_kube_api_request_duration_seconds")
                      .Help("Latency of Kubernetes API requests, by verb and resource.")
                      .Register(registry)),
        errors_(prometheus::BuildCounter()
                    .Name("peregrine_kube_api_request_errors_total")
                    .Help("Kubernetes API requests that failed, by verb, resource and HTTP code (0: no response).")
                    .Register(registry)) {}

  void OnRequestDone(absl::string_view verb, absl::string_view resource, int http_code,
                     absl::Duration latency) override {
    const std::map<std::string, std::string> labels = {{"verb", std::string(verb)}, {"resource", std::string(resource)}};
    // A WATCH stays open for minutes by design: its duration is not a latency.
    if (verb != "WATCH") duration_.Add(labels, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                                  2.5, 5, 10, 30})
        .Observe(absl::ToDoubleSeconds(latency));
    if (http_code == 0 || http_code >= 400) {
      auto l = labels;
      l["code"] = absl::StrCat(http_code);
      errors_.Add(l).Increment();
    }
    if (resource == "leases") return;
    requests_.fetch_add(1);
    if (verb != "GET" && verb != "LIST" && verb != "WATCH") writes_.fetch_add(1);
  }

  int64_t requests() const { return requests_.load(); }
  int64_t writes() const { return writes_.load(); }

 private:
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Counter>& errors_;
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> writes_{0};
};

// A Cluster that remembers the first error of a round, so the worker knows whether to
// back off. One per job; used by one worker at a time.
class ErrorTrackingCluster final : public Cluster {
 public:
  explicit ErrorTrackingCluster(KubeCluster* inner) : inner_(inner) {}

  absl::Status CreatePod(const TrainingJob& job, const PodToCreate& pod) override {
    absl::Status s = inner_->CreatePod(job, pod);
    // 400/422 (or a pod BuildPod cannot make): retrying the same pod cannot succeed.
    if (absl::IsInvalidArgument(s) && rejected_.ok()) {
      rejected_ = absl::InvalidArgumentError(absl::StrCat("pod ", pod.name, " cannot be created: ", s.message()));
    }
    return Track(s);
  }
  absl::Status DeletePod(const TrainingJob& job, const std::string& name, int grace_ms) override {
    return Track(inner_->DeletePod(job, name, grace_ms));
  }
  absl::StatusOr<std::vector<PodObservation>> ListPods(const TrainingJob& job) override {
    auto pods = inner_->ListPods(job);
    Note(pods.status());
    return pods;
  }
  absl::Status QuarantineMachine(const std::string& machine_id, const std::string& reason) override {
    return Track(inner_->QuarantineMachine(machine_id, reason));
  }
  absl::Status RecordEvent(const TrainingJob& job, const JobEvent& event, int64_t now) override {
    return Track(inner_->RecordEvent(job, event, now));
  }
  absl::Status PersistStatus(const TrainingJob& job, const JobStatus& status) override {
    return Track(inner_->PersistStatus(job, status));
  }
  absl::StatusOr<std::optional<JobStatus>> LoadStatus(const TrainingJob& job) override {
    auto status = inner_->LoadStatus(job);
    Note(status.status());
    return status;
  }
  std::string RendezvousDomain(const TrainingJob& job) override { return inner_->RendezvousDomain(job); }
  absl::StatusOr<uint32_t> RendezvousPort(const TrainingJob& job) override {
    auto port = inner_->RendezvousPort(job);
    Note(port.status());
    return port;
  }

  absl::Status TakeError() {
    absl::Status s = std::move(first_error_);
    first_error_ = absl::OkStatus();
    return s;
  }
  // The first permanent pod-creation failure since the last call (OK when none).
  absl::Status TakeRejection() {
    absl::Status s = std::move(rejected_);
    rejected_ = absl::OkStatus();
    return s;
  }

 private:
  void Note(const absl::Status& s) {
    if (!s.ok() && first_error_.ok()) first_error_ = s;
  }
  absl::Status Track(absl::Status s) {
    Note(s);
    return s;
  }
  KubeCluster* const inner_;
  absl::Status first_error_;
  absl::Status rejected_;
};

// A stream to a follower replica: ends at once with UNAVAILABLE so the agent redials
// (through the Service, which routes to the leader).
class RejectReactor final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage> {
 public:
  RejectReactor() {
    Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "this peregrine-controller replica is not the leader"));
  }
  void OnDone() override { delete this; }
};

class LeaderGatedAgentService final : public v1::AgentService::CallbackService {
 public:
  LeaderGatedAgentService(AgentServiceImpl* inner, std::function<bool()> is_leader)
      : inner_(inner), is_leader_(std::move(is_leader)) {}
  grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>* Connect(
      grpc::CallbackServerContext* context) override {
    if (!is_leader_()) return new RejectReactor();
    return inner_->Connect(context);
  }

 private:
  AgentServiceImpl* const inner_;
  const std::function<bool()> is_leader_;
};

std::string DefaultIdentity() {
  char host[256] = {0};
  std::string base = gethostname(host, sizeof(host) - 1) == 0 && host[0] != '\0' ? host : "peregrine";
  std::random_device rd;
  return absl::StrFormat("%s_%08x", base, rd());
}

}  // namespace

struct KubeMode::Impl final : public JobDirectory {
  struct JobEntry {
    std::string uid;
    int64_t generation = 0;
    std::string hot_update;  // the peregrine.dev/hot-update annotation (no generation bump)
    std::unique_ptr<ErrorTrackingCluster> cluster;
    std::unique_ptr<JobController> controller;
  };

  KubeModeOptions options;
  std::string identity;
  std::unique_ptr<kube::SeededRandom> random;
  std::unique_ptr<ControllerMetrics> metrics;
  std::unique_ptr<ApiObserver> observer;
  std::unique_ptr<kube::RestClient> client;
  std::unique_ptr<kube::Informer> jobs;
  std::unique_ptr<kube::Informer> pods;
  std::unique_ptr<kube::Informer> nodes;
  std::unique_ptr<kube::EventRecorder> events;
  std::unique_ptr<KubeCluster> cluster;
  std::unique_ptr<kube::WorkQueue> queue;
  std::unique_ptr<AgentRegistry> registry;
  std::unique_ptr<AgentServiceImpl> service;
  std::unique_ptr<LeaderGatedAgentService> gated_service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<kube::LeaderElector> elector;
  std::vector<std::thread> workers;
  int grpc_port = 0;
  int http_port = 0;
  std::atomic<bool> lost{false};
  std::atomic<bool> shut_down{false};

  // Pod key -> job key, so a deleted pod (gone from the cache) still wakes its job.
  absl::Mutex pod_jobs_mu;
  std::map<std::string, std::string> pod_jobs ABSL_GUARDED_BY(pod_jobs_mu);

  // Each key is processed by one worker at a time (the queue guarantees it), so an entry
  // is used without the map lock; the lock guards the map's shape.
  absl::Mutex jobs_mu;
  std::map<std::string, std::unique_ptr<JobEntry>> entries ABSL_GUARDED_BY(jobs_mu);
  // Jobs whose pods the API server refused for good: key -> "<uid>/<generation>". The
  // status says so too (PodsRejected), but the cache can lag behind this replica's write.
  std::map<std::string, std::string> rejected ABSL_GUARDED_BY(jobs_mu);
  std::map<std::string, int> connected_agents ABSL_GUARDED_BY(jobs_mu);  // job key -> count

  bool IsLeader() const {
    if (lost.load() || shut_down.load()) return false;
    return elector == nullptr || elector->IsLeader();
  }

  void OnPodChanged(const std::string& pod_key) {
    std::string job_key;
    kube::ObjectPtr pod = pods->Get(pod_key);
    {
      absl::MutexLock lock(&pod_jobs_mu);
      if (pod != nullptr) {
        auto idx = PodJobIndex(*pod);
        if (!idx.empty()) {
          job_key = idx[0];
          pod_jobs[pod_key] = job_key;
        }
      } else if (auto it = pod_jobs.find(pod_key); it != pod_jobs.end()) {
        job_key = it->second;
        pod_jobs.erase(it);
      }
    }
    if (!job_key.empty()) queue->Add(job_key);
  }

  void OnNodeChanged(const std::string& node) {
    std::set<std::string> keys;
    for (const kube::ObjectPtr& pod : pods->ByIndex("node", node)) {
      for (const std::string& k : PodJobIndex(*pod)) keys.insert(k);
    }
    for (const std::string& k : keys) queue->Add(k);
  }

  void SetOwnPodLeaderLabel(bool leader) {
    if (options.own_pod_name.empty()) return;
    json patch = {{"metadata", {{"labels", {{kLeaderLabel, leader ? json("true") : json(nullptr)}}}}}};
    // Best effort: the Service falls back to followers rejecting agents.
    (void)client->MergePatch(PodsPath(options.own_pod_namespace), options.own_pod_name, patch).status();
  }

  void OnStartedLeading() {
    metrics->SetLeader(true);
    SetOwnPodLeaderLabel(true);
    for (const std::string& key : jobs->Keys()) queue->Add(key);
  }

  void OnStoppedLeading() {
    lost.store(true);
    metrics->SetLeader(false);
    SetOwnPodLeaderLabel(false);
  }

  void WorkerLoop() {
    while (std::optional<std::string> key = queue->Get()) {
      Process(*key);
      queue->Done(*key);
    }
  }

  JobEntry* FindEntry(const std::string& key) {
    absl::MutexLock lock(&jobs_mu);
    auto it = entries.find(key);
    return it == entries.end() ? nullptr : it->second.get();
  }

  // JobDirectory for the HTTP API: the jobs this replica reconciles right now (a
  // follower has none). The map lock is held while fn runs, so RemoveEntry waits.
  void ForEachJob(const std::function<void(JobController&)>& fn) override {
    absl::MutexLock lock(&jobs_mu);
    for (auto& [key, entry] : entries) fn(*entry->controller);
  }
  bool WithJob(const std::string& ns, const std::string& name, const std::function<void(JobController&)>& fn) override {
    absl::MutexLock lock(&jobs_mu);
    auto it = entries.find(absl::StrCat(ns, "/", name));
    if (it == entries.end()) return false;
    fn(*it->second->controller);
    return true;
  }
  // A code update is a change of the TrainingJob object (spec.codeVersion and the
  // hot-update annotation), read-modify-written with conflict retries, so the API
  // server stays the source of truth; the leader's informer then brings it to the job's
  // controller like any kubectl edit. Any replica may do it.
  absl::StatusOr<std::string> UpdateCode(const std::string& ns, const std::string& name,
                                         const CodeUpdateRequest& request) override {
    const std::string key = absl::StrCat(ns, "/", name);
    kube::ObjectPtr cached = jobs->Get(key);
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
        *client, TrainingJobsPath(ns), name, /*status_subresource=*/false, [&](json& o) -> absl::Status {
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
  void CountConnectedAgents(const std::string& key) {
    int n = 0;
    for (const AgentObservation& a : registry->Observe(key)) n += a.connected ? 1 : 0;
    absl::MutexLock lock(&jobs_mu);
    if (n == 0) {
      connected_agents.erase(key);
    } else {
      connected_agents[key] = n;
    }
    int total = 0;
    for (const auto& [job, count] : connected_agents) total += count;
    metrics->SetAgentsConnected(total);
  }

  // The job is deleted: its controller stops, its agents are told and disconnected,
  // and its metric series go away.
  void ForgetJob(const std::string& key) {
    RemoveEntry(key);
    {
      absl::MutexLock lock(&jobs_mu);
      rejected.erase(key);
      connected_agents.erase(key);
      int total = 0;
      for (const auto& [job, count] : connected_agents) total += count;
      metrics->SetAgentsConnected(total);
    }
    registry->UnbindJob(key, absl::StrCat("TrainingJob ", key, " was deleted"));
    const size_t slash = key.find('/');
    metrics->ForgetJob(key.substr(0, slash), key.substr(slash + 1));
    TrainingJob gone;
    gone.metadata.namespace_ = key.substr(0, slash);
    gone.metadata.name = key.substr(slash + 1);
    cluster->ForgetJob(gone);
  }

  void RemoveEntry(const std::string& key) {
    std::unique_ptr<JobEntry> gone;
    {
      absl::MutexLock lock(&jobs_mu);
      auto it = entries.find(key);
      if (it == entries.end()) return;
      gone = std::move(it->second);
      entries.erase(it);
    }
    gone->controller->Stop();
    registry->SetDesired(key, {});
  }

  // Writes Valid=False with `reason` (keeping whatever else the status holds) unless it
  // is there already. kInvalidSpec: the spec cannot run; kPodRejected: the API server
  // refused a pod built from it (400/422), so the same round would fail again.
  absl::Status MarkInvalid(const json& object, const absl::Status& why, const char* reason = kInvalidSpec) {
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
      auto loaded = cluster->LoadStatus(MinimalJob(object));
      if (!loaded.ok()) return loaded.status();
      if (loaded->has_value()) status = **std::move(loaded);
    }
    for (const Condition& c : status.conditions) {
      if (c.type == "Valid" && c.status == "False" && c.reason == reason && c.message == message &&
          c.observed_generation == generation) {
        return absl::OkStatus();
      }
    }
    const int64_t now = UnixNanos();
    bool found = false;
    for (Condition& c : status.conditions) {
      if (c.type != "Valid") continue;
      if (c.status != "False") c.last_transition_time = now;
      c.status = "False";
      c.reason = reason;
      c.message = message;
      c.observed_generation = generation;
      found = true;
    }
    if (!found) status.conditions.push_back(Condition{"Valid", "False", reason, message, generation, now});
    status.observed_generation = generation;
    TrainingJob job = MinimalJob(object);
    return cluster->PersistStatus(job, status);
  }

  absl::Status UpdateFinalizers(const json& object, bool add) {
    if (!IsLeader()) return absl::UnavailableError("not the leader");
    const std::string ns = MetaString(object, "namespace");
    const std::string uid = MetaString(object, "uid");
    auto written = kube::UpdateWithRetryOnConflict(
        *client, TrainingJobsPath(ns), MetaString(object, "name"), /*status_subresource=*/false,
        [&](json& o) -> absl::Status {
          if (MetaString(o, "uid") != uid) return absl::FailedPreconditionError("trainingjob was re-created");
          if (!IsLeader()) return absl::UnavailableError("not the leader");
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
  absl::Status TearDown(const std::string& key, const json& object) {
    const TrainingJob job = MinimalJob(object);
    int grace_ms = 10'000;
    if (JobEntry* entry = FindEntry(key); entry != nullptr) {
      grace_ms = entry->controller->job().spec.fault_tolerance.restart_grace_seconds * 1000;
    }
    ForgetJob(key);
    absl::Status first;
    for (const std::string& pod : cluster->CachedPodNames(job)) {
      if (absl::Status s = cluster->DeletePod(job, pod, grace_ms); !s.ok() && first.ok()) first = s;
    }
    if (!first.ok()) return first;
    return UpdateFinalizers(object, /*add=*/false);
  }

  void Process(const std::string& key) {
    if (!IsLeader()) return;  // dropped: gaining the lease enqueues every job again
    kube::ObjectPtr object = jobs->Get(key);
    if (object == nullptr) {  // deleted (and its finalizer gone): forget it
      ForgetJob(key);
      queue->Forget(key);
      return;
    }
    if (Deleting(*object)) {
      if (!HasFinalizer(*object)) return;
      if (absl::Status s = TearDown(key, *object); !s.ok()) {
        queue->AddRateLimited(key);
      } else {
        queue->Forget(key);
      }
      return;
    }
    if (!HasFinalizer(*object)) {
      if (absl::Status s = UpdateFinalizers(*object, /*add=*/true); !s.ok()) {
        queue->AddRateLimited(key);
        return;
      }
    }
    json manifest = *object;
    manifest.erase("status");
    absl::StatusOr<TrainingJob> job = ParseTrainingJob(manifest.dump());
    if (job.ok()) {
      if (absl::Status s = ValidateForKubernetes(*job); !s.ok()) job = s;
    }
    if (!job.ok()) {
      RemoveEntry(key);
      if (absl::Status s = MarkInvalid(*object, job.status()); !s.ok()) {
        queue->AddRateLimited(key);
      } else {
        queue->Forget(key);
      }
      return;
    }
    const std::string rejection_key = absl::StrCat(job->metadata.uid, "/", job->metadata.generation);
    bool rejected_here = false;
    {
      absl::MutexLock lock(&jobs_mu);
      auto it = rejected.find(key);
      rejected_here = it != rejected.end() && it->second == rejection_key;
      if (it != rejected.end() && !rejected_here) rejected.erase(it);
    }
    if (rejected_here || PodsRejected(*object, job->metadata.generation)) {
      // This generation's pods were refused by the API server: wait for a spec change.
      RemoveEntry(key);
      queue->Forget(key);
      return;
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
      absl::StatusOr<std::string> token = cluster->EnsureJobObjects(*job);
      if (!token.ok()) {
        queue->AddRateLimited(key);
        return;
      }
      auto fresh = std::make_unique<JobEntry>();
      fresh->uid = job->metadata.uid;
      fresh->generation = job->metadata.generation;
      fresh->hot_update = hot_update;
      fresh->cluster = std::make_unique<ErrorTrackingCluster>(cluster.get());
      JobController::Options jopts;
      jopts.decision = options.decision;
      jopts.now = UnixNanos;
      jopts.resync_ns = absl::ToInt64Nanoseconds(options.resync);
      jopts.agent_token = *token;
      fresh->controller =
          std::make_unique<JobController>(*job, fresh->cluster.get(), registry.get(), metrics.get(), jopts);
      if (absl::Status s = fresh->controller->Start(/*run_loop=*/false); !s.ok()) {
        queue->AddRateLimited(key);
        return;
      }
      (void)fresh->cluster->TakeError();
      AgentRegistry::JobBinding binding;
      binding.spec = job->spec;
      binding.token = *token;
      registry->BindJob(key, binding);
      absl::MutexLock lock(&jobs_mu);
      entry = fresh.get();
      entries[key] = std::move(fresh);
    }
    if (!IsLeader()) return;
    const auto started = std::chrono::steady_clock::now();
    const int64_t requeue_ns = entry->controller->ReconcileOnce();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const absl::Status error = entry->cluster->TakeError();
    metrics->ObserveReconcile(seconds, !error.ok());
    if (absl::Status refusal = entry->cluster->TakeRejection(); !refusal.ok()) {
      // Not retried: the same pod would be refused again. Pods already running are left
      // alone; fixing the spec (a new generation) starts reconciling again.
      RemoveEntry(key);
      {
        absl::MutexLock lock(&jobs_mu);
        rejected[key] = absl::StrCat(job->metadata.uid, "/", job->metadata.generation);
      }
      if (absl::Status s = MarkInvalid(*object, refusal, kPodRejected); !s.ok()) {
        queue->AddRateLimited(key);
      } else {
        queue->Forget(key);
      }
      return;
    }
    if (!error.ok()) {
      queue->AddRateLimited(key);
      return;
    }
    CountConnectedAgents(key);
    if (cluster->StuckPodsChanged(entry->controller->job())) {
      // A pod got stuck or unstuck without the decision changing: rewrite the status so
      // its PodsStuck condition says so.
      if (absl::Status s = entry->cluster->PersistStatus(entry->controller->job(), entry->controller->Snapshot());
          !s.ok()) {
        queue->AddRateLimited(key);
        return;
      }
    }
    queue->Forget(key);
    absl::Duration after = options.resync;
    if (requeue_ns > 0) after = std::min(after, absl::Nanoseconds(requeue_ns));
    queue->AddAfter(key, after);
  }
};

KubeMode::KubeMode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KubeMode::~KubeMode() { Shutdown(); }

absl::StatusOr<std::unique_ptr<KubeMode>> KubeMode::Start(const kube::Config& config, KubeModeOptions options) {
  if (options.controller_address.empty()) {
    return absl::InvalidArgumentError("kube mode: the agents' controller address is required");
  }
  if (options.agent_image.empty()) return absl::InvalidArgumentError("kube mode: --agent-image is required");
  if (options.workers < 1) return absl::InvalidArgumentError("kube mode: workers must be at least 1");
  auto impl = std::make_unique<Impl>();
  Impl* self = impl.get();
  impl->options = options;
  impl->identity = options.identity.empty() ? DefaultIdentity() : options.identity;
  std::random_device rd;
  impl->random = std::make_unique<kube::SeededRandom>((static_cast<uint64_t>(rd()) << 32) ^ rd());
  impl->metrics = std::make_unique<ControllerMetrics>();
  impl->metrics->SetLeader(false);
  impl->observer = std::make_unique<ApiObserver>(*impl->metrics->registry());

  kube::RestClientOptions copts;
  copts.observer = impl->observer.get();
  copts.user_agent = absl::StrCat("peregrine-controller/", impl->identity);
  auto client = kube::RestClient::Create(config, copts);
  if (!client.ok()) return client.status();
  impl->client = *std::move(client);
  kube::Clock* clock = kube::RealClock();

  impl->queue = std::make_unique<kube::WorkQueue>(clock);
  // Ready keys only (client-go's depth): delayed resyncs are not backlog.
  impl->queue->SetDepthObserver([m = impl->metrics.get()](int depth) { m->SetWorkQueueDepth(depth); });
  kube::InformerOptions jobs_opts;
  jobs_opts.resource = TrainingJobsPath(options.watch_namespace);
  impl->jobs = std::make_unique<kube::Informer>(impl->client.get(), jobs_opts, clock, impl->random.get());
  impl->jobs->AddHandler([self](const std::string& key) { self->queue->Add(key); });
  kube::InformerOptions pods_opts;
  pods_opts.resource = PodsPath(options.watch_namespace);
  pods_opts.label_selector = kJobLabel;
  impl->pods = std::make_unique<kube::Informer>(impl->client.get(), pods_opts, clock, impl->random.get());
  impl->pods->AddIndex(kPodsByJobIndex, PodJobIndex);
  impl->pods->AddIndex("node", [](const json& pod) -> std::vector<std::string> {
    const json* n = Path(pod, {"spec", "nodeName"});
    if (n == nullptr || !n->is_string() || n->get<std::string>().empty()) return {};
    return {n->get<std::string>()};
  });
  impl->pods->AddHandler([self](const std::string& key) { self->OnPodChanged(key); });
  kube::InformerOptions nodes_opts;
  nodes_opts.resource = NodesPath();
  impl->nodes = std::make_unique<kube::Informer>(impl->client.get(), nodes_opts, clock, impl->random.get());
  impl->nodes->AddHandler([self](const std::string& key) { self->OnNodeChanged(key); });

  kube::EventRecorderOptions eopts;
  eopts.instance = impl->identity;
  impl->events = std::make_unique<kube::EventRecorder>(impl->client.get(), eopts, clock);
  KubeClusterOptions kopts;
  kopts.controller_address = options.controller_address;
  kopts.agent_image = options.agent_image;
  kopts.rendezvous_port = options.rendezvous_port;
  kopts.heartbeat_ms = options.agent_heartbeat_flag_ms;
  kopts.standby_pending_timeout = options.standby_pending_timeout;
  impl->cluster = std::make_unique<KubeCluster>(impl->client.get(), impl->pods.get(), impl->nodes.get(),
                                                impl->events.get(), kopts, [self] { return self->IsLeader(); });

  impl->registry = std::make_unique<AgentRegistry>(impl->identity);
  impl->registry->SetHeartbeatIntervalMs(static_cast<uint32_t>(options.heartbeat_ms));
  impl->registry->SetChangeCallback([self](const std::string& key) { self->queue->Add(key); });
  impl->service = std::make_unique<AgentServiceImpl>(impl->registry.get(), UnixNanos);
  impl->gated_service =
      std::make_unique<LeaderGatedAgentService>(impl->service.get(), [self] { return self->IsLeader(); });
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options.host, ":", options.grpc_port), grpc::InsecureServerCredentials(),
                           &impl->grpc_port);
  builder.RegisterService(impl->gated_service.get());
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 16 << 20);
  impl->grpc_server = builder.BuildAndStart();
  if (!impl->grpc_server || impl->grpc_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for agents on ", options.host, ":", options.grpc_port));
  }
  impl->http = std::make_unique<HttpServer>(impl.get(), impl->metrics.get(), nullptr);
  auto http_port = impl->http->Start(options.host, options.http_port);
  if (!http_port.ok()) {
    impl->grpc_server->Shutdown();
    return http_port.status();
  }
  impl->http_port = *http_port;

  impl->nodes->Start();
  impl->pods->Start();
  impl->jobs->Start();

  if (options.leader_elect) {
    kube::LeaderElectionConfig lconf;
    lconf.lease_namespace = options.lease_namespace;
    lconf.lease_name = options.lease_name;
    lconf.identity = impl->identity;
    lconf.lease_duration = options.lease_duration;
    lconf.renew_deadline = options.renew_deadline;
    lconf.retry_period = options.retry_period;
    lconf.reacquire_after_loss = false;  // a replica that lost never acts again (LostLeadership)
    kube::LeaderCallbacks callbacks;
    callbacks.on_started_leading = [self] { self->OnStartedLeading(); };
    callbacks.on_stopped_leading = [self] { self->OnStoppedLeading(); };
    auto elector = kube::LeaderElector::Create(impl->client.get(), lconf, callbacks, clock, impl->random.get());
    if (!elector.ok()) {
      auto mode = std::unique_ptr<KubeMode>(new KubeMode(std::move(impl)));
      mode->Shutdown();
      return elector.status();
    }
    impl->elector = *std::move(elector);
  } else {
    impl->metrics->SetLeader(true);
  }
  for (int i = 0; i < options.workers; ++i) impl->workers.emplace_back([self] { self->WorkerLoop(); });
  if (impl->elector) impl->elector->Start();
  return std::unique_ptr<KubeMode>(new KubeMode(std::move(impl)));
}

int KubeMode::grpc_port() const { return impl_->grpc_port; }
int KubeMode::http_port() const { return impl_->http_port; }
const std::string& KubeMode::identity() const { return impl_->identity; }
bool KubeMode::IsLeader() const { return impl_->IsLeader(); }
bool KubeMode::LostLeadership() const { return impl_->lost.load(); }
int64_t KubeMode::ApiRequestsForTest() const { return impl_->observer->requests(); }
int64_t KubeMode::ApiWritesForTest() const { return impl_->observer->writes(); }

void KubeMode::Shutdown() {
  if (!impl_ || impl_->shut_down.exchange(true)) return;
  Impl& m = *impl_;
  // Stop acting first (workers see shut_down through IsLeader), then release the Lease so
  // a successor need not wait for it to expire, then stop serving.
  if (m.queue) m.queue->ShutDown();
  for (std::thread& t : m.workers) t.join();
  m.workers.clear();
  if (m.elector) m.elector->Stop();
  if (m.jobs) m.jobs->Stop();
  if (m.pods) m.pods->Stop();
  if (m.nodes) m.nodes->Stop();
  if (m.http) m.http->Stop();
  if (m.grpc_server) {
    m.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    m.grpc_server->Wait();
  }
  if (m.registry) m.registry->SetChangeCallback(nullptr);
  absl::MutexLock lock(&m.jobs_mu);
  for (auto& [key, entry] : m.entries) entry->controller->Stop();
}

}  // namespace peregrine
