// The user's Kubernetes bearer token for a Kubernetes-mode controller's API, taken from
// the kubeconfig the way kubectl sees it: `kubectl config view --raw --minify -o json`
// (the current or given context, $KUBECONFIG merging and relative paths resolved by
// kubectl itself, so peregrinectl reads no YAML), then that context's user: `token`, or
// the first line of `tokenFile`. exec and auth-provider credential plugins are not run
// (kUnimplemented, naming the user: pass --token or --token-file); a user with neither
// is kNotFound (client certificates are not sent to the controller).
//
// KubeconfigUserToken is pure; KubeconfigToken runs kubectl (kUnavailable when it cannot,
// with its stderr) and reads the token file. Thread-compatible.
#ifndef PEREGRINE_CLI_KUBE_CREDENTIALS_H_
#define PEREGRINE_CLI_KUBE_CREDENTIALS_H_

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace peregrine {

// Where the token is: exactly one of the two is set.
struct KubeTokenSource {
  std::string token;
  std::string token_file;
};

// From the JSON of `kubectl config view --raw --minify -o json`.
absl::StatusOr<KubeTokenSource> KubeconfigUserToken(const nlohmann::json& minified);

// kubeconfig "" = kubectl's default ($KUBECONFIG, ~/.kube/config); context "" = current.
absl::StatusOr<std::string> KubeconfigToken(const std::string& kubeconfig, const std::string& context);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_KUBE_CREDENTIALS_H_
