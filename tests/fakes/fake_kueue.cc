#include "tests/fakes/fake_kueue.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace peregrine::testing {
namespace {

using nlohmann::json;

std::string Now() { return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone()); }

void SetCondition(json& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message) {
  json& conds = status["conditions"];
  if (!conds.is_array()) conds = json::array();
  const std::string s = value ? "True" : "False";
  for (json& c : conds) {
    if (c.value("type", "") != type) continue;
    if (c.value("status", "") != s) c["lastTransitionTime"] = Now();
    c["status"] = s;
    c["reason"] = reason;
    c["message"] = message;
    return;
  }
  conds.push_back({{"type", type}, {"status", s}, {"reason", reason}, {"message", message}, {"lastTransitionTime", Now()}});
}

bool HasCondition(const json& status, const std::string& type) {
  for (const json& c : status.value("conditions", json::array())) {
    if (c.value("type", "") == type) return true;
  }
  return false;
}

}  // namespace

void ServeKueue(FakeKubeApiServer& server) {
  KubeResourceType workloads;
  workloads.group = "kueue.x-k8s.io";
  workloads.version = "v1beta1";
  workloads.plural = "workloads";
  workloads.kind = "Workload";
  workloads.namespaced = true;
  workloads.status_subresource = true;
  workloads.custom_resource = true;
  server.RegisterResource(workloads);
  KubeResourceType flavors;
  flavors.group = "kueue.x-k8s.io";
  flavors.version = "v1beta1";
  flavors.plural = "resourceflavors";
  flavors.kind = "ResourceFlavor";
  flavors.namespaced = false;
  flavors.custom_resource = true;
  server.RegisterResource(flavors);
}

absl::StatusOr<json> CreateResourceFlavor(FakeKubeApiServer& server, const std::string& name,
                                          const std::map<std::string, std::string>& node_labels,
                                          const std::vector<json>& tolerations) {
  json spec = json::object();
  if (!node_labels.empty()) spec["nodeLabels"] = node_labels;
  if (!tolerations.empty()) spec["tolerations"] = tolerations;
  return server.CreateForTest(kFakeResourceFlavors, "",
                              json{{"apiVersion", "kueue.x-k8s.io/v1beta1"},
                                   {"kind", "ResourceFlavor"},
                                   {"metadata", {{"name", name}}},
                                   {"spec", spec}});
}

absl::Status AdmitWorkload(FakeKubeApiServer& server, const std::string& ns, const std::string& name,
                           const std::string& cluster_queue, const std::string& flavor) {
  auto workload = server.GetForTest(kFakeWorkloads, ns, name);
  if (!workload.ok()) return workload.status();
  json assignments = json::array();
  for (const json& ps : (*workload)["spec"].value("podSets", json::array())) {
    // One flavor for every resource the pod set's containers request or limit.
    std::set<std::string> resources;
    for (const json& c : ps["template"]["spec"].value("containers", json::array())) {
      const json res = c.value("resources", json::object());
      for (const char* kind : {"requests", "limits"}) {
        const json list = res.value(kind, json::object());
        for (const auto& [r, q] : list.items()) resources.insert(r);
      }
    }
    json flavors = json::object();
    for (const std::string& r : resources) flavors[r] = flavor;
    assignments.push_back({{"name", ps.value("name", "main")}, {"flavors", flavors}, {"count", ps.value("count", 1)}});
  }
  return server.MutateStatusForTest(kFakeWorkloads, ns, name, [&](json& status) {
    if (!status.is_object()) status = json::object();
    status["admission"] = {{"clusterQueue", cluster_queue}, {"podSetAssignments", assignments}};
    SetCondition(status, "QuotaReserved", true, "QuotaReserved", absl::StrCat("Quota reserved in ClusterQueue ", cluster_queue));
    SetCondition(status, "Admitted", true, "Admitted", "The workload is admitted");
    if (HasCondition(status, "Evicted")) SetCondition(status, "Evicted", false, "QuotaReserved", "Previously: evicted");
  });
}

absl::Status EvictWorkload(FakeKubeApiServer& server, const std::string& ns, const std::string& name,
                           const std::string& reason, const std::string& message) {
  return server.MutateStatusForTest(kFakeWorkloads, ns, name, [&](json& status) {
    if (!status.is_object()) status = json::object();
    SetCondition(status, "Evicted", true, reason, message);
    if (reason == "Preempted") SetCondition(status, "Preempted", true, "InClusterQueue", message);
  });
}

}  // namespace peregrine::testing
