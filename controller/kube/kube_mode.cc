#include "controller/kube/kube_mode.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "controller/controller_metrics.h"
#include "controller/http_server.h"
#include "controller/kube/agent_bootstrap.h"
#include "controller/kube/agent_ca_configmap.h"
#include "controller/kube/api_reviews.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/node_health_controller.h"
#include "controller/kube/rest_client.h"
#include "controller/kube/work_queue.h"
#include "controller/kube/kube_cluster.h"
#include "controller/kube/reconcile_result.h"
#include "controller/kube/trainingjob_reconciler.h"
#include "controller/kube/json_fields.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

// How KubeMode is wired:
//   - informers on trainingjobs, pods (label selector peregrine.dev/job) and nodes; the
//     first two list and watch every namespace, or each watched namespace on its own
//     (--namespace), so a namespaced install needs no cluster-wide read of either;
//   - a WorkQueue of "namespace/name" job keys fed level-based by the informers (a pod
//     maps to its job through the peregrine.dev/job label, a node to the jobs with pods
//     on it, so a Node going NotReady wakes the jobs with pods on it) and by the agent
//     registry (an agent message wakes its job);
//   - N workers (default 1); each takes a key, calls TrainingJobReconciler::Reconcile
//     and hands the result to kube::ApplyReconcileResult, the only code that re-queues,
//     delays or forgets a key (reconcile_result.h);
//   - Lease leader election (optional): only the leader's workers act. The reconciler
//     checks IsLeader() before a round and the cluster checks it before every write, so a
//     replica whose renewals stop stops writing at once. A replica that loses the Lease
//     never acts again (LostLeadership() turns true): the process is expected to exit and
//     restart as a fresh candidate, as client-go controllers do, which also closes every
//     agent stream it held so the agents reconnect to the new leader;
//   - agent TLS (optional, --agent-tls-*): the gRPC port serves TLS only, from files
//     gRPC re-reads every agent_tls_refresh (controller/agent_tls.h); a CA watcher thread
//     re-reads the CA bundle as often and, on the leader, keeps every job's CA ConfigMap
//     equal to it (agent_ca_configmap.h);
//   - the gRPC AgentService and two HTTP servers run on every replica: /metrics (and
//     /healthz) on the metrics port, the JSON API of http_server.h (and /healthz) on the
//     API port. Every API request carries a bearer token, which a TokenReview turns into
//     a user, and is allowed by a SubjectAccessReview on the TrainingJob
//     (controller/api_auth.h, kube/api_reviews.h); the API lists the jobs this replica
//     reconciles (none on a follower) and applies a code update (POST .../code) as a
//     read-modify-write of the TrainingJob (spec.codeVersion + hot-update annotation),
//     which works on any replica. Agents must talk to the leader: the leader labels its
//     own pod peregrine.dev/leader=true (removed when it steps down) so the chart's gRPC
//     Service (grpcService.leaderOnly) routes only to it, and a follower answers every
//     agent stream with UNAVAILABLE, so an agent that reaches one backs off and redials.
// Metrics (on the same registry as ControllerMetrics):
//   peregrine_kube_api_request_duration_seconds{verb,resource} (histogram; WATCH
//   requests are left out: they stay open for minutes by design),
//   peregrine_kube_api_request_errors_total{verb,resource,code} (code: HTTP status,
//   "0" when no response arrived), plus from ControllerMetrics peregrine_workqueue_depth
//   (keys ready to be reconciled, set on every add and get; delayed resyncs are not
//   counted), peregrine_agents_connected (agent streams bound to the jobs this replica
//   reconciles, recounted per job each round) and peregrine_controller_is_leader.

