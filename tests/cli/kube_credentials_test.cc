// peregrinectl's Kubernetes credentials (cli/kube_credentials.h): the user's token from
// `kubectl config view --minify` output (pure), and through the real kubectl with
// kubeconfig files written here.
#include "cli/kube_credentials.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using nlohmann::json;

json Minified(json user) { return json{{"users", json::array({json{{"name", "u"}, {"user", std::move(user)}}})}}; }

TEST_CASE("kube credentials: token, tokenFile, plugins and none in a minified kubeconfig", "[unit]") {
  auto t = KubeconfigUserToken(Minified({{"token", "abc"}}));
  REQUIRE(t.ok());
  CHECK(t->token == "abc");
  CHECK(t->token_file.empty());
  auto f = KubeconfigUserToken(Minified({{"tokenFile", "/var/run/token"}}));
  REQUIRE(f.ok());
  CHECK(f->token_file == "/var/run/token");
  auto exec = KubeconfigUserToken(Minified(
      {{"exec", {{"command", "aws"}, {"apiVersion", "client.authentication.k8s.io/v1beta1"}}}}));
  REQUIRE(exec.ok());
  REQUIRE(exec->exec.has_value());
  CHECK(exec->exec->command == "aws");
  auto bad_exec = KubeconfigUserToken(Minified({{"exec", {{"command", "aws"}}}}));
  CHECK(bad_exec.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(bad_exec.status().message(), "kubeconfig user u: exec.apiVersion"));
  CHECK(KubeconfigUserToken(Minified({{"auth-provider", {{"name", "oidc"}}}})).status().code() ==
        absl::StatusCode::kUnimplemented);
  CHECK(KubeconfigUserToken(Minified({{"client-certificate-data", "x"}})).status().code() ==
        absl::StatusCode::kNotFound);
  CHECK(KubeconfigUserToken(json{{"users", json::array()}}).status().code() == absl::StatusCode::kNotFound);
  CHECK(KubeconfigUserToken(json::array()).status().code() == absl::StatusCode::kNotFound);
}

std::string Kubeconfig(const std::string& current, const std::string& alice_user, const std::string& bob_user) {
  return "apiVersion: v1\nkind: Config\ncurrent-context: " + current +
         "\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n"
         "contexts:\n- name: alice\n  context:\n    cluster: c\n    user: alice\n"
         "- name: bob\n  context:\n    cluster: c\n    user: bob\n"
         "users:\n- name: alice\n  user:\n" + alice_user + "- name: bob\n  user:\n" + bob_user;
}

TEST_CASE("kube credentials: kubectl reads the context's user token or tokenFile", "[integration]") {
  testing::TempDir dir("kube-credentials");
  const std::string token_file = dir.Write("bob.token", "tok-bob\n");
  const std::string config =
      dir.Write("config", Kubeconfig("alice", "    token: tok-alice\n", "    tokenFile: " + token_file + "\n"));
  CHECK(KubeconfigToken(config, "").value_or("") == "tok-alice");
  CHECK(KubeconfigToken(config, "bob").value_or("") == "tok-bob");
  // A missing context is kubectl's error.
  CHECK(KubeconfigToken(config, "carol").status().code() == absl::StatusCode::kUnavailable);
  const std::string plugin = dir.Write(
      "plugin", Kubeconfig("alice",
                           "    auth-provider:\n      name: oidc\n",
                           "    token: x\n"));
  CHECK(KubeconfigToken(plugin, "").status().code() == absl::StatusCode::kUnimplemented);
  const std::string empty_file = dir.Write("empty.token", "\n");
  const std::string empty = dir.Write("empty", Kubeconfig("bob", "    token: x\n", "    tokenFile: " + empty_file + "\n"));
  CHECK(KubeconfigToken(empty, "").status().code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace peregrine
