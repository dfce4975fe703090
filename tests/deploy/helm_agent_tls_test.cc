// The chart's agent-channel PKI with the real helm: the <fullname>-agent-tls Secret holds a
// CA and a server certificate (checked with the openssl tool) that the CA signs and whose
// SANs cover the agents' gRPC Service name the controller hands them; the controller
// mounts it and gets the --agent-tls-* flags (through its own flag parser); an existing
// Secret replaces the generated one; agentTLS.enabled=false removes all of it. RBAC gives
// configmaps get/create/update for the jobs' CA ConfigMaps.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "tests/deploy/chart_render.h"
#include "tests/deploy/deploy_tools.h"
#include "tests/deploy/run_process.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

// The chart's TLS Secrets (the agent-key Secret is always there: helm_chart_test.cc).
std::vector<YAML::Node> Secrets(const std::vector<YAML::Node>& objects) {
  std::vector<YAML::Node> out;
  for (const YAML::Node& s : OfKind(objects, "Secret")) {
    if (s["type"].Scalar() == "kubernetes.io/tls") out.push_back(s);
  }
  return out;
}

YAML::Node Controller(const std::vector<YAML::Node>& objects) {
  return One(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
}

std::string Decoded(const YAML::Node& secret, const char* key) {
  std::string out;
  REQUIRE(secret["data"][key]);
  REQUIRE(absl::Base64Unescape(secret["data"][key].Scalar(), &out));
  return out;
}

ProcessResult Openssl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = RunProcess(argv);
  REQUIRE(r.ok());
  INFO(r->out << r->err);
  return *r;
}

TEST_CASE("chart: the agent TLS Secret holds a CA and a certificate for the agents' gRPC Service", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render({}, "train");
  REQUIRE(Secrets(objects).size() == 1);
  const YAML::Node secret = Secrets(objects)[0];
  CHECK(secret["metadata"]["name"].Scalar() == "train-peregrine-agent-tls");
  CHECK(secret["type"].Scalar() == "kubernetes.io/tls");
  testing::TempDir dir("chart-tls");
  const std::string ca = dir.Write("ca.crt", Decoded(secret, "ca.crt"));
  const std::string cert = dir.Write("tls.crt", Decoded(secret, "tls.crt"));
  CHECK_THAT(Decoded(secret, "tls.key"), Catch::Contains("PRIVATE KEY-----"));

  // The certificate is signed by the CA, for serving.
  const ProcessResult verify = Openssl({"verify", "-purpose", "sslserver", "-CAfile", ca, cert});
  CHECK(verify.exit_code == 0);
  // Its SANs cover the host the agents dial (--controller-address, handed to every pod).
  const KubeMainOptions flags = ParseControllerArgs(Controller(objects));
  const std::string dialed = flags.mode.controller_address.substr(0, flags.mode.controller_address.rfind(':'));
  CHECK(dialed == "train-peregrine-grpc.peregrine-system.svc");
  CHECK(ServiceNamed(objects, "-grpc")["metadata"]["name"].Scalar() == "train-peregrine-grpc");
  const ProcessResult check_host = Openssl({"x509", "-in", cert, "-noout", "-checkhost", dialed});
  CHECK_THAT(check_host.out, Catch::Contains("does match certificate"));
  const ProcessResult sans = Openssl({"x509", "-in", cert, "-noout", "-ext", "subjectAltName"});
  for (const char* name : {"DNS:train-peregrine-grpc,", "DNS:train-peregrine-grpc.peregrine-system,",
                           "DNS:train-peregrine-grpc.peregrine-system.svc,",
                           "DNS:train-peregrine-grpc.peregrine-system.svc.cluster.local"}) {
    CHECK_THAT(sans.out, Catch::Contains(name));
  }
  // The CA is a CA; the server certificate is not one.
  CHECK_THAT(Openssl({"x509", "-in", ca, "-noout", "-ext", "basicConstraints"}).out, Catch::Contains("CA:TRUE"));
  CHECK_THAT(Openssl({"x509", "-in", cert, "-noout", "-ext", "basicConstraints"}).out, Catch::Contains("CA:FALSE"));
}

TEST_CASE("chart: the controller mounts the agent TLS Secret and gets the --agent-tls flags", "[integration]") {
  Helm helm;
  for (const bool existing : {false, true}) {
    INFO("existing secret: " << existing);
    std::vector<std::string> extra;
    if (existing) extra = {"--set", "agentTLS.existingSecret=from-cert-manager"};
    const std::vector<YAML::Node> objects = helm.Render(extra);
    CHECK(Secrets(objects).size() == (existing ? 0u : 1u));
    const YAML::Node container = Controller(objects);
    const KubeMainOptions flags = ParseControllerArgs(container);
    CHECK(flags.mode.agent_tls.cert_file == "/var/run/peregrine/agent-tls/tls.crt");
    CHECK(flags.mode.agent_tls.key_file == "/var/run/peregrine/agent-tls/tls.key");
    CHECK(flags.mode.agent_tls.ca_file == "/var/run/peregrine/agent-tls/ca.crt");
    bool mounted = false;
    for (const YAML::Node& m : container["volumeMounts"]) {
      if (m["name"].Scalar() != "agent-tls") continue;
      mounted = true;
      CHECK(m["mountPath"].Scalar() == "/var/run/peregrine/agent-tls");
      CHECK(m["readOnly"].as<bool>());
      CHECK_FALSE(m["subPath"]);  // a subPath mount never sees a rotated Secret
    }
    CHECK(mounted);
    bool volume = false;
    for (const YAML::Node& v : One(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]) {
      if (v["name"].Scalar() != "agent-tls") continue;
      volume = true;
      CHECK(v["secret"]["secretName"].Scalar() == (existing ? "from-cert-manager" : "peregrine-agent-tls"));
    }
    CHECK(volume);
  }
}

TEST_CASE("chart: agentTLS.enabled=false serves the agents in plaintext", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render({"--set", "agentTLS.enabled=false"});
  CHECK(Secrets(objects).empty());
  const YAML::Node container = Controller(objects);
  CHECK_FALSE(ParseControllerArgs(container).mode.agent_tls.enabled());
  for (const YAML::Node& m : container["volumeMounts"]) CHECK(m["name"].Scalar() != "agent-tls");
}

TEST_CASE("chart: RBAC lets the controller manage the jobs' CA ConfigMaps and nothing more", "[integration]") {
  Helm helm;
  const std::vector<YAML::Node> objects = helm.Render();
  std::vector<std::string> verbs;
  for (const YAML::Node& rule : One(objects, "ClusterRole")["rules"]) {
    for (const YAML::Node& resource : rule["resources"]) {
      if (resource.Scalar() == "configmaps") verbs = Strings(rule["verbs"]);
    }
  }
  std::sort(verbs.begin(), verbs.end());
  CHECK(verbs == std::vector<std::string>{"create", "get", "update"});
}

}  // namespace
}  // namespace peregrine
