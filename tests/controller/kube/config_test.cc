// Kubeconfig and in-cluster loading on real-format samples, and garbage that must be
// rejected with an error naming the file and field.
#include "controller/kube/config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace peregrine::kube {
namespace {

std::string ReadTestdata(const std::string& name) {
  std::ifstream in(std::string(PEREGRINE_KUBE_TESTDATA) + "/" + name);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A private temporary directory removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kube-config-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ + "/" + name) << content;
  }

 private:
  std::string path_;
};

std::string Kubeconfig(const std::string& cluster_extra, const std::string& user_body,
                       const std::string& current = "dev") {
  return absl::StrCat(R"(apiVersion: v1
kind: Config
preferences: {}
current-context: )", current, R"(
clusters:
- name: dev-cluster
  cluster:
    server: https://10.1.2.3:6443
)", cluster_extra, R"(
- name: prod-cluster
  cluster:
    server: https://prod.example.com:443/
    insecure-skip-tls-verify: true
contexts:
- name: dev
  context:
    cluster: dev-cluster
    user: dev-user
    namespace: training
- name: prod
  context:
    cluster: prod-cluster
    user: prod-user
users:
- name: dev-user
  user:
)", user_body, R"(
- name: prod-user
  user:
    token: prod-token
)");
}

TEST_CASE("config: kubeconfig with a token and embedded CA data", "[unit]") {
  const std::string ca = ReadTestdata("ca.crt");
  const std::string text = Kubeconfig(
      absl::StrCat("    certificate-authority-data: ", absl::Base64Escape(ca)),
      "    token: abc.def.ghi");
  auto config = ParseKubeconfig(text, "kubeconfig test", "/nonexistent");
  REQUIRE(config.ok());
  CHECK(config->server == "https://10.1.2.3:6443");
  CHECK(config->ca_pem == ca);
  CHECK(config->bearer_token == "abc.def.ghi");
  CHECK(config->default_namespace == "training");
  CHECK_FALSE(config->insecure_skip_tls_verify);
  CHECK(config->client_certificate_pem.empty());
}

TEST_CASE("config: kubeconfig with client certificate data and a named context", "[unit]") {
  const std::string cert = ReadTestdata("client.crt");
  const std::string key = ReadTestdata("client.key");
  const std::string text =
      Kubeconfig("", absl::StrCat("    client-certificate-data: ", absl::Base64Escape(cert),
                                  "\n    client-key-data: ", absl::Base64Escape(key)));
  auto dev = ParseKubeconfig(text, "kc", "/nonexistent");
  REQUIRE(dev.ok());
  CHECK(dev->client_certificate_pem == cert);
  CHECK(dev->client_key_pem == key);
  CHECK(dev->bearer_token.empty());

  auto prod = ParseKubeconfig(text, "kc", "/nonexistent", "prod");
  REQUIRE(prod.ok());
  CHECK(prod->server == "https://prod.example.com:443");
  CHECK(prod->insecure_skip_tls_verify);
  CHECK(prod->bearer_token == "prod-token");
  CHECK(prod->default_namespace == "default");
}

TEST_CASE("config: kubeconfig file paths resolve against the kubeconfig's directory", "[unit]") {
  TempDir dir;
  dir.Write("ca.crt", ReadTestdata("ca.crt"));
  dir.Write("client.crt", ReadTestdata("client.crt"));
  dir.Write("client.key", ReadTestdata("client.key"));
  dir.Write("token", "file-token\n");
  dir.Write("config", Kubeconfig("    certificate-authority: ca.crt",
                                 absl::StrCat("    client-certificate: client.crt\n"
                                              "    client-key: ", dir.path(), "/client.key\n"
                                              "    tokenFile: token")));
  auto config = LoadKubeconfigFile(dir.path() + "/config");
  REQUIRE(config.ok());
  CHECK(config->ca_pem == ReadTestdata("ca.crt"));
  CHECK(config->client_certificate_pem == ReadTestdata("client.crt"));
  CHECK(config->client_key_pem == ReadTestdata("client.key"));
  CHECK(config->bearer_token_file == dir.path() + "/token");
  CHECK_THAT(config->source, Catch::Contains(dir.path() + "/config"));
}