namespace peregrine {
namespace {

using nlohmann::json;

bool IsDns1123Label(const std::string& s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}
using kube::Path;
using kube::Str;


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

absl::StatusOr<std::vector<std::string>> WatchedNamespaces(const KubeModeOptions& options) {
  std::vector<std::string> out = options.watch_namespaces;
  if (!options.watch_namespace.empty()) out.push_back(options.watch_namespace);
  for (const std::string& ns : out) {
    if (!IsDns1123Label(ns)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kube mode: watched namespace '", ns,
          "' is not a namespace name (at most 63 of a-z, 0-9 and '-', starting and ending alphanumeric)"));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

struct KubeMode::Impl {
  KubeModeOptions options;
  std::string identity;
  std::unique_ptr<SeededRandom> random;
  std::unique_ptr<ControllerMetrics> metrics;
  std::unique_ptr<ApiObserver> observer;
  std::unique_ptr<kube::RestClient> client;
  std::unique_ptr<kube::Informer> jobs;
  std::unique_ptr<kube::Informer> pods;
  std::unique_ptr<kube::Informer> nodes;
  std::unique_ptr<kube::EventRecorder> events;
  std::unique_ptr<NodeHealthController> node_health;
  std::unique_ptr<KubeCluster> cluster;
  std::unique_ptr<kube::WorkQueue> queue;
  std::unique_ptr<AgentRegistry> registry;
  std::unique_ptr<TrainingJobReconciler> reconciler;
  std::unique_ptr<AgentServiceImpl> service;
  std::unique_ptr<LeaderGatedAgentService> gated_service;
  std::unique_ptr<grpc::Server> grpc_server;
  std::unique_ptr<kube::KubeApiAuthorizer> authorizer;
  std::unique_ptr<kube::KubeApiAuthorizer> agent_reviewer;  // TokenReviews for peregrine.dev
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<HttpServer> metrics_http;
  std::unique_ptr<kube::LeaderElector> elector;
  std::vector<std::thread> workers;
  std::unique_ptr<AgentCaPublisher> ca_publisher;
  std::thread ca_watcher;
  absl::Mutex ca_watcher_mu;
  absl::CondVar ca_watcher_cv;  // signalled when shutting down
  int grpc_port = 0;
  int http_port = 0;
  int metrics_port = 0;
  std::atomic<bool> lost{false};
  std::atomic<bool> shut_down{false};

  // Pod key -> job key, so a deleted pod (gone from the cache) still wakes its job.
  absl::Mutex pod_jobs_mu;
  std::map<std::string, std::string> pod_jobs ABSL_GUARDED_BY(pod_jobs_mu);

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

  // Every agent_tls_refresh, on the leader: the CA bundle to every job's ConfigMap.
  void CaWatcherLoop() {
    while (true) {
      {
        absl::MutexLock lock(&ca_watcher_mu);
        const absl::Time deadline = options.clock->Now() + options.agent_tls_refresh;
        while (!shut_down.load() && !options.clock->WaitWithDeadline(ca_watcher_cv, ca_watcher_mu, deadline)) {
        }
        if (shut_down.load()) return;
      }
      if (!IsLeader()) continue;
      std::vector<TrainingJob> known;
      for (const kube::ObjectPtr& object : jobs->List()) {
        if (const json* ts = Path(*object, {"metadata", "deletionTimestamp"}); ts != nullptr && !ts->is_null()) continue;
        TrainingJob job;
        job.metadata.name = Str((*object)["metadata"], "name");
        job.metadata.namespace_ = Str((*object)["metadata"], "namespace");
        job.metadata.uid = Str((*object)["metadata"], "uid");
        if (!job.metadata.name.empty()) known.push_back(std::move(job));
      }
      if (absl::Status s = ca_publisher->Refresh(known); !s.ok()) {
        std::fprintf(stderr, "peregrine-controller: agent CA bundle: %s\n", s.ToString().c_str());
      }
    }
  }

  // The one place the work queue learns how a reconcile ended.
  void WorkerLoop() {
    while (std::optional<std::string> key = queue->Get()) {
      kube::ApplyReconcileResult(*queue, *key, reconciler->Reconcile(*key));
      queue->Done(*key);
    }
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
  absl::StatusOr<std::vector<std::string>> watched = WatchedNamespaces(options);
  if (!watched.ok()) return watched.status();
  // Agent TLS: the files are checked before anything starts, so a missing one is an error
  // naming it, not a server that refuses every agent.
  std::shared_ptr<grpc::ServerCredentials> agent_credentials = grpc::InsecureServerCredentials();
  if (options.agent_tls.enabled()) {
    auto credentials = AgentServerCredentials(options.agent_tls, options.agent_tls_refresh);
    if (!credentials.ok()) return credentials.status();
    agent_credentials = *std::move(credentials);
  }
  auto impl = std::make_unique<Impl>();
  Impl* self = impl.get();
  impl->options = options;
  impl->identity = options.identity.empty() ? DefaultIdentity() : options.identity;
  std::random_device rd;
  impl->random = std::make_unique<SeededRandom>((static_cast<uint64_t>(rd()) << 32) ^ rd());
  impl->metrics = std::make_unique<ControllerMetrics>();
  impl->metrics->SetLeader(false);
  impl->observer = std::make_unique<ApiObserver>(*impl->metrics->registry());

  kube::RestClientOptions copts;
  copts.observer = impl->observer.get();
  copts.user_agent = absl::StrCat("peregrine-controller/", impl->identity);
  auto client = kube::RestClient::Create(config, copts);
  if (!client.ok()) return client.status();
  impl->client = *std::move(client);
  Clock* clock = options.clock;

  impl->queue = std::make_unique<kube::WorkQueue>(clock);
  // Ready keys only (client-go's depth): delayed resyncs are not backlog.
  impl->queue->SetDepthObserver([m = impl->metrics.get()](int depth) { m->SetWorkQueueDepth(depth); });
  kube::InformerOptions jobs_opts;
  // Every namespace (one cluster-wide list/watch) or a list/watch per watched namespace.
  jobs_opts.resource = TrainingJobsPath("");
  jobs_opts.namespaces = *watched;
  impl->jobs = std::make_unique<kube::Informer>(impl->client.get(), jobs_opts, clock, impl->random.get());
  impl->jobs->AddHandler([self](const std::string& key) { self->queue->Add(key); });
  kube::InformerOptions pods_opts;
  pods_opts.resource = PodsPath("");
  pods_opts.namespaces = *watched;
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
  kopts.host_inspections_on_node = options.host_inspections_on_node;
  if (options.agent_tls.enabled()) {
    impl->ca_publisher = std::make_unique<AgentCaPublisher>(impl->client.get(), options.agent_tls.ca_file,
                                                            [self] { return self->IsLeader(); });
    kopts.agent_tls = true;
    kopts.ca_publisher = impl->ca_publisher.get();
  }
  NodeHealthControllerOptions nhopts;
  nhopts.lifecycle = options.node_lifecycle;
  nhopts.sweep_image = options.node_health_sweep_image;
  nhopts.sweep_namespace = options.node_health_sweep_namespace;
  nhopts.resync = options.resync;
  nhopts.may_write = [self] { return self->IsLeader(); };
  nhopts.on_counts = [self](const std::array<int64_t, kNodeHealthStates>& counts) {
    self->metrics->SetNodeHealthCounts(counts);
  };
  if (auto s = ValidateNodeLifecycleOptions(nhopts.lifecycle); !s.ok()) return s;
  impl->node_health = std::make_unique<NodeHealthController>(impl->client.get(), impl->nodes.get(),
                                                             impl->events.get(), clock, nhopts);
  kopts.node_health = impl->node_health.get();
  impl->cluster = std::make_unique<KubeCluster>(impl->client.get(), impl->pods.get(), impl->nodes.get(),
                                                impl->events.get(), kopts, [self] { return self->IsLeader(); });

  impl->registry = std::make_unique<AgentRegistry>(impl->identity);
  impl->registry->SetHeartbeatIntervalMs(static_cast<uint32_t>(options.heartbeat_ms));
  impl->registry->SetChangeCallback([self](const std::string& key) { self->queue->Add(key); });
  if (!options.agent_key_file.empty()) {
    std::ifstream in(options.agent_key_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return absl::InvalidArgumentError(absl::StrCat("--agent-key-file ", options.agent_key_file, ": cannot read it"));
    if (absl::Status s = impl->registry->SetAgentKey(std::string(absl::StripAsciiWhitespace(text.str()))); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--agent-key-file ", options.agent_key_file, ": ", s.message()));
    }
    impl->agent_reviewer = std::make_unique<kube::KubeApiAuthorizer>(
        impl->client.get(), std::vector<std::string>{kube::kAgentTokenAudience});
    kube::KubeApiAuthorizer* reviewer = impl->agent_reviewer.get();
    impl->registry->SetBootstrapVerifier(std::make_shared<kube::KubeAgentBootstrapVerifier>(
        [reviewer](const std::string& token) { return reviewer->Authenticate(token); },
        kube::PodLookupFromInformer(impl->pods.get()), clock));
  }
  TrainingJobReconciler::Deps rdeps;
  rdeps.client = impl->client.get();
  rdeps.jobs = impl->jobs.get();
  rdeps.cluster = impl->cluster.get();
  rdeps.registry = impl->registry.get();
  rdeps.metrics = impl->metrics.get();
  rdeps.is_leader = [self] { return self->IsLeader(); };
  rdeps.clock = clock;
  TrainingJobReconciler::Options ropts;
  ropts.resync = options.resync;
  ropts.decision = options.decision;
  ropts.decision.standby_pending_timeout_ns = absl::ToInt64Nanoseconds(options.standby_pending_timeout);
  impl->reconciler = std::make_unique<TrainingJobReconciler>(std::move(rdeps), std::move(ropts));
  impl->service = std::make_unique<AgentServiceImpl>(impl->registry.get(), clock);
  impl->gated_service =
      std::make_unique<LeaderGatedAgentService>(impl->service.get(), [self] { return self->IsLeader(); });
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options.host, ":", options.grpc_port), agent_credentials, &impl->grpc_port);
  builder.RegisterService(impl->gated_service.get());
  ApplyAgentServerKeepalive(&builder);
  builder.AddChannelArgument(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 16 << 20);
  impl->grpc_server = builder.BuildAndStart();
  if (!impl->grpc_server || impl->grpc_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for agents on ", options.host, ":", options.grpc_port));
  }
  // The API checks every caller's token and access with the API server; /metrics has a
  // port of its own, so the API's port can be closed to all but its clients.
  impl->authorizer = std::make_unique<kube::KubeApiAuthorizer>(impl->client.get(), options.api_audiences);
  impl->http = std::make_unique<HttpServer>(impl->reconciler.get(), impl->metrics.get(), nullptr);
  impl->http->RequireAuth(impl->authorizer.get());
  impl->http->ServeOnly(HttpEndpoints::kApiOnly);
  impl->http->SetLimits(options.http_limits);
  auto http_port = impl->http->Start(options.host, options.http_port);
  if (!http_port.ok()) {
    impl->grpc_server->Shutdown();
    return http_port.status();
  }
  impl->http_port = *http_port;
  impl->metrics_http = std::make_unique<HttpServer>(impl->reconciler.get(), impl->metrics.get(), nullptr);
  impl->metrics_http->ServeOnly(HttpEndpoints::kMetricsOnly);
  impl->metrics_http->SetLimits(options.http_limits);
  auto metrics_port = impl->metrics_http->Start(options.host, options.metrics_port);
  if (!metrics_port.ok()) {
    impl->http->Stop();
    impl->grpc_server->Shutdown();
    return metrics_port.status();
  }
  impl->metrics_port = *metrics_port;

  impl->nodes->Start();
  impl->pods->Start();
  impl->jobs->Start();
  impl->node_health->Start();

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
  if (impl->ca_publisher) impl->ca_watcher = std::thread([self] { self->CaWatcherLoop(); });
  if (impl->elector) impl->elector->Start();
  return std::unique_ptr<KubeMode>(new KubeMode(std::move(impl)));
}

int KubeMode::grpc_port() const { return impl_->grpc_port; }
int KubeMode::http_port() const { return impl_->http_port; }
int KubeMode::metrics_port() const { return impl_->metrics_port; }
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
  {
    absl::MutexLock lock(&m.ca_watcher_mu);
    m.ca_watcher_cv.SignalAll();
  }
  if (m.ca_watcher.joinable()) m.ca_watcher.join();
  if (m.node_health) m.node_health->Stop();
  if (m.elector) m.elector->Stop();
  if (m.jobs) m.jobs->Stop();
  if (m.pods) m.pods->Stop();
  if (m.nodes) m.nodes->Stop();
  if (m.http) m.http->Stop();
  if (m.metrics_http) m.metrics_http->Stop();
  if (m.grpc_server) {
    m.grpc_server->Shutdown(absl::ToChronoTime(m.options.clock->Now() + absl::Seconds(1)));
    m.grpc_server->Wait();
  }
  if (m.registry) m.registry->SetChangeCallback(nullptr);
  if (m.reconciler) m.reconciler->StopAll();
}

}  // namespace peregrine
