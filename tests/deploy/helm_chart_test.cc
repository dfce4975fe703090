// helm/peregrine with the real helm (v3.17, .tools/bin/helm from
// scripts/install-tools.sh): `helm lint --strict`, then `helm template` rendered
// objects checked one by one: kinds, replicas and leader election, the RBAC rules of
// both modes (cluster-wide and watchNamespaces) against an explicit allow-list, probes,
// security context, Services, PDB, and the optional ServiceMonitor / PrometheusRule. The rendered controller flags go through the controller's own
// ParseKubeMainFlags, so a flag it does not accept fails here and not in a crash loop.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "controller/kube/kube_command.h"
#include "controller/kube/kube_mode.h"
#include "tests/deploy/chart_render.h"
#include "tests/deploy/deploy_tools.h"

namespace peregrine {
namespace {

// (apiGroup, resource) -> sorted verbs.
using RuleSet = std::map<std::pair<std::string, std::string>, std::vector<std::string>>;

RuleSet RulesOf(const YAML::Node& role) {
  RuleSet rules;
  for (const YAML::Node& rule : role["rules"]) {
    std::vector<std::string> verbs = Strings(rule["verbs"]);
    std::sort(verbs.begin(), verbs.end());
    for (const YAML::Node& group : rule["apiGroups"]) {
      for (const YAML::Node& resource : rule["resources"]) {
        auto& v = rules[{group.Scalar(), resource.Scalar()}];
        v.insert(v.end(), verbs.begin(), verbs.end());
        std::sort(v.begin(), v.end());
      }
    }
  }
  return rules;
}

TEST_CASE("helm lint --strict passes on the chart", "[integration]") {
  Helm helm;
  const ProcessResult r = helm.Lint();
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("1 chart(s) linted, 0 chart(s) failed"));
}

TEST_CASE("helm template renders the default objects", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  std::multiset<std::string> kinds;
  for (const YAML::Node& o : objects) kinds.insert(o["kind"].Scalar());
  CHECK(kinds == std::multiset<std::string>{"CustomResourceDefinition", "ServiceAccount", "ClusterRole",
                                            "ClusterRoleBinding", "Role", "RoleBinding", "Role", "RoleBinding", "Service", "Service",
                                            "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy",
                                            "Secret", "Secret"});
  // The chart ships the same CRD as crds/.
  const YAML::Node crd = One(objects, "CustomResourceDefinition");
  const YAML::Node source = YAML::LoadFile((SourceDir() / "crds/peregrine.dev_trainingjobs.yaml").string());
  CHECK(YAML::Dump(crd) == YAML::Dump(source));
  // Namespaced objects land in the release namespace.
  for (const YAML::Node& o : objects) {
    const std::string kind = o["kind"].Scalar();
    if (kind == "CustomResourceDefinition" || kind == "ClusterRole" || kind == "ClusterRoleBinding") continue;
    INFO(kind << " " << o["metadata"]["name"].Scalar());
    CHECK(o["metadata"]["namespace"].Scalar() == kNamespace);
  }
}

TEST_CASE("the controller Deployment: replicas, flags, probes, security", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  const YAML::Node deploy = One(objects, "Deployment");
  CHECK(deploy["spec"]["replicas"].as<int>() == 2);
  const YAML::Node pod = deploy["spec"]["template"];
  CHECK(Selects(deploy["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]));
  REQUIRE(pod["spec"]["containers"].size() == 1);
  const YAML::Node c = pod["spec"]["containers"][0];
  CHECK(c["image"].Scalar() == "ghcr.io/peregrine-dev/peregrine-controller:" + AppVersion());
  CHECK(c["imagePullPolicy"].Scalar() == "IfNotPresent");
  CHECK(Strings(c["command"]) == std::vector<std::string>{"peregrine-controller"});
  CHECK(Strings(c["args"]) ==
        std::vector<std::string>{"--leader-elect", "--lease-namespace", kNamespace, "--lease-name",
                                 "peregrine-controller", "--grpc-port", "7400",
                                 "--http-port", "7401", "--metrics-port", "7402", "--agent-image",
                                 "ghcr.io/peregrine-dev/peregrine-agent:" + AppVersion(),
                                 "--node-health-sweep-image", "ghcr.io/peregrine-dev/peregrine-agent:" + AppVersion(),
                                 "--node-health-sweep-namespace", kNamespace, "--controller-address",
                                 std::string("peregrine-grpc.") + kNamespace + ".svc:7400", "--agent-key-file",
                                 "/var/run/peregrine/agent-key/key", "--agent-tls-cert",
                                 "/var/run/peregrine/agent-tls/tls.crt", "--agent-tls-key",
                                 "/var/run/peregrine/agent-tls/tls.key", "--agent-tls-ca",
                                 "/var/run/peregrine/agent-tls/ca.crt", "--log-level", "info"});
  // Every rendered flag is one the controller accepts, with the values meant.
  const KubeMainOptions flags = ParseControllerArgs(c);
  CHECK(flags.mode.leader_elect);
  CHECK(flags.mode.lease_namespace == kNamespace);
  CHECK(flags.mode.grpc_port == 7400);
  CHECK(flags.mode.http_port == 7401);
  CHECK(flags.mode.metrics_port == 7402);
  CHECK(flags.mode.api_audiences.empty());
  CHECK(flags.mode.agent_image == "ghcr.io/peregrine-dev/peregrine-agent:" + AppVersion());
  CHECK(flags.mode.controller_address == std::string("peregrine-grpc.") + kNamespace + ".svc:7400");
  CHECK(flags.log_level == "info");
  // The agent key: a Secret of 64 hex characters, mounted read-only into the controller.
  CHECK(flags.mode.agent_key_file == "/var/run/peregrine/agent-key/key");
  std::string key;
  for (const YAML::Node& o : objects) {
    if (o["kind"].Scalar() == "Secret" && o["metadata"]["name"].Scalar() == "peregrine-agent-key") {
      REQUIRE(absl::Base64Unescape(o["data"]["key"].Scalar(), &key));
    }
  }
  CHECK(key.size() == 64);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  bool key_mounted = false;
  for (const YAML::Node& m : c["volumeMounts"]) {
    if (m["name"].Scalar() == "agent-key") {
      key_mounted = m["mountPath"].Scalar() == "/var/run/peregrine/agent-key" && m["readOnly"].as<bool>();
    }
  }
  CHECK(key_mounted);
  // The downward API gives the leader-election identity and the pod the leader labels.
  std::map<std::string, std::string> field_refs;
  for (const YAML::Node& e : c["env"]) {
    if (e["valueFrom"]["fieldRef"]) field_refs[e["name"].Scalar()] = e["valueFrom"]["fieldRef"]["fieldPath"].Scalar();
  }
  CHECK(field_refs == std::map<std::string, std::string>{{"POD_NAME", "metadata.name"},
                                                         {"POD_NAMESPACE", "metadata.namespace"}});
  std::map<std::string, int> ports;
  for (const YAML::Node& p : c["ports"]) ports[p["name"].Scalar()] = p["containerPort"].as<int>();
  CHECK(ports == std::map<std::string, int>{{"grpc", 7400}, {"http", 7401}, {"metrics", 7402}});
  for (const char* probe : {"livenessProbe", "readinessProbe"}) {
    INFO(probe);
    CHECK(c[probe]["httpGet"]["path"].Scalar() == "/healthz");
    CHECK(c[probe]["httpGet"]["port"].Scalar() == "metrics");  // not the API port
  }
  const YAML::Node sc = c["securityContext"];
  CHECK(sc["runAsNonRoot"].as<bool>());
  CHECK(sc["readOnlyRootFilesystem"].as<bool>());
  CHECK(!sc["allowPrivilegeEscalation"].as<bool>());
  CHECK(Strings(sc["capabilities"]["drop"]) == std::vector<std::string>{"ALL"});
  CHECK(!sc["capabilities"]["add"]);
  CHECK(pod["spec"]["securityContext"]["runAsNonRoot"].as<bool>());
  CHECK(pod["spec"]["securityContext"]["runAsUser"].as<int>() != 0);
  CHECK(pod["spec"]["serviceAccountName"].Scalar() == One(objects, "ServiceAccount")["metadata"]["name"].Scalar());

  const YAML::Node pdb = One(objects, "PodDisruptionBudget");
  CHECK(pdb["spec"]["minAvailable"].as<int>() == 1);
  CHECK(Selects(pdb["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"]));
}

// Every Role and ClusterRole the chart renders, by (kind, namespace, name).
using Grants = std::map<std::tuple<std::string, std::string, std::string>, RuleSet>;

Grants GrantsOf(const std::vector<YAML::Node>& objects) {
  Grants grants;
  for (const char* kind : {"ClusterRole", "Role"}) {
    for (const YAML::Node& r : OfKind(objects, kind)) {
      const std::string ns = r["metadata"]["namespace"] ? r["metadata"]["namespace"].Scalar() : "";
      grants[{kind, ns, r["metadata"]["name"].Scalar()}] = RulesOf(r);
    }
  }
  return grants;
}

RuleSet Union(RuleSet a, const RuleSet& b) {
  a.insert(b.begin(), b.end());
  return a;
}

using V = std::vector<std::string>;
// The allow-list: every verb the controller's own REST calls need, and nothing else.
// The jobs and what the controller makes for them (a ClusterRole cluster-wide, a Role in
// each watched namespace in namespaced mode).
const RuleSet kJobRules = {
    // Informer (list, watch); finalizers: Get, then PUT of the object (update).
    {{"peregrine.dev", "trainingjobs"}, V{"get", "list", "update", "watch"}},
    // Status: Get of the object, then PUT of the status subresource.
    {{"peregrine.dev", "trainingjobs/status"}, V{"update"}},
    // Children with ownerReferences.blockOwnerDeletion (OwnerReferencesPermissionEnforcement).
    {{"peregrine.dev", "trainingjobs/finalizers"}, V{"update"}},
    // Informer, Create, Delete (never Get: the informer's cache answers).
    {{"", "pods"}, V{"create", "delete", "list", "watch"}},
    // The rendezvous Service: Get, Create when missing. No Secrets (agents have
    // per-pod credentials, docs/security.md).
    {{"", "services"}, V{"create", "get"}},
    // Each job's CA ConfigMap (agent TLS): Get, Create when missing, Update on a new CA.
    {{"", "configmaps"}, V{"create", "get", "update"}},
    // kube::EventRecorder: core v1 Events, Create and MergePatch (aggregation).
    {{"", "events"}, V{"create", "patch"}},
    // Kueue (controller/kube/kueue_gate.h): the job's Workload: Get, Create when missing,
    // Delete when its pod sets changed; its status: PUT (quota released, Finished).
    {{"kueue.x-k8s.io", "workloads"}, V{"create", "delete", "get"}},
    {{"kueue.x-k8s.io", "workloads/status"}, V{"update"}},
};
// Cluster-scoped, so a ClusterRole in both modes.
const RuleSet kClusterScopedRules = {
    // Informer; node health: Get before each change, MergePatch of record, cordon, taint.
    {{"", "nodes"}, V{"get", "list", "patch", "watch"}},
    // The HTTP API's callers: TokenReview and SubjectAccessReview (kube/api_reviews.h).
    {{"authentication.k8s.io", "tokenreviews"}, V{"create"}},
    {{"authorization.k8s.io", "subjectaccessreviews"}, V{"create"}},
    // Kueue: the admitted ResourceFlavors (node labels, tolerations) and the value of a
    // queued job's PriorityClass: Get.
    {{"kueue.x-k8s.io", "resourceflavors"}, V{"get"}},
    {{"scheduling.k8s.io", "priorityclasses"}, V{"get"}},
};
// Leases and the leader label on the controller's own pod (a MergePatch), in the release
// namespace only.
const RuleSet kLeaderRules = {{{"coordination.k8s.io", "leases"}, V{"create", "get", "update"}},
                              {{"", "pods"}, V{"patch"}}};
// Node health sweeps in the release namespace: the sweep Jobs and a list of their pods.
const RuleSet kNodeHealthRules = {{{"batch", "jobs"}, V{"create", "delete", "get"}}, {{"", "pods"}, V{"list"}}};

// What holds in every rendering: no wildcard and no secrets in any rule, no
// resourceNames or nonResourceURLs, and each role bound (once, by a binding of the same
// kind, name and namespace) to the controller's ServiceAccount only.
void CheckRolesAndBindings(const std::vector<YAML::Node>& objects) {
  const std::string sa = One(objects, "ServiceAccount")["metadata"]["name"].Scalar();
  for (const auto& [kind, binding_kind] :
       {std::pair<std::string, std::string>{"ClusterRole", "ClusterRoleBinding"}, {"Role", "RoleBinding"}}) {
    const std::vector<YAML::Node> bindings = OfKind(objects, binding_kind);
    CHECK(bindings.size() == OfKind(objects, kind).size());
    for (const YAML::Node& r : OfKind(objects, kind)) {
      const std::string name = r["metadata"]["name"].Scalar();
      const std::string ns = r["metadata"]["namespace"] ? r["metadata"]["namespace"].Scalar() : "";
      INFO(kind << " " << ns << "/" << name);
      for (const YAML::Node& rule : r["rules"]) {
        for (const char* field : {"apiGroups", "resources", "verbs"}) {
          for (const std::string& v : Strings(rule[field])) CHECK(v != "*");
        }
        for (const std::string& resource : Strings(rule["resources"])) CHECK(resource.rfind("secrets", 0) != 0);
        CHECK_FALSE(rule["resourceNames"]);
        CHECK_FALSE(rule["nonResourceURLs"]);
      }
      int bound = 0;
      for (const YAML::Node& b : bindings) {
        const std::string bns = b["metadata"]["namespace"] ? b["metadata"]["namespace"].Scalar() : "";
        if (b["roleRef"]["name"].Scalar() != name || bns != ns) continue;
        ++bound;
        CHECK(b["roleRef"]["kind"].Scalar() == kind);
        REQUIRE(b["subjects"].size() == 1);
        CHECK(b["subjects"][0]["kind"].Scalar() == "ServiceAccount");
        CHECK(b["subjects"][0]["name"].Scalar() == sa);
        CHECK(b["subjects"][0]["namespace"].Scalar() == kNamespace);
      }
      CHECK(bound == 1);
    }
  }
}

TEST_CASE("RBAC cluster-wide: exactly the allow-listed rules, one ClusterRole and the leader Role", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  CHECK(GrantsOf(objects) == Grants{{{"ClusterRole", "", "peregrine"}, Union(kJobRules, kClusterScopedRules)},
                                    {{"Role", kNamespace, "peregrine-leader-election"}, kLeaderRules},
                                    {{"Role", kNamespace, "peregrine-node-health"}, kNodeHealthRules}});
  CheckRolesAndBindings(objects);
  CHECK(ParseControllerArgs(One(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0])
            .mode.watch_namespaces.empty());
}

TEST_CASE("RBAC namespaced: a Role per watched namespace and a ClusterRole for cluster-scoped resources only", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render({"--set", "watchNamespaces={team-b,team-a,team-b}"});
  CHECK(GrantsOf(objects) == Grants{{{"ClusterRole", "", "peregrine"}, kClusterScopedRules},
                                    {{"Role", "team-a", "peregrine-jobs"}, kJobRules},
                                    {{"Role", "team-b", "peregrine-jobs"}, kJobRules},
                                    {{"Role", kNamespace, "peregrine-leader-election"}, kLeaderRules},
                                    {{"Role", kNamespace, "peregrine-node-health"}, kNodeHealthRules}});
  CheckRolesAndBindings(objects);
  // The controller watches exactly those namespaces (through its own flag parser).
  const KubeMainOptions flags =
      ParseControllerArgs(One(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]);
  CHECK(*WatchedNamespaces(flags.mode) == std::vector<std::string>{"team-a", "team-b"});

  // The release's own namespace among them: its job Role sits beside the leader Role.
  const std::vector<YAML::Node> with_own =
      helm.Render({"--set", std::string("watchNamespaces={") + kNamespace + ",team-a}"});
  CHECK(GrantsOf(with_own) == Grants{{{"ClusterRole", "", "peregrine"}, kClusterScopedRules},
                                     {{"Role", kNamespace, "peregrine-jobs"}, kJobRules},
                                     {{"Role", "team-a", "peregrine-jobs"}, kJobRules},
                                     {{"Role", kNamespace, "peregrine-leader-election"}, kLeaderRules},
                                    {{"Role", kNamespace, "peregrine-node-health"}, kNodeHealthRules}});
  CheckRolesAndBindings(with_own);

  // A name that is not a namespace is refused at render time.
  const ProcessResult bad = helm.Template({"--set", "watchNamespaces={team-a,Team_B}"});
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.err, Catch::Contains("watchNamespaces: \"Team_B\" is not a namespace name"));
}

TEST_CASE("Services expose the agents' gRPC, the API and the metrics ports", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  const YAML::Node pod_labels = One(objects, "Deployment")["spec"]["template"]["metadata"]["labels"];

  const YAML::Node grpc = ServiceNamed(objects, "-grpc");
  REQUIRE(grpc["spec"]["ports"].size() == 1);
  CHECK(grpc["spec"]["ports"][0]["port"].as<int>() == 7400);
  CHECK(grpc["spec"]["ports"][0]["targetPort"].Scalar() == "grpc");
  CHECK(grpc["spec"]["ports"][0]["appProtocol"].Scalar() == "grpc");
  // Agents reach the leader only: the elected controller labels its own pod.
  CHECK(grpc["spec"]["selector"]["peregrine.dev/leader"].Scalar() == "true");
  YAML::Node leader_labels = YAML::Clone(pod_labels);
  leader_labels["peregrine.dev/leader"] = "true";
  CHECK(Selects(grpc["spec"]["selector"], leader_labels));
  CHECK_FALSE(Selects(grpc["spec"]["selector"], pod_labels));

  const YAML::Node metrics = ServiceNamed(objects, "-metrics");
  REQUIRE(metrics["spec"]["ports"].size() == 1);
  CHECK(metrics["spec"]["ports"][0]["name"].Scalar() == "http-metrics");
  CHECK(metrics["spec"]["ports"][0]["port"].as<int>() == 7402);
  CHECK(metrics["spec"]["ports"][0]["targetPort"].Scalar() == "metrics");
  CHECK(Selects(metrics["spec"]["selector"], pod_labels));

  const YAML::Node api = ServiceNamed(objects, "-api");
  REQUIRE(api["spec"]["ports"].size() == 1);
  CHECK(api["spec"]["ports"][0]["port"].as<int>() == 7401);
  CHECK(api["spec"]["ports"][0]["targetPort"].Scalar() == "http");
  CHECK(Selects(api["spec"]["selector"], pod_labels));

  // With leaderOnly off, the gRPC Service spans every replica.
  const std::vector<YAML::Node> all = helm.Render({"--set", "grpcService.leaderOnly=false"});
  CHECK(Selects(ServiceNamed(all, "-grpc")["spec"]["selector"], pod_labels));
}

TEST_CASE("ServiceMonitor and PrometheusRule exist only when enabled", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> plain = helm.Render();
  CHECK(OfKind(plain, "ServiceMonitor").empty());
  CHECK(OfKind(plain, "PrometheusRule").empty());

  const std::vector<YAML::Node> objects =
      helm.Render({"--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true", "--set",
                   "serviceMonitor.labels.release=kube-prometheus"});
  const YAML::Node sm = One(objects, "ServiceMonitor");
  CHECK(sm["metadata"]["labels"]["release"].Scalar() == "kube-prometheus");
  REQUIRE(sm["spec"]["endpoints"].size() == 1);
  const YAML::Node ep = sm["spec"]["endpoints"][0];
  CHECK(ep["port"].Scalar() == "http-metrics");
  CHECK(ep["path"].Scalar() == "/metrics");
  CHECK(ep["honorLabels"].as<bool>());
  // It selects the metrics Service and not the gRPC one.
  CHECK(Selects(sm["spec"]["selector"]["matchLabels"], ServiceNamed(objects, "-metrics")["metadata"]["labels"]));
  CHECK_FALSE(Selects(sm["spec"]["selector"]["matchLabels"], ServiceNamed(objects, "-grpc")["metadata"]["labels"]));
  CHECK(Strings(sm["spec"]["namespaceSelector"]["matchNames"]) == std::vector<std::string>{kNamespace});

  // The PrometheusRule carries exactly the promtool-tested rule file.
  const YAML::Node rule = One(objects, "PrometheusRule");
  const YAML::Node file = YAML::LoadFile((SourceDir() / "helm/peregrine/files/alerts.yaml").string());
  CHECK(YAML::Dump(rule["spec"]["groups"]) == YAML::Dump(file["groups"]));
}

TEST_CASE("values override image, flags and leader election", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects =
      helm.Render({"--set", "image.tag=1.2.3", "--set", "replicaCount=1", "--set", "controller.leaderElect=false",
                   "--set", "controller.logLevel=debug", "--set", "agent.image.tag=9.9.9", "--set",
                   "agentTLS.enabled=false"});
  const YAML::Node deploy = One(objects, "Deployment");
  CHECK(deploy["spec"]["replicas"].as<int>() == 1);
  const YAML::Node c = deploy["spec"]["template"]["spec"]["containers"][0];
  CHECK(c["image"].Scalar() == "ghcr.io/peregrine-dev/peregrine-controller:1.2.3");
  CHECK(Strings(c["args"]) == std::vector<std::string>{"--grpc-port", "7400", "--http-port", "7401", "--metrics-port",
                                                      "7402", "--agent-image",
                                                      "ghcr.io/peregrine-dev/peregrine-agent:9.9.9",
                                                      "--node-health-sweep-image",
                                                      "ghcr.io/peregrine-dev/peregrine-agent:9.9.9",
                                                      "--node-health-sweep-namespace", kNamespace,
                                                      "--controller-address",
                                                      std::string("peregrine-grpc.") + kNamespace + ".svc:7400",
                                                      "--agent-key-file", "/var/run/peregrine/agent-key/key",
                                                      "--log-level", "debug"});
  const KubeMainOptions flags = ParseControllerArgs(c);
  CHECK_FALSE(flags.mode.leader_elect);
  CHECK(flags.log_level == "debug");
  CHECK(flags.mode.node_health_sweep_image == "ghcr.io/peregrine-dev/peregrine-agent:9.9.9");
  CHECK(flags.mode.node_health_sweep_namespace == kNamespace);
  // Without election nothing sets peregrine.dev/leader, so the gRPC Service must select
  // the replica by its plain labels or the agents reach no controller.
  CHECK(Selects(ServiceNamed(objects, "-grpc")["spec"]["selector"], deploy["spec"]["template"]["metadata"]["labels"]));
}

TEST_CASE("API audiences and ports from values reach the controller's flags", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects =
      helm.Render({"--set", "controller.apiAudiences={peregrine,https://kubernetes.default.svc}", "--set",
                   "controller.metricsPort=9102", "--set", "controller.httpPort=9101"});
  const YAML::Node c = One(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
  const KubeMainOptions flags = ParseControllerArgs(c);
  CHECK(flags.mode.api_audiences == std::vector<std::string>{"peregrine", "https://kubernetes.default.svc"});
  CHECK(flags.mode.metrics_port == 9102);
  CHECK(flags.mode.http_port == 9101);
  std::map<std::string, int> ports;
  for (const YAML::Node& p : c["ports"]) ports[p["name"].Scalar()] = p["containerPort"].as<int>();
  CHECK(ports == std::map<std::string, int>{{"grpc", 7400}, {"http", 9101}, {"metrics", 9102}});
}

TEST_CASE("the agents dial the gRPC Service of this release, whatever its name", "[integration]") {
  Helm helm;
  for (const auto& [release, extra, service_port] :
       {std::tuple<std::string, std::vector<std::string>, int>{"team-a", {}, 7400},
        {"llm", {"--set", "grpcService.port=9443"}, 9443},
        {"x", {"--set", "fullnameOverride=ops-operator"}, 7400}}) {
    INFO("release " << release);
    const std::vector<YAML::Node> objects = helm.Render(extra, release);
    const YAML::Node grpc = ServiceNamed(objects, "-grpc");
    REQUIRE(grpc["spec"]["ports"].size() == 1);
    CHECK(grpc["spec"]["ports"][0]["port"].as<int>() == service_port);
    const std::string expected =
        grpc["metadata"]["name"].Scalar() + "." + kNamespace + ".svc:" + std::to_string(service_port);
    const KubeMainOptions flags = ParseControllerArgs(One(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]);
    CHECK(flags.mode.controller_address == expected);
    // The controller's built-in default would name a Service this release does not have.
    CHECK(grpc["metadata"]["name"].Scalar() != "peregrine-grpc");
  }
}

TEST_CASE("each release elects its leader on its own Lease", "[integration]") {
  Helm helm;
  std::set<std::string> leases;
  for (const auto& [release, extra] : {std::pair<std::string, std::vector<std::string>>{"team-a", {}},
                                       {"team-b", {}},
                                       {"x", {"--set", "fullnameOverride=ops-operator"}}}) {
    INFO("release " << release);
    const YAML::Node deployment = One(helm.Render(extra, release), "Deployment");
    const KubeMainOptions flags = ParseControllerArgs(deployment["spec"]["template"]["spec"]["containers"][0]);
    CHECK(flags.mode.leader_elect);
    CHECK(flags.mode.lease_namespace == kNamespace);
    // The Lease is named after the release's objects (the Deployment's name).
    CHECK(flags.mode.lease_name == deployment["metadata"]["name"].Scalar());
    leases.insert(flags.mode.lease_name);
  }
  // Two releases in one namespace never share a Lease (nor the controller's default).
  CHECK(leases.size() == 3);
  CHECK(leases.count(KubeModeOptions{}.lease_name) == 0);
}

TEST_CASE("two replicas without leader election are refused", "[integration]") {
  Helm helm;
  const ProcessResult r = helm.Template({"--set", "controller.leaderElect=false"});
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Catch::Contains("replicaCount > 1 needs controller.leaderElect=true"));
  // helm lint deliberately reports template `fail` calls as [INFO] and exits 0; it
  // must still surface the message.
  const ProcessResult lint = helm.Lint({"--set", "controller.leaderElect=false"});
  CHECK_THAT(lint.out + lint.err, Catch::Contains("replicaCount > 1 needs controller.leaderElect=true"));
}

}  // namespace
}  // namespace peregrine
