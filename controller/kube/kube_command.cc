#include "controller/kube/kube_command.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "controller/kube/config.h"

namespace peregrine {

std::string KubeMainUsage() {
  return "usage: peregrine-controller [options]   (Kubernetes mode; --local FILE runs the local cluster)\n"
         "  --kubeconfig FILE          kubeconfig (default: in-cluster, else $KUBECONFIG, ~/.kube/config)\n"
         "  --context NAME             kubeconfig context (default: current-context)\n"
         "  --namespace NS[,NS...]     watch TrainingJobs (and their pods) in these namespaces only,\n"
         "                             each listed and watched on its own (repeatable; default:\n"
         "                             every namespace); TrainingJobs elsewhere are ignored\n"
         "  --leader-elect             Lease-based leader election (needed with several replicas)\n"
         "  --lease-namespace NS       the Lease's namespace (default: $POD_NAMESPACE or default)\n"
         "  --lease-name NAME          the Lease's name (default peregrine-controller)\n"
         "  --grpc-port N              agents' gRPC port (default 7400)\n"
         "  --http-port N              the peregrinectl API and /healthz (default 7401); callers need\n"
         "                             a bearer token allowed on the TrainingJob (docs/kubernetes.md)\n"
         "  --metrics-port N           /metrics and /healthz (default 7402)\n"
         "  --http-max-connections N   HTTP connections each port serves at once (default 32)\n"
         "  --http-max-queued-connections N  accepted HTTP connections waiting to be served, per\n"
         "                             port (default 1024); past it the port stops accepting\n"
         "  --api-audience A           audience the API's bearer tokens must have (repeatable;\n"
         "                             default: the API server's own)\n"
         "  --agent-tls-cert FILE      serve the agents' gRPC with TLS: PEM certificate chain (with\n"
         "                             --agent-tls-key and --agent-tls-ca; re-read when it changes)\n"
         "  --agent-tls-key FILE       PEM private key of --agent-tls-cert (re-read when it changes)\n"
         "  --agent-tls-ca FILE        PEM CA bundle the agents verify the controller with; every\n"
         "                             job gets it in its ConfigMap <job>-peregrine-ca\n"
         "  --agent-image IMAGE        image with /opt/peregrine/bin/peregrine-agent (required)\n"
         "  --agent-key-file FILE      the agent key (64 hex characters) the pods' agent credentials\n"
         "                             derive from (required; docs/security.md)\n"
         "  --controller-address A     host:port the agents dial\n"
         "                             (default peregrine-grpc.<POD_NAMESPACE>.svc:<grpc-port>)\n"
         "  --workers N                reconcile workers (default 1)\n"
         "  --rendezvous-port N        rank 0's rendezvous port in the pods (default 29500)\n"
         "  --resync-s N               look at every job at least this often (default 10)\n"
         "  --standby-pending-timeout-s N  replace a standby stuck Pending (image pull,\n"
         "                             unschedulable) after N seconds (default 600)\n"
         "  --node-health-sweep-image IMAGE  image the sweeps of quarantined nodes run\n"
         "                             (peregrine-diagnose under /opt/peregrine/bin: the agent\n"
         "                             image); empty (default): no sweeps, quarantined nodes stay\n"
         "  --node-health-sweep-namespace NS  namespace of the sweep Jobs (default POD_NAMESPACE,\n"
         "                             else default)\n"
         "  --host-inspections pod|node  node: the node inspector DaemonSet runs the kernel-log,\n"
         "                             NIC/RDMA and GPU/DCGM inspections; the pods' agents get\n"
         "                             --host-inspections node and run only the volume one\n"
         "                             (default pod: the agents run them all)\n"
         "  --log-level L              debug, info, warning or error (default info)\n";
}

absl::StatusOr<KubeMainOptions> ParseKubeMainFlags(
    const std::vector<std::string>& args, const std::function<std::optional<std::string>(std::string_view)>& env) {
  KubeMainOptions o;
  KubeModeOptions& m = o.mode;
  const std::string pod_name = env("POD_NAME").value_or("");
  const std::string pod_namespace = env("POD_NAMESPACE").value_or("");
  m.own_pod_name = pod_name;
  m.own_pod_namespace = pod_namespace;
  m.lease_namespace = pod_namespace.empty() ? "default" : pod_namespace;
  m.node_health_sweep_namespace = m.lease_namespace;
  std::string controller_address;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--leader-elect") {
      m.leader_elect = true;
      continue;
    }
    if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(arg, ": needs a value (or unknown flag)"));
    const std::string value = args[++i];
    auto number = [&](int* out, int min) -> absl::Status {
      if (!absl::SimpleAtoi(value, out) || *out < min) {
        return absl::InvalidArgumentError(absl::StrCat(arg, ": expected an integer >= ", min, ", got '", value, "'"));
      }
      return absl::OkStatus();
    };
    absl::Status s;
    int n = 0;
    if (arg == "--kubeconfig") {
      o.kubeconfig = value;
    } else if (arg == "--context") {
      o.context = value;
    } else if (arg == "--namespace") {
      for (absl::string_view ns : absl::StrSplit(value, ',')) {
        if (ns.empty()) return absl::InvalidArgumentError(absl::StrCat("--namespace: empty namespace in '", value, "'"));
        m.watch_namespaces.emplace_back(ns);
      }
    } else if (arg == "--lease-namespace") {
      m.lease_namespace = value;
    } else if (arg == "--lease-name") {
      m.lease_name = value;
    } else if (arg == "--grpc-port") {
      s = number(&m.grpc_port, 0);
    } else if (arg == "--http-port") {
      s = number(&m.http_port, 0);
    } else if (arg == "--metrics-port") {
      s = number(&m.metrics_port, 0);
    } else if (arg == "--http-max-connections") {
      s = number(&m.http_limits.max_connections, 1);
    } else if (arg == "--http-max-queued-connections") {
      s = number(&m.http_limits.max_queued_connections, 1);
    } else if (arg == "--api-audience") {
      if (value.empty()) return absl::InvalidArgumentError("--api-audience: needs a non-empty audience");
      m.api_audiences.push_back(value);
    } else if (arg == "--agent-tls-cert" || arg == "--agent-tls-key" || arg == "--agent-tls-ca") {
      if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(arg, ": needs a file"));
      std::string& file = arg == "--agent-tls-cert"  ? m.agent_tls.cert_file
                          : arg == "--agent-tls-key" ? m.agent_tls.key_file
                                                     : m.agent_tls.ca_file;
      file = value;
    } else if (arg == "--agent-key-file") {
      if (value.empty()) return absl::InvalidArgumentError("--agent-key-file: needs a file");
      m.agent_key_file = value;
    } else if (arg == "--agent-image") {
      m.agent_image = value;
    } else if (arg == "--node-health-sweep-image") {
      m.node_health_sweep_image = value;
    } else if (arg == "--host-inspections") {
      if (value != "pod" && value != "node") {
        return absl::InvalidArgumentError(absl::StrCat("--host-inspections: expected pod or node, got '", value, "'"));
      }
      m.host_inspections_on_node = value == "node";
    } else if (arg == "--node-health-sweep-namespace") {
      if (value.empty()) return absl::InvalidArgumentError("--node-health-sweep-namespace: needs a namespace");
      m.node_health_sweep_namespace = value;
    } else if (arg == "--controller-address") {
      controller_address = value;
    } else if (arg == "--workers") {
      s = number(&m.workers, 1);
    } else if (arg == "--rendezvous-port") {
      s = number(&n, 1);
      m.rendezvous_port = static_cast<uint32_t>(n);
    } else if (arg == "--resync-s") {
      s = number(&n, 1);
      m.resync = absl::Seconds(n);
    } else if (arg == "--standby-pending-timeout-s") {
      s = number(&n, 1);
      m.standby_pending_timeout = absl::Seconds(n);
    } else if (arg == "--log-level") {
      if (value != "debug" && value != "info" && value != "warning" && value != "error") {
        return absl::InvalidArgumentError(
            absl::StrCat("--log-level: expected debug, info, warning or error, got '", value, "'"));
      }
      o.log_level = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", arg));
    }
    if (!s.ok()) return s;
  }
  if (m.agent_image.empty()) return absl::InvalidArgumentError("--agent-image is required");
  if (m.agent_tls.enabled()) {
    for (const auto& [flag, file] : {std::pair<const char*, const std::string&>{"--agent-tls-cert", m.agent_tls.cert_file},
                                     {"--agent-tls-key", m.agent_tls.key_file},
                                     {"--agent-tls-ca", m.agent_tls.ca_file}}) {
      if (file.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " is required with the other --agent-tls-* flags (agent TLS needs all three)"));
      }
    }
  }
  if (controller_address.empty()) {
    controller_address = absl::StrCat("peregrine-grpc.", pod_namespace.empty() ? "default" : pod_namespace,
                                      ".svc:", m.grpc_port);
  }
  m.controller_address = controller_address;
  if (!pod_name.empty()) m.identity = absl::StrCat(pod_name, "_", RealClock()->UnixNanos() % 1000000007);
  return o;
}

