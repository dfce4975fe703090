// KubeJobClient: peregrinectl's Kubernetes backend. Reads and patches TrainingJobs
// (peregrine.dev/v1alpha1) and lists the core/v1 Events about one, through the API server
// with the kubeconfig user's credentials (KubeEndpoint: bearer token and/or client
// certificate, the cluster's CA or insecure-skip-tls-verify).
//
// Why not controller/kube/rest_client.h: the dependency rule keeps cli/ off controller/
// (peregrinectl links no gRPC, Prometheus or yaml-cpp, which controller_kube pulls in);
// this is the few requests the tool makes, on the same cpp-httplib, and the kubeconfig is
// read by kubectl itself (cli/kube_credentials.h), so no YAML is parsed here.
//
// Errors are for people: each names the verb, the resource, the namespace and what to do:
//   401 -> kUnauthenticated (the server refused the kubeconfig user's credentials);
//   403 -> kPermissionDenied (and the `kubectl auth can-i` command to check);
//   404 -> kNotFound ("TrainingJob NAME not found in namespace NS", or the API server
//          serves no TrainingJobs: Peregrine's CRD is not installed);
//   no answer (refused, timeout, TLS failure) -> kUnavailable naming the server;
//   400/422 -> kInvalidArgument; anything else -> kInternal; all with the server's message.
//
// Thread-compatible: one request at a time. Owns its HTTP connection.
#ifndef PEREGRINE_CLI_KUBE_JOB_CLIENT_H_
#define PEREGRINE_CLI_KUBE_JOB_CLIENT_H_

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "cli/kube_credentials.h"

namespace peregrine {

class KubeJobClient {
 public:
  // kInvalidArgument when the server URL or the TLS material (CA, certificate, key) is
  // unusable, naming the kubeconfig context.
  static absl::StatusOr<std::unique_ptr<KubeJobClient>> Create(const KubeEndpoint& endpoint);
  ~KubeJobClient();
  KubeJobClient(const KubeJobClient&) = delete;
  KubeJobClient& operator=(const KubeJobClient&) = delete;

  // The TrainingJob object (metadata, spec, status).
  absl::StatusOr<nlohmann::json> GetJob(const std::string& ns, const std::string& name);
  // A JSON merge patch (RFC 7386) of the TrainingJob; returns the patched object.
  absl::StatusOr<nlohmann::json> MergePatchJob(const std::string& ns, const std::string& name,
                                               const nlohmann::json& patch);
  // The core/v1 Events whose involvedObject is TrainingJob `name` in `ns` (every page).
  absl::StatusOr<nlohmann::json> ListJobEvents(const std::string& ns, const std::string& name);

 private:
  class Impl;
  explicit KubeJobClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine

#endif  // PEREGRINE_CLI_KUBE_JOB_CLIENT_H_
