// AgentCaPublisher: hands the CA bundle the agents verify the controller with to each
// job's pods, as the ConfigMap JobCaConfigMapName(job) (key kJobCaKey) in the job's
// namespace, owned by the job. The bundle is the controller's mounted CA file
// (--agent-tls-ca); the ConfigMap is kept equal to it: written when missing or different,
// again whenever the file changes (Refresh), so a rotated CA reaches running agents.
//
// Errors: the CA file's (agent_tls.h ReadAgentCaBundle) or the API server's status;
// kUnavailable when `may_write` says this replica must not write.
// Thread-safe. The client must outlive the publisher.
#ifndef PEREGRINE_CONTROLLER_KUBE_AGENT_CA_CONFIGMAP_H_
#define PEREGRINE_CONTROLLER_KUBE_AGENT_CA_CONFIGMAP_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "controller/core/job_spec.h"
#include "controller/kube/rest_client.h"

namespace peregrine {

// The ConfigMap object holding `ca_bundle` for `job` (labels, ownerReference, data).
nlohmann::json AgentCaConfigMap(const TrainingJob& job, const std::string& ca_bundle);

class AgentCaPublisher {
 public:
  AgentCaPublisher(kube::RestClient* client, std::string ca_file, std::function<bool()> may_write);

  // Makes the job's ConfigMap hold the CA file's current content (creating it, or
  // replacing data of one that differs). A job already published with this content is not
  // read again from the API server.
  absl::Status Publish(const TrainingJob& job);

  // Re-reads the CA file and publishes it to every job of `jobs` whose ConfigMap was
  // written with other content (all of them when the file changed). Returns the first
  // error; the other jobs are still tried.
  absl::Status Refresh(const std::vector<TrainingJob>& jobs);

 private:
  absl::Status PublishContent(const TrainingJob& job, const std::string& bundle);

  kube::RestClient* const client_;
  const std::string ca_file_;
  const std::function<bool()> may_write_;
  absl::Mutex mu_;
  // "<namespace>/<job>" -> (job uid, bundle) last written or seen in the ConfigMap.
  std::map<std::string, std::pair<std::string, std::string>> published_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_KUBE_AGENT_CA_CONFIGMAP_H_
