// The node inspector in the chart (values nodeInspector.*), rendered by the real helm:
// off by default; when on, the DaemonSet's least privilege (no privileged, only SYSLOG,
// read-only host mounts, the host network only when asked), its ServiceAccount and
// exactly the RBAC it uses, the controller's --host-inspections node (through the
// controller's own flag parser) and the DaemonSet's arguments accepted by the real
// peregrine-node-inspector.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "tests/deploy/chart_render.h"
#include "tests/deploy/deploy_tools.h"
#include "tests/deploy/run_process.h"
#include "tests/testing/files.h"

namespace peregrine {
namespace {

std::vector<YAML::Node> Named(const std::vector<YAML::Node>& objects, const std::string& kind, const std::string& name) {
  std::vector<YAML::Node> out;
  for (const YAML::Node& o : OfKind(objects, kind)) {
    if (o["metadata"]["name"].Scalar() == name) out.push_back(o);
  }
  return out;
}

const YAML::Node& Controller(const std::vector<YAML::Node>& objects, YAML::Node* holder) {
  *holder = One(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
  return *holder;
}

TEST_CASE("node inspector chart: off by default, nothing rendered and the agents run every inspection", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  CHECK(OfKind(objects, "DaemonSet").empty());
  CHECK(Named(objects, "ServiceAccount", "peregrine-node-inspector").empty());
  CHECK(Named(objects, "ClusterRole", "peregrine-node-inspector").empty());
  YAML::Node c;
  CHECK_FALSE(ParseControllerArgs(Controller(objects, &c)).mode.host_inspections_on_node);
}

TEST_CASE("node inspector chart: the DaemonSet's least privilege, RBAC and the controller's flag", "[integration]") {
  Helm helm;
  {
    const ProcessResult lint = helm.Lint({"--set", "nodeInspector.enabled=true"});
    INFO(lint.out << lint.err);
    CHECK(lint.exit_code == 0);
  }
  const std::vector<YAML::Node> objects =
      helm.Render({"--set", "nodeInspector.enabled=true", "--set", "nodeInspector.nodeSelector.gpu=h100",
                   "--set", "agent.image.tag=9.9"});
  const YAML::Node ds = One(objects, "DaemonSet");
  CHECK(ds["metadata"]["name"].Scalar() == "peregrine-node-inspector");
  CHECK(ds["metadata"]["namespace"].Scalar() == kNamespace);
  const YAML::Node pod = ds["spec"]["template"]["spec"];
  CHECK(Selects(ds["spec"]["selector"]["matchLabels"], ds["spec"]["template"]["metadata"]["labels"]));
  CHECK_FALSE(pod["hostNetwork"].as<bool>());
  CHECK(pod["dnsPolicy"].Scalar() == "ClusterFirst");
  CHECK_FALSE(pod["hostPID"]);
  CHECK_FALSE(pod["hostIPC"]);
  CHECK(pod["nodeSelector"]["gpu"].Scalar() == "h100");
  std::set<std::string> tolerated;
  for (const YAML::Node& t : pod["tolerations"]) tolerated.insert(t["key"].Scalar());
  CHECK(tolerated == std::set<std::string>{"nvidia.com/gpu", "peregrine.dev/quarantined"});
  CHECK(pod["serviceAccountName"].Scalar() == "peregrine-node-inspector");
  REQUIRE(pod["containers"].size() == 1);
  const YAML::Node c = pod["containers"][0];
  CHECK(c["image"].Scalar() == "ghcr.io/peregrine-dev/peregrine-agent:9.9");  // the agent image by default
  const YAML::Node sc = c["securityContext"];
  CHECK_FALSE(sc["privileged"].as<bool>());
  CHECK_FALSE(sc["allowPrivilegeEscalation"].as<bool>());
  CHECK(sc["readOnlyRootFilesystem"].as<bool>());
  CHECK(Strings(sc["capabilities"]["drop"]) == std::vector<std::string>{"ALL"});
  CHECK(Strings(sc["capabilities"]["add"]) == std::vector<std::string>{"SYSLOG"});
  CHECK(pod["securityContext"]["seccompProfile"]["type"].Scalar() == "RuntimeDefault");
  CHECK(c["resources"]["requests"]["cpu"]);
  CHECK(c["resources"]["limits"]["memory"]);
  // Host paths: exactly /dev/kmsg (a character device) and /sys, both mounted read-only.
  std::map<std::string, std::string> host_paths;  // volume -> path
  for (const YAML::Node& v : pod["volumes"]) {
    if (v["hostPath"]) host_paths[v["name"].Scalar()] = v["hostPath"]["path"].Scalar() + " " + v["hostPath"]["type"].Scalar();
  }
  CHECK(host_paths == std::map<std::string, std::string>{{"kmsg", "/dev/kmsg CharDevice"}, {"sys", "/sys Directory"}});
  for (const YAML::Node& m : c["volumeMounts"]) {
    if (host_paths.count(m["name"].Scalar()) > 0) CHECK(m["readOnly"].as<bool>());
  }
  bool node_name = false;
  for (const YAML::Node& e : c["env"]) {
    if (e["name"].Scalar() == "NODE_NAME") node_name = e["valueFrom"]["fieldRef"]["fieldPath"].Scalar() == "spec.nodeName";
  }
  CHECK(node_name);

  // Exactly what the inspector uses: get its Node, patch the status subresource.
  const std::vector<YAML::Node> roles = Named(objects, "ClusterRole", "peregrine-node-inspector");
  REQUIRE(roles.size() == 1);
  std::map<std::string, std::vector<std::string>> rules;
  for (const YAML::Node& rule : roles[0]["rules"]) {
    CHECK(Strings(rule["apiGroups"]) == std::vector<std::string>{""});
    for (const YAML::Node& r : rule["resources"]) rules[r.Scalar()] = Strings(rule["verbs"]);
  }
  CHECK(rules == std::map<std::string, std::vector<std::string>>{{"nodes", {"get"}}, {"nodes/status", {"patch"}}});
  const std::vector<YAML::Node> bindings = Named(objects, "ClusterRoleBinding", "peregrine-node-inspector");
  REQUIRE(bindings.size() == 1);
  CHECK(bindings[0]["roleRef"]["name"].Scalar() == "peregrine-node-inspector");
  CHECK(bindings[0]["subjects"][0]["name"].Scalar() == "peregrine-node-inspector");
  CHECK(bindings[0]["subjects"][0]["namespace"].Scalar() == kNamespace);
  CHECK(Named(objects, "ServiceAccount", "peregrine-node-inspector").size() == 1);

  // The controller starts the agents with --host-inspections node.
  YAML::Node controller;
  CHECK(ParseControllerArgs(Controller(objects, &controller)).mode.host_inspections_on_node);

  // The real binary accepts the rendered arguments: it gets past its flags and stops at
  // the missing API server configuration (exit 1; a flag it refused would be exit 2).
  std::vector<std::string> argv = {testing::BinaryPath("bin/peregrine-node-inspector")};
  for (const std::string& a : Strings(c["args"])) argv.push_back(a);
  argv.insert(argv.end(), {"--node", "n1", "--kubeconfig", "/nonexistent/kubeconfig", "--once"});
  absl::StatusOr<ProcessResult> run = RunProcess(argv);
  REQUIRE(run.ok());
  INFO(run->err);
  CHECK(run->exit_code == 1);
  CHECK(run->err.find("/nonexistent/kubeconfig") != std::string::npos);
}

TEST_CASE("node inspector chart: the host network only when nodeInspector.hostNetwork is set", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects =
      helm.Render({"--set", "nodeInspector.enabled=true", "--set", "nodeInspector.hostNetwork=true",
                   "--set", "nodeInspector.image.repository=registry.example/inspector", "--set",
                   "nodeInspector.image.tag=1.0", "--set", "nodeInspector.interval=15"});
  const YAML::Node pod = One(objects, "DaemonSet")["spec"]["template"]["spec"];
  CHECK(pod["hostNetwork"].as<bool>());
  CHECK(pod["dnsPolicy"].Scalar() == "ClusterFirstWithHostNet");
  CHECK(pod["containers"][0]["image"].Scalar() == "registry.example/inspector:1.0");
  const std::vector<std::string> args = Strings(pod["containers"][0]["args"]);
  auto interval = std::find(args.begin(), args.end(), "--interval");
  REQUIRE(interval != args.end());
  CHECK(*(interval + 1) == "15");
}

TEST_CASE("node inspector chart: ownNodeOnly adds the admission policy that scopes its writes to its own node", "[integration]") {
  Helm helm;
  CHECK(OfKind(helm.Render({"--set", "nodeInspector.enabled=true"}), "ValidatingAdmissionPolicy").empty());
  const std::vector<YAML::Node> objects =
      helm.Render({"--set", "nodeInspector.enabled=true", "--set", "nodeInspector.ownNodeOnly=true"});
  const YAML::Node policy = One(objects, "ValidatingAdmissionPolicy");
  CHECK(policy["spec"]["failurePolicy"].Scalar() == "Fail");
  const YAML::Node rule = policy["spec"]["matchConstraints"]["resourceRules"][0];
  CHECK(Strings(rule["resources"]) == std::vector<std::string>{"nodes/status"});
  CHECK(Strings(rule["operations"]) == std::vector<std::string>{"UPDATE"});
  CHECK(policy["spec"]["matchConditions"][0]["expression"].Scalar() ==
        std::string("request.userInfo.username == 'system:serviceaccount:") + kNamespace +
            ":peregrine-node-inspector'");
  bool node_name = false;
  for (const YAML::Node& v : policy["spec"]["validations"]) {
    node_name |= v["expression"].Scalar().find("authentication.kubernetes.io/node-name") != std::string::npos;
  }
  CHECK(node_name);
  const YAML::Node binding = One(objects, "ValidatingAdmissionPolicyBinding");
  CHECK(binding["spec"]["policyName"].Scalar() == policy["metadata"]["name"].Scalar());
  CHECK(Strings(binding["spec"]["validationActions"]) == std::vector<std::string>{"Deny"});
}

}  // namespace
}  // namespace peregrine
