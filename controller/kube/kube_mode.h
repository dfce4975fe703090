// KubeMode: the operator against a Kubernetes API server (peregrine-controller without
// --local). It wires together:
//   - informers on trainingjobs, pods (label selector peregrine.dev/job) and nodes;
//   - a WorkQueue of "namespace/name" job keys fed level-based by the informers (a pod
//     maps to its job through the peregrine.dev/job label, a node to the jobs with pods
//     on it) and by the agent registry (an agent message wakes its job);
//   - N workers (default 1); each takes a key, reads the TrainingJob from the cache and
//     runs one round of that job's JobController (Start(run_loop=false) once, then
//     ReconcileOnce()); a clean round is requeued after the plan's requeue delay (at most
//     the resync period), a round with an API error with the per-key rate limiter;
//   - invalid specs (ParseTrainingJob or ValidateForKubernetes fails, e.g. a template
//     without a container and no codeVersion.image, an nvidia.com/gpu limit other than
//     gpusPerMachine): status condition Valid=False reason InvalidSpec with the message,
//     observedGeneration set, and no pods;
//   - a pod the API server refuses for good (400/422 on create): Valid=False reason
//     PodRejected naming the pod and the server's message; the job is not reconciled
//     again (no retry loop) until its spec changes; pods already running are left alone;
//   - deletion: the finalizer peregrine.dev/teardown is added on first sight; once the
//     job has a deletionTimestamp its pods (actives and standbys) are deleted with their
//     grace period and the finalizer is removed, after which the API server's garbage
//     collector removes what the job owns (pods, headless Service, token Secret); the
//     job's agents are unbound (Reject, stream ended) and its metric series removed;
//   - a Node whose Ready condition is False/Unknown fails the job's pods on it (the
//     decision engine evicts those machines; JobController cordons them once);
//   - the spec (generation) or the peregrine.dev/hot-update annotation changed: the
//     job's JobController is rebuilt from the new object, resuming from the status;
//   - Lease leader election (optional): only the leader's workers act. Every worker
//     checks IsLeader() before a round and the cluster checks it before every write, so a
//     replica whose renewals stop stops writing at once. A replica that loses the Lease
//     never acts again (LostLeadership() turns true): the process is expected to exit and
//     restart as a fresh candidate, as client-go controllers do, which also closes every
//     agent stream it held so the agents reconnect to the new leader;
//   - the gRPC AgentService and the HTTP server (/healthz, /metrics, the JSON API of
//     http_server.h) run on every replica; the API lists the jobs this replica
//     reconciles (none on a follower) and applies a code update (POST .../code) as a
//     read-modify-write of the TrainingJob (spec.codeVersion + hot-update annotation),
//     which works on any replica. Agents must talk to the leader: the leader labels its own pod
//     peregrine.dev/leader=true (removed when it steps down) so the chart's gRPC Service
//     (grpcService.leaderOnly) routes only to it, and a follower answers every agent
//     stream with UNAVAILABLE, so an agent that reaches one backs off and redials.
// Metrics (on the same registry as ControllerMetrics):
//   peregrine_kube_api_request_duration_seconds{verb,resource} (histogram; WATCH
//   requests are left out: they stay open for minutes by design),
//   peregrine_kube_api_request_errors_total{verb,resource,code} (code: HTTP status,
//   "0" when no response arrived), plus from ControllerMetrics peregrine_workqueue_depth
//   (keys ready to be reconciled, set on every add and get; delayed resyncs are not
//   counted), peregrine_agents_connected (agent streams bound to the jobs this replica
//   reconciles, recounted per job each round) and peregrine_controller_is_leader.
//
// Thread-safe: Start once, then any method from any thread; Shutdown is idempotent and
// leaves every pod running (a restarted controller continues from the status).
#ifndef PEREGRINE_CONTROLLER_KUBE_KUBE_MODE_H_
#define PEREGRINE_CONTROLLER_KUBE_KUBE_MODE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/core/decision_engine.h"
#include "controller/kube/config.h"

namespace peregrine {

inline constexpr char kTeardownFinalizer[] = "peregrine.dev/teardown";
inline constexpr char kLeaderLabel[] = "peregrine.dev/leader";

struct KubeModeOptions {
  std::string watch_namespace;     // "" watches every namespace
  std::string controller_address;  // host:port the agents dial (required)
  std::string agent_image;         // the init container's image (required)
  uint32_t rendezvous_port = 29500;
  std::string host = "0.0.0.0";
  int grpc_port = 7400;  // 0 picks a free port
  int http_port = 7401;  // 0 picks a free port
  int workers = 1;
  int heartbeat_ms = 1000;  // agents' heartbeat interval (sent in RegisterAck)
  int agent_heartbeat_flag_ms = 0;  // >0: also passed as the agents' --heartbeat-ms
  absl::Duration resync = absl::Seconds(10);  // every job is looked at least this often
  // A standby stuck Pending (ImagePullBackOff, Unschedulable, ...) this long is replaced.
  absl::Duration standby_pending_timeout = absl::Minutes(10);
  // Leader election on the Lease lease_namespace/lease_name.
  bool leader_elect = false;
  std::string lease_namespace = "default";
  std::string lease_name = "peregrine-controller";
  std::string identity;  // "" = $HOSTNAME (or "peregrine") plus a random suffix
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  // This replica's own pod, labelled peregrine.dev/leader=true while it leads ("" = none).
  std::string own_pod_name;
  std::string own_pod_namespace;
  DecisionConfig decision;
};

class KubeMode {
 public:
  // Connects, starts the informers, servers, workers and (when configured) the elector.
  // kInvalidArgument for bad options; errors from binding the ports or the client.
  static absl::StatusOr<std::unique_ptr<KubeMode>> Start(const kube::Config& config, KubeModeOptions options);
  ~KubeMode();

  int grpc_port() const;
  int http_port() const;
  const std::string& identity() const;
  // True while this replica may act (always true without leader election).
  bool IsLeader() const;
  // True once this replica led and lost the Lease; it will not act again.
  bool LostLeadership() const;
  // Stops acting and serving (releasing the Lease when held); pods keep running.
  void Shutdown();

  // API requests this replica sent, excluding Lease traffic: all of them, and writes
  // (create, update, status update, patch, delete).
  int64_t ApiRequestsForTest() const;
  int64_t ApiWritesForTest() const;

  struct Impl;

 private:
  explicit KubeMode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_KUBE_MODE_H_
