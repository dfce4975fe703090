// A kubeconfig user's exec credential plugin (cli/exec_credential.h): the stanza and the
// plugin's answer checked field by field (pure), and real plugins (shell scripts written
// here) run through the real kubectl's view of a kubeconfig, as `kubectl peregrine` runs
// them for EKS, GKE or AKS users.
#include "cli/exec_credential.h"

#include <catch2/catch.hpp>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "cli/kube_credentials.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using nlohmann::json;

json V1(json extra = json::object()) {
  json e = {{"apiVersion", "client.authentication.k8s.io/v1"}, {"command", "get-token"}, {"interactiveMode", "Never"}};
  e.update(extra);
  return e;
}

TEST_CASE("exec credential: the kubeconfig stanza, field by field", "[unit]") {
  auto ok = ParseExecConfig(V1({{"args", {"eks", "get-token", "--cluster-name", "c"}},
                                {"env", {{{"name", "AWS_PROFILE"}, {"value", "ml"}}}},
                                {"provideClusterInfo", true},
                                {"installHint", "install the aws CLI"}}),
                            "alice");
  REQUIRE(ok.ok());
  CHECK(ok->command == "get-token");
  CHECK(ok->args == std::vector<std::string>{"eks", "get-token", "--cluster-name", "c"});
  CHECK(ok->env.at("AWS_PROFILE") == "ml");
  CHECK(ok->provide_cluster_info);
  CHECK(ok->install_hint == "install the aws CLI");
  // v1beta1 may leave interactiveMode out.
  CHECK(ParseExecConfig(json{{"apiVersion", "client.authentication.k8s.io/v1beta1"}, {"command", "x"}}, "alice").ok());

  auto error = [](const json& exec) {
    auto r = ParseExecConfig(exec, "alice");
    REQUIRE_FALSE(r.ok());
    return r.status();
  };
  CHECK_THAT(std::string(error(V1({{"command", ""}})).message()), Catch::Contains("kubeconfig user alice: exec.command is missing"));
  CHECK_THAT(std::string(error(V1({{"apiVersion", "client.authentication.k8s.io/v1alpha1"}})).message()),
             Catch::Contains("exec.apiVersion 'client.authentication.k8s.io/v1alpha1'"));
  CHECK_THAT(std::string(error(V1({{"args", "--all"}})).message()), Catch::Contains("exec.args is not a list"));
  CHECK_THAT(std::string(error(V1({{"args", {"a", 3}}})).message()), Catch::Contains("exec.args[1] is not a string"));
  CHECK_THAT(std::string(error(V1({{"env", {{{"value", "x"}}}}})).message()), Catch::Contains("exec.env[0] needs a name"));
  CHECK_THAT(std::string(error(V1({{"provideClusterInfo", "yes"}})).message()), Catch::Contains("exec.provideClusterInfo"));
  json no_mode = V1();
  no_mode.erase("interactiveMode");
  CHECK_THAT(std::string(error(no_mode).message()), Catch::Contains("exec.interactiveMode is required"));
  CHECK_THAT(std::string(error(V1({{"interactiveMode", "Sometimes"}})).message()), Catch::Contains("'Sometimes'"));
  const absl::Status always = error(V1({{"interactiveMode", "Always"}}));
  CHECK(always.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(always.message()), Catch::Contains("needs a terminal"));
  CHECK(error(json::array()).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("exec credential: KUBERNETES_EXEC_INFO carries the cluster only when asked", "[unit]") {
  const json cluster = {{"server", "https://10.0.0.1:6443"},
                        {"certificate-authority-data", "Q0E="},
                        {"extensions", {{{"name", "client.authentication.k8s.io/exec"}, {"extension", {{"audience", "k8s"}}}},
                                        {{"name", "other"}, {"extension", 1}}}}};
  ExecConfig c = *ParseExecConfig(V1(), "alice");
  json info = json::parse(ExecInfo(c, cluster));
  CHECK(info["apiVersion"] == "client.authentication.k8s.io/v1");
  CHECK(info["kind"] == "ExecCredential");
  CHECK(info["spec"]["interactive"] == false);
  CHECK_FALSE(info["spec"].contains("cluster"));
  c.provide_cluster_info = true;
  info = json::parse(ExecInfo(c, cluster));
  CHECK(info["spec"]["cluster"]["server"] == "https://10.0.0.1:6443");
  CHECK(info["spec"]["cluster"]["certificate-authority-data"] == "Q0E=");
  CHECK(info["spec"]["cluster"]["config"]["audience"] == "k8s");
  CHECK_FALSE(info["spec"]["cluster"].contains("extensions"));
}

TEST_CASE("exec credential: the plugin's answer - token, certificate, and what is refused", "[unit]") {
  const ExecConfig c = *ParseExecConfig(V1(), "alice");
  auto answer = [](json status) {
    return json{{"apiVersion", "client.authentication.k8s.io/v1"}, {"kind", "ExecCredential"}, {"status", status}}.dump();
  };
  auto token = ParseExecCredential(answer({{"token", "k8s-aws-v1.abc"}, {"expirationTimestamp", "2026-11-26T12:00:00Z"}}), c, "alice");
  REQUIRE(token.ok());
  CHECK(token->token == "k8s-aws-v1.abc");
  CHECK(token->expiration_timestamp == "2026-11-26T12:00:00Z");
  auto cert = ParseExecCredential(answer({{"clientCertificateData", "CERT"}, {"clientKeyData", "KEY"}}), c, "alice");
  REQUIRE(cert.ok());
  CHECK(cert->client_certificate_pem == "CERT");
  CHECK(cert->client_key_pem == "KEY");

  auto error = [&](const std::string& text) {
    auto r = ParseExecCredential(text, c, "alice");
    REQUIRE_FALSE(r.ok());
    return std::string(r.status().message());
  };
  CHECK_THAT(error("Please log in"), Catch::Contains("printed no JSON object"));
  CHECK_THAT(error(""), Catch::Contains("printed no JSON object"));
  CHECK_THAT(error(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"Secret","status":{"token":"t"}})"),
             Catch::Contains("kind 'Secret'"));
  CHECK_THAT(error(R"({"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}})"),
             Catch::Contains("answered apiVersion 'client.authentication.k8s.io/v1beta1'"));
  CHECK_THAT(error(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"})"), Catch::Contains("no status"));
  CHECK_THAT(error(answer({{"clientCertificateData", "CERT"}})), Catch::Contains("certificate without its key"));
  CHECK_THAT(error(answer(json::object())), Catch::Contains("neither a token nor a client certificate"));
}

