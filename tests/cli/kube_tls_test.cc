// peregrinectl's Kubernetes backend over TLS (cli/kube_job_client.h): the fake API server
// speaks plain HTTP, so this stands up a cpp-httplib TLS server with a run-time PKI
// (tests/testing/test_pki.h) that serves one TrainingJob and requires a client
// certificate signed by its CA, as an API server with client-certificate users does.
// The kubeconfig names the CA, the client certificate and the key by file (kubectl
// --flatten embeds them): the right CA and certificate work; another CA, or no client
// certificate, fail with a message naming the server; insecure-skip-tls-verify skips
// the server's certificate check.
#include <httplib.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/peregrinectl.h"
#include "controller/status_json.h"
#include "tests/testing/captured_run.h"
#include "tests/testing/child_process.h"
#include "tests/testing/status_samples.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"

namespace peregrine {
namespace {

using nlohmann::json;

void PutKubectlOnPath() {
  const std::filesystem::path kubectl = std::filesystem::path(PEREGRINE_SOURCE_DIR) / ".tools/bin/kubectl";
  if (!std::filesystem::exists(kubectl)) {
    FAIL(kubectl.string() << " is missing: run scripts/install-tools.sh (installs helm and kubectl into .tools/bin)");
  }
  const char* path = ::getenv("PATH");
  const std::string dir = kubectl.parent_path().string();
  if (path == nullptr || std::string(path).rfind(dir + ":", 0) != 0) {
    ::setenv("PATH", (dir + ":" + (path != nullptr ? path : "/usr/bin:/bin")).c_str(), 1);
  }
}

// A client certificate (no extensions: good for client authentication) signed by `ca`.
void IssueClientCert(const testing::TempDir& dir, const testing::TestCa& ca) {
  auto run = [&](std::vector<std::string> argv) {
    testing::ChildProcess::Options o;
    argv.insert(argv.begin(), "/usr/bin/openssl");
    o.argv = argv;
    o.stderr_path = dir.Path("openssl-client.log");
    auto child = testing::ChildProcess::Start(o);
    REQUIRE(child != nullptr);
    const std::optional<int> status = child->Wait(std::chrono::minutes(1));
    REQUIRE(status.has_value());
    REQUIRE(testing::ExitedWith(status, 0));
  };
  run({"req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
       dir.Path("alice.key"), "-subj", "/CN=alice", "-out", dir.Path("alice.csr")});
  run({"x509", "-req", "-in", dir.Path("alice.csr"), "-CA", ca.ca().cert_file, "-CAkey", ca.ca().key_file,
       "-set_serial", "4242", "-days", "2", "-out", dir.Path("alice.crt")});
}

TEST_CASE("kubectl peregrine talks TLS with the kubeconfig's CA and client certificate", "[integration]") {
  PutKubectlOnPath();
  testing::TempDir dir("kubectl-peregrine-tls");
  testing::TestCa ca(dir.path(), "cluster");
  testing::TestCa other(dir.path(), "other");
  const testing::TestCert server_cert = ca.Issue("apiserver", {"localhost"}, {"127.0.0.1"});
  IssueClientCert(dir, ca);

  httplib::SSLServer server(server_cert.cert_file.c_str(), server_cert.key_file.c_str(), ca.ca().cert_file.c_str());
  REQUIRE(server.is_valid());
  const json job = {{"apiVersion", "peregrine.dev/v1alpha1"},
                    {"kind", "TrainingJob"},
                    {"metadata", {{"name", "llm"}, {"namespace", "ml"}, {"uid", "u1"}}},
                    {"spec", {{"machines", 2}, {"gpusPerMachine", 8}}},
                    {"status", json::parse(JobStatusToJson(testing::PopulatedStatus()))}};
  server.Get("/apis/peregrine.dev/v1alpha1/namespaces/ml/trainingjobs/llm",
             [&](const httplib::Request&, httplib::Response& res) { res.set_content(job.dump(), "application/json"); });
  const int port = server.bind_to_any_port("127.0.0.1");
  REQUIRE(port > 0);
  std::thread serving([&] { server.listen_after_bind(); });
  struct Stop {
    httplib::SSLServer& s;
    std::thread& t;
    ~Stop() {
      s.stop();
      t.join();
    }
  } stop{server, serving};

  auto kubeconfig = [&](const std::string& name, const std::string& cluster_extra, bool client_cert) {
    return dir.Write(name, "apiVersion: v1\nkind: Config\ncurrent-context: tls\nclusters:\n- name: c\n  cluster:\n"
                           "    server: https://127.0.0.1:" + std::to_string(port) + "\n" + cluster_extra +
                           "contexts:\n- name: tls\n  context:\n    cluster: c\n    user: alice\n    namespace: ml\n"
                           "users:\n- name: alice\n  user:\n" +
                           (client_cert ? "    client-certificate: " + dir.Path("alice.crt") +
                                              "\n    client-key: " + dir.Path("alice.key") + "\n"
                                        : "    token: t\n"));
  };
  auto status = [](const std::string& config) {
    std::vector<std::string> args = {"--kubeconfig", config, "status", "llm"};
    return testing::RunCaptured([&](std::ostream& out, std::ostream& err) { return RunPeregrinectl(args, out, err); });
  };

  const testing::CapturedRun ok = status(kubeconfig("ok", "    certificate-authority: " + ca.ca().cert_file + "\n", true));
  INFO(ok.err);
  CHECK(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("phase Recovering  attempt 3"));

  const testing::CapturedRun wrong_ca =
      status(kubeconfig("wrong-ca", "    certificate-authority: " + other.ca().cert_file + "\n", true));
  CHECK(wrong_ca.code == 1);
  CHECK_THAT(wrong_ca.err, Catch::Contains("cannot reach the API server at https://127.0.0.1:"));
  CHECK_THAT(wrong_ca.err, Catch::Contains("check certificate-authority(-data)"));

  const testing::CapturedRun no_client_cert =
      status(kubeconfig("no-cert", "    certificate-authority: " + ca.ca().cert_file + "\n", false));
  CHECK(no_client_cert.code == 1);
  CHECK_THAT(no_client_cert.err, Catch::Contains("cannot reach the API server at https://127.0.0.1:"));

  const testing::CapturedRun insecure = status(kubeconfig("insecure", "    insecure-skip-tls-verify: true\n", true));
  INFO(insecure.err);
  CHECK(insecure.code == 0);
  CHECK_THAT(insecure.out, Catch::Contains("phase Recovering  attempt 3"));
}

}  // namespace
}  // namespace peregrine