int RunKubeMain(const KubeMainOptions& options, const std::atomic<int>& signal) {
  if (options.mode.agent_key_file.empty()) {
    std::fprintf(stderr, "peregrine-controller: --agent-key-file is required (docs/security.md)\n%s",
                 KubeMainUsage().c_str());
    return 2;
  }
  absl::StatusOr<kube::Config> config;
  if (!options.kubeconfig.empty()) {
    config = kube::LoadKubeconfigFile(options.kubeconfig, options.context);
  } else {
    config = kube::LoadDefaultConfig();
  }
  if (!config.ok()) {
    std::fprintf(stderr, "peregrine-controller: %s\n", config.status().ToString().c_str());
    return 2;
  }
  absl::StatusOr<std::vector<std::string>> watched_or = WatchedNamespaces(options.mode);
  const std::vector<std::string> watched = watched_or.ok() ? *watched_or : std::vector<std::string>{};
  auto mode = KubeMode::Start(*config, options.mode);
  if (!mode.ok()) {
    std::fprintf(stderr, "peregrine-controller: %s\n", mode.status().ToString().c_str());
    return 2;
  }
  std::fprintf(stderr,
               "peregrine-controller: %s against %s (namespace %s); agents dial %s; grpc :%d, api :%d, "
               "metrics :%d%s\n",
               (*mode)->identity().c_str(), config->server.c_str(),
               watched.empty() ? "<all>" : absl::StrJoin(watched, ",").c_str(),
               options.mode.controller_address.c_str(), (*mode)->grpc_port(), (*mode)->http_port(),
               (*mode)->metrics_port(), options.mode.leader_elect ? ", leader election on" : "");
  bool was_leader = false;
  int code = 0;
  while (signal.load() == 0) {
    const bool leader = (*mode)->IsLeader();
    if (leader != was_leader && options.log_level != "error" && options.log_level != "warning") {
      std::fprintf(stderr, "peregrine-controller: %s\n", leader ? "became the leader" : "not the leader");
      was_leader = leader;
    }
    if ((*mode)->LostLeadership()) {
      std::fprintf(stderr, "peregrine-controller: lost the leader lease; exiting so the replica restarts\n");
      code = 1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  (*mode)->Shutdown();
  return code;
}

}  // namespace peregrine