std::string Kubeconfig(const std::string& exec) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: dev\nclusters:\n- name: c\n  cluster:\n"
         "    server: https://127.0.0.1:6443\n    extensions:\n    - name: client.authentication.k8s.io/exec\n"
         "      extension:\n        audience: peregrine\n"
         "contexts:\n- name: dev\n  context:\n    cluster: c\n    user: alice\n"
         "users:\n- name: alice\n  user:\n    exec:\n" + exec;
}

std::string Script(testing::TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.Write(name, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

// The kubectl of scripts/install-tools.sh first on PATH (kubectl config view reads the
// kubeconfig).
void UseToolsKubectl() {
  const std::filesystem::path bin = std::filesystem::path(PEREGRINE_SOURCE_DIR) / ".tools/bin";
  if (!std::filesystem::exists(bin / "kubectl")) FAIL("run scripts/install-tools.sh: " << bin.string() << "/kubectl is missing");
  static const bool set = [&] {
    const char* path = ::getenv("PATH");
    ::setenv("PATH", (bin.string() + ":" + (path != nullptr ? path : "/usr/bin:/bin")).c_str(), 1);
    return true;
  }();
  (void)set;
}

TEST_CASE("exec credential: kubectl's view of a kubeconfig with a real plugin gives its token", "[integration]") {
  UseToolsKubectl();
  testing::TempDir dir("exec-credential");
  std::filesystem::create_directories(dir.Path("bin"));
  // The plugin checks what kubectl would give it: its args, its env, KUBERNETES_EXEC_INFO
  // with the cluster and its extension, and no terminal on stdin.
  Script(dir, "bin/get-token",
         "[ \"$1 $2\" = \"--cluster peregrine\" ] || { echo \"bad args: $*\" >&2; exit 2; }\n"
         "[ \"$TOKEN_PREFIX\" = tok ] || { echo 'no env' >&2; exit 3; }\n"
         "case \"$KUBERNETES_EXEC_INFO\" in *'\"interactive\":false'*'\"audience\":\"peregrine\"'*|"
         "*'\"audience\":\"peregrine\"'*'\"interactive\":false'*) ;; *) echo \"exec info: $KUBERNETES_EXEC_INFO\" >&2; exit 4;; esac\n"
         "[ -t 0 ] && { echo 'stdin is a terminal' >&2; exit 5; }\n"
         "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"'$TOKEN_PREFIX'-from-plugin\"}}'\n");
  // Relative to the kubeconfig's directory, as kubectl resolves it.
  const std::string config = dir.Write(
      "config", Kubeconfig("      apiVersion: client.authentication.k8s.io/v1\n      command: ./bin/get-token\n"
                           "      args: [--cluster, peregrine]\n      env:\n      - name: TOKEN_PREFIX\n        value: tok\n"
                           "      provideClusterInfo: true\n      interactiveMode: IfAvailable\n"));
  auto token = KubeconfigToken(config, "");
  INFO(token.status());
  CHECK(token.value_or("") == "tok-from-plugin");
  auto endpoint = LoadKubeEndpoint(config, "");
  INFO(endpoint.status());
  REQUIRE(endpoint.ok());
  CHECK(endpoint->token == "tok-from-plugin");
  CHECK(endpoint->server == "https://127.0.0.1:6443");

  // A plugin that fails: its stderr is the message.
  Script(dir, "bin/denied", "echo 'error: SSO session expired, run aws sso login' >&2\nexit 1\n");
  const std::string denied = dir.Write(
      "denied", Kubeconfig("      apiVersion: client.authentication.k8s.io/v1\n      command: ./bin/denied\n"
                           "      interactiveMode: Never\n"));
  auto d = KubeconfigToken(denied, "");
  CHECK(d.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(d.status().message()), Catch::Contains("kubeconfig user alice: exec credential plugin"));
  CHECK_THAT(std::string(d.status().message()), Catch::Contains("SSO session expired"));
  // One that is not installed: the installHint follows.
  const std::string missing = dir.Write(
      "missing", Kubeconfig("      apiVersion: client.authentication.k8s.io/v1\n      command: gke-gcloud-auth-plugin-absent\n"
                            "      interactiveMode: Never\n      installHint: Install gke-gcloud-auth-plugin with gcloud components install\n"));
  auto m = LoadKubeEndpoint(missing, "");
  CHECK(m.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(m.status().message()), Catch::Contains("could not be run"));
  CHECK_THAT(std::string(m.status().message()), Catch::Contains("gcloud components install"));
  // One that prints garbage.
  Script(dir, "bin/garbage", "echo 'Opening browser...'\n");
  const std::string garbage = dir.Write(
      "garbage", Kubeconfig("      apiVersion: client.authentication.k8s.io/v1\n      command: ./bin/garbage\n"
                            "      interactiveMode: Never\n"));
  CHECK_THAT(std::string(KubeconfigToken(garbage, "").status().message()), Catch::Contains("printed no JSON object"));
  // A certificate is fine for the API server but not for the controller's API.
  Script(dir, "bin/cert",
         "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
         "\"status\":{\"clientCertificateData\":\"CERT\",\"clientKeyData\":\"KEY\"}}'\n");
  const std::string cert = dir.Write(
      "cert", Kubeconfig("      apiVersion: client.authentication.k8s.io/v1\n      command: ./bin/cert\n"
                         "      interactiveMode: Never\n"));
  CHECK(KubeconfigToken(cert, "").status().code() == absl::StatusCode::kNotFound);
  auto ce = LoadKubeEndpoint(cert, "");
  REQUIRE(ce.ok());
  CHECK(ce->client_certificate_pem == "CERT");
  CHECK(ce->client_key_pem == "KEY");
  CHECK(ce->token.empty());
}

}  // namespace
}  // namespace peregrine
