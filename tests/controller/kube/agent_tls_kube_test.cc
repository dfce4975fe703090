// Agent TLS in Kubernetes mode: the --agent-tls-* flags (all three or none), the start-up
// error naming a missing file, the training pod mounting the job's CA ConfigMap and
// passing --tls-ca, and AgentCaPublisher keeping each job's ConfigMap equal to the
// controller's CA file against the fake API server (real HTTP on 127.0.0.1).
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "controller/agent_tls.h"
#include "controller/kube/agent_ca_configmap.h"
#include "controller/kube/kube_command.h"
#include "controller/kube/kube_mode.h"
#include "controller/kube/pod_builder.h"
#include "controller/kube/resources.h"
#include "controller/kube/rest_client.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"
#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
#include "tests/fakes/fake_kube_api_server.h"
#endif

namespace peregrine {
namespace {

using nlohmann::json;

absl::StatusOr<KubeMainOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"--agent-image", "agent:1"});
  return ParseKubeMainFlags(args, [](std::string_view) { return std::optional<std::string>(); });
}

TrainingJob Job() {
  TrainingJob job;
  job.metadata.name = "llm";
  job.metadata.namespace_ = "train";
  job.metadata.uid = "uid-1";
  job.spec.machines = 2;
  job.spec.gpus_per_machine = 8;
  job.spec.template_json = R"({"spec":{"containers":[{"name":"trainer","image":"trainer:1"}]}})";
  return job;
}

TEST_CASE("agent TLS flags: all three files or none", "[unit]") {
  auto none = Parse({});
  REQUIRE(none.ok());
  CHECK_FALSE(none->mode.agent_tls.enabled());
  auto all = Parse({"--agent-tls-cert", "/tls/tls.crt", "--agent-tls-key", "/tls/tls.key", "--agent-tls-ca",
                    "/tls/ca.crt"});
  REQUIRE(all.ok());
  CHECK(all->mode.agent_tls.cert_file == "/tls/tls.crt");
  CHECK(all->mode.agent_tls.key_file == "/tls/tls.key");
  CHECK(all->mode.agent_tls.ca_file == "/tls/ca.crt");
  auto no_ca = Parse({"--agent-tls-cert", "/tls/tls.crt", "--agent-tls-key", "/tls/tls.key"});
  REQUIRE_FALSE(no_ca.ok());
  CHECK_THAT(std::string(no_ca.status().message()), Catch::Contains("--agent-tls-ca is required"));
  auto only_key = Parse({"--agent-tls-key", "/tls/tls.key"});
  REQUIRE_FALSE(only_key.ok());
  CHECK_THAT(std::string(only_key.status().message()), Catch::Contains("--agent-tls-cert is required"));
}

TEST_CASE("agent TLS files: a missing, unreadable or non-PEM file is an error naming it", "[unit]") {
  testing::TempDir dir("agent-tls");
  testing::TestCa ca(dir.path(), "peregrine");
  const testing::TestCert cert = ca.Issue("controller", {"peregrine-grpc.peregrine-system.svc"});
  AgentTlsFiles files{cert.cert_file, cert.key_file, ca.ca().cert_file};
  CHECK(ValidateAgentTlsFiles(files).ok());
  CHECK(AgentServerCredentials(files, absl::Seconds(10)).ok());

  AgentTlsFiles missing_key = files;
  missing_key.key_file = dir.Path("nope.key");
  absl::Status s = AgentServerCredentials(missing_key, absl::Seconds(10)).status();
  CHECK(s.code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(s.message()), Catch::Contains("--agent-tls-key") && Catch::Contains(dir.Path("nope.key")));

  AgentTlsFiles key_as_cert = files;
  key_as_cert.cert_file = cert.key_file;  // a key where the certificate should be
  s = ValidateAgentTlsFiles(key_as_cert);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("--agent-tls-cert") && Catch::Contains("no PEM certificate"));

  AgentTlsFiles cert_as_key = files;
  cert_as_key.key_file = cert.cert_file;
  CHECK_THAT(std::string(ValidateAgentTlsFiles(cert_as_key).message()), Catch::Contains("no PEM private key"));

  AgentTlsFiles empty_ca = files;
  empty_ca.ca_file = dir.Write("empty.crt", "");
  CHECK_THAT(std::string(ValidateAgentTlsFiles(empty_ca).message()),
             Catch::Contains("--agent-tls-ca") && Catch::Contains("empty.crt"));
}

TEST_CASE("kube mode does not start with a missing agent TLS file", "[unit]") {
  testing::TempDir dir("agent-tls");
  kube::Config config;
  config.server = "http://127.0.0.1:1";  // never dialled: the files are checked first
  KubeModeOptions options;
  options.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  options.agent_image = "agent:1";
  options.grpc_port = 0;
  options.http_port = 0;
  options.metrics_port = 0;
  options.agent_tls = {dir.Path("tls.crt"), dir.Path("tls.key"), dir.Path("ca.crt")};
  auto mode = KubeMode::Start(config, options);
  REQUIRE_FALSE(mode.ok());
  CHECK_THAT(std::string(mode.status().message()),
             Catch::Contains("--agent-tls-cert") && Catch::Contains(dir.Path("tls.crt")));
}

