#include "controller/kube/resources.h"

#include "absl/strings/str_cat.h"

namespace peregrine {

kube::ResourcePath TrainingJobsPath(const std::string& ns) {
  return kube::ResourcePath{"peregrine.dev", "v1alpha1", "trainingjobs", ns};
}
kube::ResourcePath PodsPath(const std::string& ns) { return kube::ResourcePath{"", "v1", "pods", ns}; }
kube::ResourcePath NodesPath() { return kube::ResourcePath{"", "v1", "nodes", ""}; }
kube::ResourcePath ServicesPath(const std::string& ns) { return kube::ResourcePath{"", "v1", "services", ns}; }
kube::ResourcePath ConfigMapsPath(const std::string& ns) { return kube::ResourcePath{"", "v1", "configmaps", ns}; }

std::vector<std::string> PodJobIndex(const nlohmann::json& pod) {
  const auto meta = pod.find("metadata");
  if (meta == pod.end() || !meta->is_object()) return {};
  const auto labels = meta->find("labels");
  if (labels == meta->end() || !labels->is_object()) return {};
  const auto job = labels->find(kJobLabel);
  if (job == labels->end() || !job->is_string() || job->get<std::string>().empty()) return {};
  const auto ns = meta->find("namespace");
  return {absl::StrCat(ns != meta->end() && ns->is_string() ? ns->get<std::string>() : "", "/",
                       job->get<std::string>())};
}

nlohmann::json JobOwnerReference(const TrainingJob& job) {
  return nlohmann::json{{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"},
                        {"name", job.metadata.name},           {"uid", job.metadata.uid},
                        {"controller", true},                  {"blockOwnerDeletion", true}};
}

std::string JobServiceName(const TrainingJob& job) { return job.metadata.name; }

std::string JobCaConfigMapName(const TrainingJob& job) { return absl::StrCat(job.metadata.name, "-peregrine-ca"); }

}  // namespace peregrine
