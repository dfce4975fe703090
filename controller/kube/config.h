// Where the Kubernetes API server is and how to authenticate to it, loaded from a
// kubeconfig file (current context or a named one) or from the in-cluster service
// account. This file translates those formats into the plain Config struct; nothing
// else in the controller reads them.
//
// Contract: every loader returns a Config whose `server` is an absolute http(s) URL, or
// an error naming the file and the field that is wrong or missing (kInvalidArgument for
// bad content, kNotFound for a missing file). Certificate and key material is returned
// as PEM text, whether the file referenced it by path or embedded it (-data fields).
// Credential plugins (exec, auth-provider) are rejected with kUnimplemented.
//
// Thread safety: the functions are reentrant; they read files and the environment only.
#ifndef PEREGRINE_CONTROLLER_KUBE_CONFIG_H_
#define PEREGRINE_CONTROLLER_KUBE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine::kube {

struct Config {
  std::string server;                  // "https://10.0.0.1:443"
  std::string ca_pem;                  // empty: the system trust store
  bool insecure_skip_tls_verify = false;
  std::string bearer_token;            // sent as "Authorization: Bearer ..."
  std::string bearer_token_file;       // re-read periodically (projected tokens rotate)
  std::string client_certificate_pem;  // client TLS authentication, with the key below
  std::string client_key_pem;
  std::string default_namespace = "default";
  std::string source;  // where this came from, for error messages ("kubeconfig /x, context y")
};

// Parses kubeconfig YAML text. `source_name` names it in errors; relative file paths in
// it are resolved against `base_dir`. `context_name` empty means current-context.
absl::StatusOr<Config> ParseKubeconfig(absl::string_view yaml_text, absl::string_view source_name,
                                       absl::string_view base_dir,
                                       absl::string_view context_name = "");

// Reads and parses the kubeconfig file at `path`.
absl::StatusOr<Config> LoadKubeconfigFile(const std::string& path,
                                          absl::string_view context_name = "");

// The in-cluster configuration: token, ca.crt and namespace under `service_account_dir`
// (normally /var/run/secrets/kubernetes.io/serviceaccount), server from
// KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT as passed in.
absl::StatusOr<Config> LoadInClusterConfig(absl::string_view service_account_dir,
                                           absl::string_view service_host,
                                           absl::string_view service_port);

// The usual order: $KUBECONFIG (first entry), then in-cluster (when
// KUBERNETES_SERVICE_HOST is set), then $HOME/.kube/config.
absl::StatusOr<Config> LoadDefaultConfig();

inline constexpr absl::string_view kServiceAccountDir =
    "/var/run/secrets/kubernetes.io/serviceaccount";

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_CONFIG_H_