TEST_CASE("config: in-cluster service account", "[unit]") {
  TempDir dir;
  dir.Write("token", "eyJhbGciOiJSUzI1NiJ9.payload.sig\n");
  dir.Write("ca.crt", ReadTestdata("ca.crt"));
  dir.Write("namespace", "peregrine-system");
  auto config = LoadInClusterConfig(dir.path(), "10.96.0.1", "443");
  REQUIRE(config.ok());
  CHECK(config->server == "https://10.96.0.1:443");
  CHECK(config->bearer_token == "eyJhbGciOiJSUzI1NiJ9.payload.sig");
  CHECK(config->bearer_token_file == dir.path() + "/token");
  CHECK(config->ca_pem == ReadTestdata("ca.crt"));
  CHECK(config->default_namespace == "peregrine-system");

  auto v6 = LoadInClusterConfig(dir.path(), "fd00::1", "443");
  REQUIRE(v6.ok());
  CHECK(v6->server == "https://[fd00::1]:443");
}

TEST_CASE("config: in-cluster errors name the missing piece", "[unit]") {
  TempDir dir;
  CHECK(LoadInClusterConfig(dir.path(), "", "").status().code() ==
        absl::StatusCode::kFailedPrecondition);
  auto no_token = LoadInClusterConfig(dir.path(), "10.96.0.1", "443");
  REQUIRE_FALSE(no_token.ok());
  CHECK_THAT(std::string(no_token.status().message()), Catch::Contains(dir.path() + "/token"));
  dir.Write("token", "t");
  dir.Write("ca.crt", "not a certificate");
  auto bad_ca = LoadInClusterConfig(dir.path(), "10.96.0.1", "443");
  REQUIRE_FALSE(bad_ca.ok());
  CHECK_THAT(std::string(bad_ca.status().message()), Catch::Contains("ca.crt"));
}

struct Garbage {
  const char* name;
  std::string text;
  const char* must_mention;
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
};

TEST_CASE("config: garbage kubeconfigs are rejected naming the field", "[unit]") {
  const std::string ok_user = "    token: t";
  const Garbage cases[] = {
      {"not yaml", "{{{ : [", "kc"},
      {"a scalar", "just a string", "top-level"},
      {"no current-context", absl::StrReplaceAll(Kubeconfig("", ok_user), {{"current-context: dev", ""}}),
       "current-context"},
      {"unknown context", Kubeconfig("", ok_user, "staging"), "staging"},
      {"context names a missing cluster",
       absl::StrReplaceAll(Kubeconfig("", ok_user), {{"cluster: dev-cluster", "cluster: gone"}}),
       "clusters"},
      {"server not a URL",
       absl::StrReplaceAll(Kubeconfig("", ok_user), {{"https://10.1.2.3:6443", "10.1.2.3"}}),
       "server"},
      {"CA data not base64",
       Kubeconfig("    certificate-authority-data: '%%%not-base64%%%'", ok_user),
       "certificate-authority-data"},
      {"CA file missing", Kubeconfig("    certificate-authority: missing-ca.crt", ok_user),
       "certificate-authority", absl::StatusCode::kNotFound},
      {"cert without key",
       Kubeconfig("", absl::StrCat("    client-certificate-data: ",
                                   absl::Base64Escape(ReadTestdata("client.crt")))),
       "client-key"},
      {"clusters is a map", absl::StrReplaceAll(Kubeconfig("", ok_user), {{"clusters:\n-", "clusters:\n  x:"}}),
       "kc"},
  };
  for (const Garbage& g : cases) {
    INFO(g.name);
    auto config = ParseKubeconfig(g.text, "kc", "/nonexistent");
    REQUIRE_FALSE(config.ok());
    CHECK(config.status().code() == g.code);
    CHECK_THAT(std::string(config.status().message()), Catch::Contains(g.must_mention));
  }
}

TEST_CASE("config: credential plugins are reported as unsupported", "[unit]") {
  auto config = ParseKubeconfig(
      Kubeconfig("", "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
                     "      command: aws"),
      "kc", "/nonexistent");
  REQUIRE(config.status().code() == absl::StatusCode::kUnimplemented);
  CHECK_THAT(std::string(config.status().message()), Catch::Contains("dev-user"));
}

TEST_CASE("config: a missing kubeconfig file is NotFound naming the path", "[unit]") {
  auto config = LoadKubeconfigFile("/nonexistent/kubeconfig");
  REQUIRE(config.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(config.status().message()), Catch::Contains("/nonexistent/kubeconfig"));
}

}  // namespace
}  // namespace peregrine::kube
