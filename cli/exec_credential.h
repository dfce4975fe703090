// A kubeconfig user's exec credential plugin (client.authentication.k8s.io/v1 and
// v1beta1), run the way kubectl runs it: the kubeconfig's `exec` stanza names the command,
// its args and env; the plugin gets KUBERNETES_EXEC_INFO (an ExecCredential whose spec says
// the session is not interactive and, with provideClusterInfo, describes the cluster) and
// prints an ExecCredential whose status holds a bearer token or a client certificate and
// key. This is how EKS (aws eks get-token), GKE (gke-gcloud-auth-plugin), AKS (kubelogin)
// and OIDC (kubectl oidc-login) users authenticate.
//
// ParseExecConfig and ParseExecCredential are pure and name the user and the field that is
// wrong; RunExecCredentialPlugin runs the plugin (cli/process_output.h) and blocks until it
// exits. Credentials are not cached: every peregrinectl command runs the plugin once.
// Plugins that need a terminal (interactiveMode Always) are refused. Thread-compatible.
#ifndef PEREGRINE_CLI_EXEC_CREDENTIAL_H_
#define PEREGRINE_CLI_EXEC_CREDENTIAL_H_

#include <map>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace peregrine {

// The kubeconfig's user.exec, checked.
struct ExecConfig {
  std::string api_version;  // client.authentication.k8s.io/v1 or /v1beta1
  std::string command;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::string install_hint;
  bool provide_cluster_info = false;
  std::string interactive_mode;  // Never, IfAvailable, Always ("" for v1beta1: IfAvailable)
};

// What the plugin returned: a token, or a client certificate and key (PEM).
struct ExecCredential {
  std::string token;
  std::string client_certificate_pem;
  std::string client_key_pem;
  std::string expiration_timestamp;  // RFC 3339, or "" when the plugin gave none
};

// kInvalidArgument naming "kubeconfig user USER: exec.FIELD" for a missing command, an
// apiVersion other than v1/v1beta1 (v1alpha1 was removed in Kubernetes 1.24), args or env
// of the wrong shape, or a v1 stanza without interactiveMode (kubectl refuses it too);
// kFailedPrecondition for interactiveMode Always (peregrinectl runs plugins without a
// terminal).
absl::StatusOr<ExecConfig> ParseExecConfig(const nlohmann::json& exec, absl::string_view user);

// The KUBERNETES_EXEC_INFO the plugin gets. `cluster` is the kubeconfig's cluster object
// (server, certificate-authority-data, ...), passed when provideClusterInfo is true, with
// the cluster's extension "client.authentication.k8s.io/exec" as spec.cluster.config.
std::string ExecInfo(const ExecConfig& config, const nlohmann::json& cluster);

// The plugin's stdout: an ExecCredential of the stanza's apiVersion with a token or a
// certificate and key in status. kInvalidArgument naming the user and what is wrong.
absl::StatusOr<ExecCredential> ParseExecCredential(absl::string_view stdout_text, const ExecConfig& config,
                                                   absl::string_view user);

// Runs the plugin. A command with a '/' that is not absolute is taken relative to
// `kubeconfig_dir` (the directory of the kubeconfig file, as kubectl resolves it; "" keeps
// it relative to the working directory). kUnavailable with the plugin's stderr (and its
// installHint when it could not be run) when it fails.
absl::StatusOr<ExecCredential> RunExecCredentialPlugin(const ExecConfig& config, const nlohmann::json& cluster,
                                                       absl::string_view user, const std::string& kubeconfig_dir);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_EXEC_CREDENTIAL_H_
