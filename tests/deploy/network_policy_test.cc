// The chart's NetworkPolicy (helm/peregrine/templates/networkpolicy.yaml) rendered by the
// real helm: which peers reach which controller port. Peers are evaluated the way
// NetworkPolicy does: a peer with podSelector only means pods of the policy's own
// namespace; namespaceSelector {} means every namespace; a label selector's
// matchLabels and matchExpressions (Exists, DoesNotExist, In, NotIn) all must hold.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "tests/deploy/chart_render.h"
#include "tests/deploy/deploy_tools.h"

namespace peregrine {
namespace {

using Labels = std::map<std::string, std::string>;

bool Matches(const YAML::Node& selector, const Labels& labels) {
  for (const auto& kv : selector["matchLabels"]) {
    auto it = labels.find(kv.first.Scalar());
    if (it == labels.end() || it->second != kv.second.Scalar()) return false;
  }
  for (const YAML::Node& e : selector["matchExpressions"]) {
    const std::string op = e["operator"].Scalar();
    auto it = labels.find(e["key"].Scalar());
    const std::vector<std::string> values = Strings(e["values"]);
    const bool in = it != labels.end() && std::find(values.begin(), values.end(), it->second) != values.end();
    if (op == "Exists" && it == labels.end()) return false;
    if (op == "DoesNotExist" && it != labels.end()) return false;
    if (op == "In" && !in) return false;
    if (op == "NotIn" && in) return false;
  }
  return true;
}

struct Peer {
  std::string ns;
  Labels ns_labels;
  Labels pod_labels;
};

// Whether `peer` may reach the controller's named `port` under `policy`.
bool Reaches(const YAML::Node& policy, const Peer& peer, const std::string& port) {
  const std::string policy_ns = policy["metadata"]["namespace"].Scalar();
  for (const YAML::Node& rule : policy["spec"]["ingress"]) {
    bool port_ok = false;
    for (const YAML::Node& p : rule["ports"]) port_ok |= p["port"].Scalar() == port;
    if (!port_ok) continue;
    for (const YAML::Node& from : rule["from"]) {
      const bool ns_ok = from["namespaceSelector"] ? Matches(from["namespaceSelector"], peer.ns_labels)
                                                   : peer.ns == policy_ns;
      const bool pod_ok = !from["podSelector"] || Matches(from["podSelector"], peer.pod_labels);
      if (ns_ok && pod_ok) return true;
    }
  }
  return false;
}

Peer In(const std::string& ns, Labels pods, Labels extra_ns = {}) {
  Labels ns_labels = {{"kubernetes.io/metadata.name", ns}};
  ns_labels.insert(extra_ns.begin(), extra_ns.end());
  return {ns, ns_labels, std::move(pods)};
}

TEST_CASE("the NetworkPolicy opens gRPC to training pods, the API to the namespace, metrics to monitoring", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  const YAML::Node policy = One(objects, "NetworkPolicy");
  CHECK(policy["metadata"]["namespace"].Scalar() == kNamespace);
  CHECK(Strings(policy["spec"]["policyTypes"]) == std::vector<std::string>{"Ingress"});
  // It selects the controller pods, by the Deployment's pod labels.
  const YAML::Node pod = One(objects, "Deployment")["spec"]["template"];
  Labels controller_labels;
  for (const auto& kv : pod["metadata"]["labels"]) controller_labels[kv.first.Scalar()] = kv.second.Scalar();
  CHECK(Matches(policy["spec"]["podSelector"], controller_labels));
  CHECK_FALSE(Matches(policy["spec"]["podSelector"], Labels{{"app", "other"}}));
  // Its named ports are the container's.
  std::vector<std::string> container_ports;
  for (const YAML::Node& p : pod["spec"]["containers"][0]["ports"]) container_ports.push_back(p["name"].Scalar());
  for (const YAML::Node& rule : policy["spec"]["ingress"]) {
    REQUIRE(rule["ports"].size() == 1);
    CHECK(std::find(container_ports.begin(), container_ports.end(), rule["ports"][0]["port"].Scalar()) !=
          container_ports.end());
  }

  const Peer trainer = In("ml-team", {{"peregrine.dev/job", "llm"}, {"peregrine.dev/role", "active"}});
  const Peer standby = In("other-team", {{"peregrine.dev/job", "x"}, {"peregrine.dev/role", "standby"}});
  const Peer stranger = In("ml-team", {{"app", "notebook"}});
  const Peer neighbour = In(kNamespace, {{"app", "ops-shell"}});
  const Peer prometheus = In("monitoring", {{"app", "prometheus"}});
  CHECK(Reaches(policy, trainer, "grpc"));
  CHECK(Reaches(policy, standby, "grpc"));
  CHECK_FALSE(Reaches(policy, stranger, "grpc"));
  CHECK_FALSE(Reaches(policy, prometheus, "grpc"));
  // The API: the release namespace only.
  CHECK(Reaches(policy, neighbour, "http"));
  CHECK_FALSE(Reaches(policy, trainer, "http"));
  CHECK_FALSE(Reaches(policy, stranger, "http"));
  CHECK_FALSE(Reaches(policy, prometheus, "http"));
  // Metrics: the monitoring namespace only.
  CHECK(Reaches(policy, prometheus, "metrics"));
  CHECK_FALSE(Reaches(policy, neighbour, "metrics"));
  CHECK_FALSE(Reaches(policy, trainer, "metrics"));
}

TEST_CASE("NetworkPolicy values: API peers, the monitoring namespace, off", "[integration]") {
  Helm helm;
  const YAML::Node policy = One(
      helm.Render({"--set", "networkPolicy.metricsNamespace=prom", "--set-json",
                   R"(networkPolicy.apiFrom=[{"namespaceSelector":{"matchLabels":{"team":"ml"}}}])"}),
      "NetworkPolicy");
  CHECK(Reaches(policy, In("ml-a", {{"app", "ci"}}, {{"team", "ml"}}), "http"));
  CHECK_FALSE(Reaches(policy, In("web", {{"app", "ci"}}, {{"team", "web"}}), "http"));
  CHECK_FALSE(Reaches(policy, In(kNamespace, {{"app", "ops-shell"}}), "http"));  // apiFrom replaces the default
  CHECK(Reaches(policy, In("prom", {{"app", "prometheus"}}), "metrics"));
  CHECK_FALSE(Reaches(policy, In("monitoring", {{"app", "prometheus"}}), "metrics"));

  CHECK(OfKind(helm.Render({"--set", "networkPolicy.enabled=false"}), "NetworkPolicy").empty());
}

TEST_CASE("NetworkPolicy in namespaced mode: gRPC only from the watched namespaces' training pods", "[integration]") {
  Helm helm;
  const YAML::Node policy =
      One(helm.Render({"--set-json", R"(watchNamespaces=["ml-a","ml-b"])"}), "NetworkPolicy");
  const Labels trainer = {{"peregrine.dev/job", "llm"}, {"peregrine.dev/role", "active"}};
  CHECK(Reaches(policy, In("ml-a", trainer), "grpc"));
  CHECK(Reaches(policy, In("ml-b", trainer), "grpc"));
  CHECK_FALSE(Reaches(policy, In("ml-c", trainer), "grpc"));  // a job the controller does not watch
  CHECK_FALSE(Reaches(policy, In("ml-a", {{"app", "notebook"}}), "grpc"));
  // Cluster-wide mode (no list) keeps every namespace's training pods.
  CHECK(Reaches(One(helm.Render(), "NetworkPolicy"), In("ml-c", trainer), "grpc"));
}

}  // namespace
}  // namespace peregrine
