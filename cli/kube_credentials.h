// The user's Kubernetes bearer token for a Kubernetes-mode controller's API, taken from
// the kubeconfig the way kubectl sees it: `kubectl config view --raw --minify -o json`
// (the current or given context, $KUBECONFIG merging and relative paths resolved by
// kubectl itself, so peregrinectl reads no YAML), then that context's user: `token`, the
// first line of `tokenFile`, or the token its exec credential plugin returns (run as
// kubectl runs it: cli/exec_credential.h). Legacy auth-provider plugins are not run
// (kUnimplemented, naming the user: pass --token or --token-file); a user with none of
// these is kNotFound (client certificates are not sent to the controller).
//
// The same view also gives everything needed to talk to the API server itself
// (KubeEndpoint: server, CA, client certificate and key, token, insecure-skip-tls-verify,
// the context's namespace), read with --flatten so certificate files come embedded.
//
// KubeconfigUserToken and KubeEndpointFromView are pure; KubeconfigToken and
// LoadKubeEndpoint run kubectl (kUnavailable when it cannot, with its stderr) and read
// the token file. Thread-compatible.
#ifndef PEREGRINE_CLI_KUBE_CREDENTIALS_H_
#define PEREGRINE_CLI_KUBE_CREDENTIALS_H_

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cli/exec_credential.h"

namespace peregrine {

// Where the token is: exactly one of the three is set.
struct KubeTokenSource {
  std::string token;
  std::string token_file;
  std::optional<ExecConfig> exec;  // run the plugin for it
};

// From the JSON of `kubectl config view --raw --minify -o json`.
absl::StatusOr<KubeTokenSource> KubeconfigUserToken(const nlohmann::json& minified);

// kubeconfig "" = kubectl's default ($KUBECONFIG, ~/.kube/config); context "" = current.
absl::StatusOr<std::string> KubeconfigToken(const std::string& kubeconfig, const std::string& context);

// How to reach the API server as the kubeconfig's user (the minified context).
struct KubeEndpoint {
  std::string server;          // "https://10.0.0.1:6443" (may carry a path prefix)
  std::string ca_pem;          // empty: the system trust store
  bool insecure_skip_tls_verify = false;
  std::string client_certificate_pem;  // with client_key_pem: client TLS authentication
  std::string client_key_pem;
  std::string token;       // bearer token (from token, tokenFile's first line or the plugin)
  std::optional<ExecConfig> exec;  // the user's exec credential plugin (run by LoadKubeEndpoint)
  std::string namespace_;  // the context's namespace, "default" when it names none
  std::string context;     // the context's name, for messages
  std::string user;        // the user's name, for messages
};

// From the JSON of `kubectl config view --raw --minify --flatten -o json`. Errors
// (kInvalidArgument) name the context, cluster or user and the field: no server, base64
// that does not decode, a certificate without its key, an exec stanza that is not valid.
// An exec plugin is returned in `exec`, not run; auth-provider is kUnimplemented (as
// KubeconfigUserToken); a user with no credentials at all is allowed (anonymous
// requests). A tokenFile is returned as `token_file` for the caller to read.
absl::StatusOr<KubeEndpoint> KubeEndpointFromView(const nlohmann::json& minified, std::string* token_file);

// Runs kubectl config view (kubeconfig "" = $KUBECONFIG or ~/.kube/config; context "" =
// current), reads the tokenFile or runs the exec plugin, if any (its token, or its client
// certificate and key, replace the kubeconfig's). kUnavailable with kubectl's message when
// the kubeconfig cannot be read (missing file, no current context, unknown context), or
// with the plugin's when it fails.
absl::StatusOr<KubeEndpoint> LoadKubeEndpoint(const std::string& kubeconfig, const std::string& context);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_KUBE_CREDENTIALS_H_
