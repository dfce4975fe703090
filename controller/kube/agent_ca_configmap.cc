#include "controller/kube/agent_ca_configmap.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "controller/agent_tls.h"
#include "controller/kube/json_fields.h"
#include "controller/kube/resources.h"

// How the bundle reaches the agents: BuildPod (pod_builder.cc) mounts this ConfigMap as a
// directory and passes --tls-ca <dir>/ca.crt; the kubelet updates a mounted ConfigMap in
// place, and the agent re-reads the file before every connection attempt, so a CA change
// reaches running agents at their next reconnect without restarting training.
//
// Publish is called when a job's objects are ensured (a new job, a changed spec, a
// controller restart); Refresh runs on the controller's CA watcher every refresh period.
// Both skip the API server when the job was already published with the same bundle (the
// cache is per controller process: a restarted controller reads each ConfigMap once and
// writes only when it differs). The bundle is public, so a ConfigMap is the right home,
// and the controller needs no access to Secrets in the jobs' namespaces for it.

namespace peregrine {

using nlohmann::json;

json AgentCaConfigMap(const TrainingJob& job, const std::string& ca_bundle) {
  return json{{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata",
               {{"name", JobCaConfigMapName(job)},
                {"namespace", job.metadata.namespace_},
                {"labels", {{kJobLabel, job.metadata.name}}},
                {"ownerReferences", json::array({JobOwnerReference(job)})}}},
              {"data", {{kJobCaKey, ca_bundle}}}};
}

AgentCaPublisher::AgentCaPublisher(kube::RestClient* client, std::string ca_file, std::function<bool()> may_write)
    : client_(client), ca_file_(std::move(ca_file)), may_write_(std::move(may_write)) {}

absl::Status AgentCaPublisher::Publish(const TrainingJob& job) {
  absl::StatusOr<std::string> bundle = ReadAgentCaBundle(ca_file_);
  if (!bundle.ok()) return bundle.status();
  return PublishContent(job, *bundle);
}

absl::Status AgentCaPublisher::Refresh(const std::vector<TrainingJob>& jobs) {
  absl::StatusOr<std::string> bundle = ReadAgentCaBundle(ca_file_);
  if (!bundle.ok()) return bundle.status();
  std::set<std::string> keys;
  absl::Status first;
  for (const TrainingJob& job : jobs) {
    keys.insert(absl::StrCat(job.metadata.namespace_, "/", job.metadata.name));
    if (absl::Status s = PublishContent(job, *bundle); !s.ok() && first.ok()) first = s;
  }
  absl::MutexLock lock(&mu_);
  for (auto it = published_.begin(); it != published_.end();) {
    it = keys.count(it->first) == 0 ? published_.erase(it) : std::next(it);
  }
  return first;
}

absl::Status AgentCaPublisher::PublishContent(const TrainingJob& job, const std::string& bundle) {
  const std::string key = absl::StrCat(job.metadata.namespace_, "/", job.metadata.name);
  {
    absl::MutexLock lock(&mu_);
    auto it = published_.find(key);
    if (it != published_.end() && it->second == std::make_pair(job.metadata.uid, bundle)) return absl::OkStatus();
  }
  const kube::ResourcePath path = ConfigMapsPath(job.metadata.namespace_);
  const std::string name = JobCaConfigMapName(job);
  auto may_write = [&]() -> absl::Status {
    if (may_write_ && !may_write_()) {
      return absl::UnavailableError(
          absl::StrCat("write configmap ", key, ": this replica does not hold the leader lease"));
    }
    return absl::OkStatus();
  };
  absl::StatusOr<json> existing = client_->Get(path, name);
  if (absl::IsNotFound(existing.status())) {
    if (absl::Status s = may_write(); !s.ok()) return s;
    existing = client_->Create(path, AgentCaConfigMap(job, bundle));
    if (absl::IsAlreadyExists(existing.status())) existing = client_->Get(path, name);
  }
  if (!existing.ok()) return existing.status();
  if (kube::Str(existing->value("data", json::object()), kJobCaKey) != bundle) {
    if (absl::Status s = may_write(); !s.ok()) return s;
    auto written = kube::UpdateWithRetryOnConflict(*client_, path, name, /*status_subresource=*/false,
                                                   [&](json& object) -> absl::Status {
                                                     object["data"][kJobCaKey] = bundle;
                                                     return may_write();
                                                   });
    if (!written.ok()) return written.status();
  }
  absl::MutexLock lock(&mu_);
  published_[key] = {job.metadata.uid, bundle};
  return absl::OkStatus();
}

}  // namespace peregrine