TEST_CASE("with agent TLS the training pod mounts the job's CA ConfigMap and passes --tls-ca", "[unit]") {
  PodBuildOptions options;
  options.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  options.agent_image = "agent:1";
  const PodToCreate request{"llm-m0", PodRole::kActive, 0, ""};
  auto plain = BuildPod(Job(), request, options);
  REQUIRE(plain.ok());
  CHECK(plain->dump().find("--tls-ca") == std::string::npos);
  CHECK(plain->dump().find("peregrine-ca") == std::string::npos);

  options.agent_tls = true;
  auto pod = BuildPod(Job(), request, options);
  REQUIRE(pod.ok());
  const json& trainer = (*pod)["spec"]["containers"][0];
  const std::vector<std::string> command = trainer["command"].get<std::vector<std::string>>();
  auto flag = std::find(command.begin(), command.end(), "--tls-ca");
  REQUIRE(flag != command.end());
  REQUIRE(flag + 1 != command.end());
  CHECK(*(flag + 1) == "/var/run/peregrine/ca/ca.crt");
  bool mounted = false;
  for (const json& m : trainer["volumeMounts"]) {
    if (m["name"] == "peregrine-ca") {
      mounted = true;
      CHECK(m["mountPath"] == "/var/run/peregrine/ca");
      CHECK(m["readOnly"] == true);
      CHECK_FALSE(m.contains("subPath"));  // a subPath mount would not see a rotated CA
    }
  }
  CHECK(mounted);
  bool volume = false;
  for (const json& v : (*pod)["spec"]["volumes"]) {
    if (v["name"] == "peregrine-ca") {
      volume = true;
      CHECK(v["configMap"]["name"] == JobCaConfigMapName(Job()));
    }
  }
  CHECK(volume);
  CHECK(JobCaConfigMapName(Job()) == "llm-peregrine-ca");
}

#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
struct ApiFixture {
  testing::FakeKubeApiServer server;
  std::unique_ptr<kube::RestClient> client;
  ApiFixture() {
    server.RegisterResource({"", "v1", "configmaps", "ConfigMap", true, false, false, false, nullptr, {}});
    REQUIRE(server.Start().ok());
    kube::Config config;
    config.server = server.base_url();
    config.bearer_token = "test-token";
    config.source = "test";
    auto c = kube::RestClient::Create(config);
    REQUIRE(c.ok());
    client = *std::move(c);
  }
  // The job as the API server stores it (the garbage collector removes what a job that
  // does not exist would own).
  TrainingJob StoredJob(const std::string& name) {
    auto object = server.CreateForTest(
        "trainingjobs.peregrine.dev", "train",
        json{{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"}, {"metadata", {{"name", name}}}});
    INFO(object.status().ToString());
    REQUIRE(object.ok());
    TrainingJob job = Job();
    job.metadata.name = name;
    job.metadata.uid = (*object)["metadata"]["uid"].get<std::string>();
    return job;
  }
  json ConfigMap(const std::string& name) {
    auto object = server.GetForTest("configmaps", "train", name);
    INFO(object.status().ToString());
    REQUIRE(object.ok());
    return *object;
  }
};

TEST_CASE("the CA ConfigMap is created owned by the job and follows the CA file", "[integration]") {
  testing::TempDir dir("agent-ca");
  testing::TestCa first(dir.path(), "first");
  testing::TestCa second(dir.path(), "second");
  const std::string ca_file = dir.Write("ca.crt", first.ca().cert_pem);
  ApiFixture api;
  bool leader = true;
  AgentCaPublisher publisher(api.client.get(), ca_file, [&] { return leader; });
  const TrainingJob job = api.StoredJob("llm");

  REQUIRE(publisher.Publish(job).ok());
  json cm = api.ConfigMap("llm-peregrine-ca");
  CHECK(cm["data"]["ca.crt"] == first.ca().cert_pem);
  CHECK(cm["metadata"]["labels"][kJobLabel] == "llm");
  REQUIRE(cm["metadata"]["ownerReferences"].size() == 1);
  CHECK(cm["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid);
  CHECK(cm["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob");
  CHECK(cm["metadata"]["ownerReferences"][0]["controller"] == true);

  // Nothing changed: no write, not even a read.
  const int requests = api.server.RequestCountForTest("*", "configmaps");
  REQUIRE(publisher.Refresh({job}).ok());
  REQUIRE(publisher.Publish(job).ok());
  CHECK(api.server.RequestCountForTest("*", "configmaps") == requests);

  // A CA change (a bundle of old and new during the change) reaches the ConfigMap.
  const std::string bundle = first.ca().cert_pem + second.ca().cert_pem;
  dir.Write("ca.crt", bundle);
  REQUIRE(publisher.Refresh({job}).ok());
  CHECK(api.ConfigMap("llm-peregrine-ca")["data"]["ca.crt"] == bundle);

  // A ConfigMap edited behind the controller's back is put right when the job's objects
  // are ensured again after a controller restart (a fresh publisher).
  AgentCaPublisher restarted(api.client.get(), ca_file, [&] { return leader; });
  cm = api.ConfigMap("llm-peregrine-ca");
  cm["data"]["ca.crt"] = "tampered";
  REQUIRE(api.client->Update(ConfigMapsPath("train"), "llm-peregrine-ca", cm).ok());
  REQUIRE(restarted.Publish(job).ok());
  CHECK(api.ConfigMap("llm-peregrine-ca")["data"]["ca.crt"] == bundle);

  // A follower writes nothing.
  leader = false;
  const TrainingJob other = api.StoredJob("other");
  absl::Status s = restarted.Publish(other);
  CHECK(s.code() == absl::StatusCode::kUnavailable);
  CHECK_FALSE(api.server.GetForTest("configmaps", "train", "other-peregrine-ca").ok());

  // A CA file that went missing is an error naming it, and the ConfigMap keeps the last bundle.
  leader = true;
  AgentCaPublisher broken(api.client.get(), dir.Path("gone.crt"), [&] { return leader; });
  s = broken.Refresh({job});
  CHECK_THAT(std::string(s.message()), Catch::Contains(dir.Path("gone.crt")));
  CHECK(api.ConfigMap("llm-peregrine-ca")["data"]["ca.crt"] == bundle);
}
#endif

}  // namespace
}  // namespace peregrine
