// KubeMode: the operator against a Kubernetes API server (peregrine-controller without
// --local). It wires informers (trainingjobs, pods, nodes) and the agent registry to a
// WorkQueue of job keys, N workers running the TrainingJobReconciler
// (trainingjob_reconciler.h), optional Lease leader election, the gRPC AgentService and
// the HTTP server. How the parts fit is described in kube_mode.cc and docs/kubernetes.md.
//
// Thread-safe: Start once, then any method from any thread; Shutdown is idempotent and
// leaves every pod running (a restarted controller continues from the status).
#ifndef PEREGRINE_CONTROLLER_KUBE_KUBE_MODE_H_
#define PEREGRINE_CONTROLLER_KUBE_KUBE_MODE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/agent_tls.h"
#include "controller/core/decision_engine.h"
#include "controller/core/node_lifecycle.h"
#include "controller/http_server.h"
#include "controller/kube/config.h"
#include "controller/kube/resources.h"

namespace peregrine {

struct KubeModeOptions {
  // The namespaces whose TrainingJobs (and their pods) are reconciled, each listed and
  // watched on its own, so the controller needs access in those namespaces only; a
  // TrainingJob elsewhere is ignored. watch_namespace is one more (the single-namespace
  // form). Both empty: every namespace (one cluster-wide list and watch).
  std::vector<std::string> watch_namespaces;
  std::string watch_namespace;
  std::string controller_address;  // host:port the agents dial (required)
  std::string agent_image;         // the init container's image (required)
  uint32_t rendezvous_port = 29500;
  std::string host = "0.0.0.0";
  int grpc_port = 7400;  // 0 picks a free port
  int http_port = 7401;     // the peregrinectl API (and /healthz); 0 picks a free port
  int metrics_port = 7402;  // /metrics and /healthz; 0 picks a free port
  HttpLimits http_limits;   // both HTTP servers' (http_server.h)
  // The API's callers are authenticated with TokenReviews asking for these audiences
  // (empty: the API server's own) and authorised with SubjectAccessReviews.
  std::vector<std::string> api_audiences;
  // The agent key (a file holding 64 hex characters): every pod's agent credential
  // derives from it (controller/agent_credentials.h), and first registrations are
  // bootstrapped with the pod's projected service-account token, checked by a
  // TokenReview (controller/kube/agent_bootstrap.h). "": agents are not authenticated
  // (tests only; --agent-key-file is required on the command line).
  std::string agent_key_file;
  // TLS on the agents' gRPC port (controller/agent_tls.h): all three files, or none for
  // plaintext. The certificate and key are re-read every agent_tls_refresh; so is the CA
  // bundle, which every job's pods get through a ConfigMap (agent_ca_configmap.h).
  AgentTlsFiles agent_tls;
  absl::Duration agent_tls_refresh = absl::Seconds(10);
  int workers = 1;
  int heartbeat_ms = 1000;  // agents' heartbeat interval (sent in RegisterAck)
  int agent_heartbeat_flag_ms = 0;  // >0: also passed as the agents' --heartbeat-ms
  absl::Duration resync = absl::Seconds(10);  // every job is looked at least this often
  // A standby stuck Pending (ImagePullBackOff, Unschedulable, ...) this long is replaced.
  absl::Duration standby_pending_timeout = absl::Minutes(10);
  Clock* clock = RealClock();  // the time source of the controller (must outlive the mode)
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
  // Node health (node_health_controller.h): the image quarantined Nodes' sweep Jobs run
  // ("": no sweeps, quarantined Nodes stay so), the namespace of those Jobs, and the
  // lifecycle's durations and thresholds.
  std::string node_health_sweep_image;
  std::string node_health_sweep_namespace = "default";
  NodeLifecycleOptions node_lifecycle;
  // The node inspector DaemonSet covers the Nodes (--host-inspections node): the pods'
  // agents run only the volume inspection (PodBuildOptions::host_inspections_on_node).
  bool host_inspections_on_node = false;
};

// watch_namespaces and watch_namespace together, sorted, without duplicates; empty means
// every namespace. kInvalidArgument naming an entry that is not a namespace name (a
// DNS-1123 label: at most 63 of [a-z0-9-], starting and ending alphanumeric).
absl::StatusOr<std::vector<std::string>> WatchedNamespaces(const KubeModeOptions& options);

class KubeMode {
 public:
  // Connects, starts the informers, servers, workers and (when configured) the elector.
  // kInvalidArgument for bad options (a bad namespace among them); errors from binding the ports or the client.
  static absl::StatusOr<std::unique_ptr<KubeMode>> Start(const kube::Config& config, KubeModeOptions options);
  ~KubeMode();

  int grpc_port() const;
  int http_port() const;
  int metrics_port() const;
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
