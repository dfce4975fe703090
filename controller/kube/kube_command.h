// The Kubernetes entry point of peregrine-controller (everything but --local): flags ->
// KubeModeOptions -> KubeMode::Start -> wait for a signal or for the Lease to be lost.
//
//   peregrine-controller [--kubeconfig FILE [--context NAME]] [--namespace NS]
//       [--leader-elect [--lease-namespace NS] [--lease-name NAME]]
//       [--grpc-port 7400] [--http-port 7401] --agent-image IMAGE
//       [--agent-tls-cert FILE --agent-tls-key FILE --agent-tls-ca FILE]
//       [--controller-address HOST:PORT] [--workers N] [--rendezvous-port 29500]
//       [--resync-s 10] [--log-level info]
//
// The flags match helm/peregrine/templates/deployment.yaml. POD_NAME / POD_NAMESPACE
// (downward API) give the leader-election identity, the pod the leader labels
// peregrine.dev/leader=true and the default Lease namespace.
//
// Exit codes: 0 after SIGINT/SIGTERM, 1 when the Lease was lost (the container restarts
// and competes again, like client-go controllers), 2 for bad flags or configuration.
#ifndef PEREGRINE_CONTROLLER_KUBE_KUBE_COMMAND_H_
#define PEREGRINE_CONTROLLER_KUBE_KUBE_COMMAND_H_

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/kube/kube_mode.h"

namespace peregrine {

struct KubeMainOptions {
  std::string kubeconfig;  // "" = in-cluster, else $KUBECONFIG / ~/.kube/config
  std::string context;
  std::string log_level = "info";
  KubeModeOptions mode;
};

// Parses the flags (argv without the program name). `env` looks up POD_NAME,
// POD_NAMESPACE. kInvalidArgument naming the flag on error.
absl::StatusOr<KubeMainOptions> ParseKubeMainFlags(
    const std::vector<std::string>& args, const std::function<std::optional<std::string>(std::string_view)>& env);

std::string KubeMainUsage();

// Runs the operator until `signal` becomes non-zero or leadership is lost.
int RunKubeMain(const KubeMainOptions& options, const std::atomic<int>& signal);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_KUBE_COMMAND_H_
