// The Kubernetes bootstrap of agent identity (controller/kube/agent_bootstrap.h): the pure
// check of a TokenReview's user against the claimed pod, and, against the fake API server
// (bound service-account tokens, TokenReview, a real pod informer), the verifier inside
// the real AgentRegistry: the wrong audience, another pod's token, a token from another
// namespace and a token of a pod the job does not own are refused; the right token gets
// the pod's credential, which opens the pod again after a controller restart; verdicts
// are cached for a while.
#include "controller/kube/agent_bootstrap.h"

#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>

#include "controller/agent_registry.h"
#include "controller/kube/pod_builder.h"

#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
#include "controller/kube/api_reviews.h"
#include "controller/kube/informer.h"
#include "controller/kube/rest_client.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/eventually.h"
#endif

namespace peregrine::kube {
namespace {

ApiUser PodUser(const std::string& ns, const std::string& pod, const std::string& pod_uid) {
  ApiUser u;
  u.username = "system:serviceaccount:" + ns + ":default";
  u.extra[kPodNameExtra] = {pod};
  u.extra[kPodUidExtra] = {pod_uid};
  return u;
}

TEST_CASE("CheckBootstrapUser accepts only the claimed pod's token of the job's namespace for a pod the job owns", "[unit]") {
  const AgentIdentity id{"ml", "j", "job-uid", "j-m0"};
  const BootstrapPod pod{"pod-uid-0", {"job-uid"}};
  CHECK(CheckBootstrapUser(PodUser("ml", "j-m0", "pod-uid-0"), id, pod).ok());
  struct Case {
    const char* what;
    ApiUser user;
    std::optional<BootstrapPod> pod;
    const char* says;
  };
  ApiUser person;
  person.username = "alice";
  ApiUser unbound = PodUser("ml", "j-m0", "pod-uid-0");
  unbound.extra.clear();
  const Case cases[] = {
      {"another pod's token", PodUser("ml", "j-m1", "pod-uid-1"), pod, "pod j-m1's, not j-m0's"},
      {"another namespace", PodUser("other", "j-m0", "pod-uid-0"), pod, "namespace other"},
      {"not a service account", person, pod, "not a service account"},
      {"not bound to a pod", unbound, pod, "not bound to a pod"},
      {"a pod not in the cache", PodUser("ml", "j-m0", "pod-uid-0"), std::nullopt, "not among the job's pods"},
      {"an earlier pod of that name", PodUser("ml", "j-m0", "pod-uid-old"), pod, "uid differs"},
      {"a pod the job does not own", PodUser("ml", "j-m0", "pod-uid-0"), BootstrapPod{"pod-uid-0", {"other-uid"}},
       "not owned by job"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const absl::Status s = CheckBootstrapUser(c.user, id, c.pod);
    CHECK(s.code() == absl::StatusCode::kUnauthenticated);
    CHECK_THAT(std::string(s.message()), Catch::Contains(c.says));
  }
}

TEST_CASE("Bootstrap verdicts are cached for the TTL and bounded but failures to review are not", "[unit]") {
  ManualClock clock(absl::FromUnixSeconds(100));
  int calls = 0;
  bool api_down = false;
  AgentBootstrapOptions options;
  options.cache_ttl = absl::Seconds(60);
  options.cache_entries = 3;
  KubeAgentBootstrapVerifier verifier(
      [&](const std::string& token) -> absl::StatusOr<ApiUser> {
        ++calls;
        if (api_down) return absl::UnavailableError("TokenReview failed: connection refused");
        if (token == "good") return PodUser("ml", "j-m0", "pod-uid-0");
        return absl::UnauthenticatedError("the token was not authenticated");
      },
      [](const std::string&, const std::string&) { return BootstrapPod{"pod-uid-0", {"job-uid"}}; }, &clock, options);
  const AgentIdentity id{"ml", "j", "job-uid", "j-m0"};
  CHECK(verifier.Verify(id, "good").ok());
  CHECK(verifier.Verify(id, "good").ok());
  CHECK(verifier.Verify(id, "bad").code() == absl::StatusCode::kUnauthenticated);
  CHECK(verifier.Verify(id, "bad").code() == absl::StatusCode::kUnauthenticated);
  CHECK(calls == 2);
  // The cached user still has to be the claimed pod's.
  CHECK(verifier.Verify(AgentIdentity{"ml", "j", "job-uid", "j-m1"}, "good").code() ==
        absl::StatusCode::kUnauthenticated);
  CHECK(calls == 2);
  clock.Advance(absl::Seconds(61));
  CHECK(verifier.Verify(id, "good").ok());
  CHECK(calls == 3);
  // A flood of distinct tokens keeps at most cache_entries verdicts.
  for (int i = 0; i < 20; ++i) (void)verifier.Verify(id, "flood-" + std::to_string(i));  // verdicts not needed
  CHECK(verifier.CachedForTest() <= 3);
  // An API server that cannot be reached: kUnavailable, asked again next time.
  api_down = true;
  CHECK(verifier.Verify(id, "new").code() == absl::StatusCode::kUnavailable);
  CHECK(verifier.Verify(id, "new").code() == absl::StatusCode::kUnavailable);
  CHECK(calls == 3 + 20 + 2);
}

TEST_CASE("The training pod gets its bootstrap token through a credential init container and no Secret", "[unit]") {
  using nlohmann::json;
  TrainingJob job;
  job.metadata.name = "llm";
  job.metadata.namespace_ = "train";
  job.spec.code.image = "example.com/train:1";
  job.spec.template_json =
      R"({"spec":{"containers":[{"name":"trainer","securityContext":{"runAsUser":1000,"runAsGroup":2000}}]}})";
  PodBuildOptions options;
  options.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
  options.agent_image = "agent:1";
  auto pod = BuildPod(job, PodToCreate{"llm-m0", PodRole::kActive, 0, ""}, options);
  REQUIRE(pod.ok());
  CHECK(pod->dump().find("secret") == std::string::npos);
  const json& spec = (*pod)["spec"];
  auto volume = [&](const std::string& name) {
    for (const json& v : spec["volumes"]) {
      if (v["name"] == name) return v;
    }
    return json();
  };
  const json token = volume("peregrine-agent-token");
  REQUIRE(token.is_object());
  const json& source = token["projected"]["sources"][0]["serviceAccountToken"];
  CHECK(source["audience"] == kAgentTokenAudience);
  CHECK(source["path"] == "token");
  CHECK(volume("peregrine-credential")["emptyDir"]["medium"] == "Memory");
  auto mounts = [](const json& container, const std::string& volume_name) {
    for (const json& m : container.value("volumeMounts", json::array())) {
      if (m["name"] == volume_name) return true;
    }
    return false;
  };
  // The service-account token is mounted in the credential init container only.
  const json& trainer = spec["containers"][0];
  CHECK_FALSE(mounts(trainer, "peregrine-agent-token"));
  CHECK(mounts(trainer, "peregrine-credential"));
  REQUIRE(spec["initContainers"].size() == 2);
  CHECK_FALSE(mounts(spec["initContainers"][0], "peregrine-agent-token"));
  const json& credential = spec["initContainers"][1];
  CHECK(credential["name"] == "peregrine-agent-credential");
  CHECK(mounts(credential, "peregrine-agent-token"));
  CHECK(credential["command"] == json::array({"install", "-m", "0400", "/var/run/peregrine/serviceaccount/token",
                                              "/var/run/peregrine/credential/bootstrap"}));
  CHECK(credential["securityContext"]["runAsUser"] == 1000);  // the copy is the agent's
  CHECK(credential["securityContext"]["runAsGroup"] == 2000);
  bool credential_env = false;
  for (const json& e : trainer["env"]) {
    CHECK(e["name"] != "PEREGRINE_TOKEN_FILE");
    if (e["name"] == "PEREGRINE_CREDENTIAL_FILE") {
      credential_env = e["value"] == "/var/run/peregrine/credential/bootstrap";
    }
  }
  CHECK(credential_env);
}

#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER

using nlohmann::json;
using testing::FakeKubeApiServer;

constexpr char kKey[] = "aa112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

json Pod(const std::string& ns, const std::string& name, const std::string& owner_uid) {
  json meta = {{"name", name}, {"namespace", ns}, {"labels", {{"peregrine.dev/job", "j"}}}};
  if (!owner_uid.empty()) {
    meta["ownerReferences"] = json::array({json{{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"},
                                                {"name", "j"}, {"uid", owner_uid}, {"controller", true}}});
  }
  return json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta},
              {"spec", {{"containers", json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
}

json Job(const std::string& ns) {
  return json{{"apiVersion", "peregrine.dev/v1alpha1"}, {"kind", "TrainingJob"},
              {"metadata", {{"name", "j"}, {"namespace", ns}}}, {"spec", {{"machines", 3}}}};
}

std::string UidOf(const json& object) { return object["metadata"]["uid"].get<std::string>(); }

v1::Register Reg(const std::string& pod) {
  v1::Register reg;
  reg.set_job_namespace("ml");
  reg.set_job_name("j");
  reg.set_pod_name(pod);
  reg.set_role(v1::AGENT_ROLE_ACTIVE);
  return reg;
}

class NullSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage&) override {}
};

TEST_CASE("Bootstrap over TokenReview refuses wrong-audience and other-pod and other-namespace and un-owned tokens and the right one gets a credential that survives a restart", "[integration]") {
  FakeKubeApiServer server;
  REQUIRE(server.Start().ok());
  Config config;
  config.server = server.base_url();
  config.bearer_token = "controller-token";
  config.source = "test";
  auto client = RestClient::Create(config, RestClientOptions{});
  REQUIRE(client.ok());
  // The job (and one of the same name in another namespace); pods owned by them (the
  // API server's garbage collector removes pods whose owner does not exist).
  auto job = server.CreateForTest("trainingjobs.peregrine.dev", "ml", Job("ml"));
  auto other_job = server.CreateForTest("trainingjobs.peregrine.dev", "other", Job("other"));
  REQUIRE((job.ok() && other_job.ok()));
  const std::string job_uid = UidOf(*job);
  auto m0 = server.CreateForTest("pods", "ml", Pod("ml", "j-m0", job_uid));
  auto m1 = server.CreateForTest("pods", "ml", Pod("ml", "j-m1", job_uid));
  auto stray = server.CreateForTest("pods", "ml", Pod("ml", "j-m2", ""));  // the job's label, no owner
  auto elsewhere = server.CreateForTest("pods", "other", Pod("other", "j-m0", UidOf(*other_job)));
  REQUIRE((m0.ok() && m1.ok() && stray.ok() && elsewhere.ok()));
  auto& auth = server.auth();
  auth.AddBoundServiceAccountToken("tok-m0", "ml", "default", "j-m0", UidOf(*m0), {kAgentTokenAudience});
  auth.AddBoundServiceAccountToken("tok-m0-api", "ml", "default", "j-m0", UidOf(*m0), {});  // API server's audience
  auth.AddBoundServiceAccountToken("tok-m1", "ml", "default", "j-m1", UidOf(*m1), {kAgentTokenAudience});
  auth.AddBoundServiceAccountToken("tok-m2", "ml", "default", "j-m2", UidOf(*stray), {kAgentTokenAudience});
  auth.AddBoundServiceAccountToken("tok-other", "other", "default", "j-m0", UidOf(*elsewhere), {kAgentTokenAudience});

  InformerOptions pods_options;
  pods_options.resource = ResourcePath{"", "v1", "pods", ""};
  pods_options.label_selector = "peregrine.dev/job";
  SeededRandom random(3);
  Informer pods(client->get(), pods_options, RealClock(), &random);
  pods.Start();
  REQUIRE(testing::Eventually([&] { return pods.HasSynced(); }));

  KubeApiAuthorizer reviewer(client->get(), {kAgentTokenAudience});
  auto verifier = std::make_shared<KubeAgentBootstrapVerifier>(
      [&](const std::string& token) { return reviewer.Authenticate(token); }, PodLookupFromInformer(&pods),
      RealClock());
  const TrainingJobSpec spec;  // the registry needs no more of it here
  std::map<std::string, DesiredAgent> desired;
  for (const char* pod : {"j-m0", "j-m1", "j-m2"}) desired[pod] = DesiredAgent{};
  auto registry = std::make_unique<AgentRegistry>("controller-1");
  REQUIRE(registry->SetAgentKey(kKey).ok());
  registry->SetBootstrapVerifier(verifier);
  registry->BindJob("ml/j", AgentRegistry::JobBinding{spec, job_uid});
  registry->SetDesired("ml/j", desired);
  auto attempt = [&](const std::string& token, const std::string& pod) {
    return registry->OnRegister(std::make_shared<NullSink>(), token, Reg(pod), 1);
  };
  struct Refused {
    const char* what;
    const char* token;
    const char* pod;
  };
  for (const Refused& r : {Refused{"a token for the API server's audience", "tok-m0-api", "j-m0"},
                           Refused{"another pod's token", "tok-m1", "j-m0"},
                           Refused{"a pod of the same name in another namespace", "tok-other", "j-m0"},
                           Refused{"a pod with the job's label that the job does not own", "tok-m2", "j-m2"},
                           Refused{"an unknown token", "forged", "j-m0"}}) {
    INFO(r.what);
    auto refused = attempt(r.token, r.pod);
    CHECK(refused.status().code() == absl::StatusCode::kUnauthenticated);
  }
  CHECK(registry->ConnectedCountForTest() == 0);
  auto ack = attempt("tok-m0", "j-m0");
  INFO(ack.status().ToString());
  REQUIRE(ack.ok());
  const std::string credential = ack->agent_credential();
  CHECK(credential.size() == 64);
  CHECK(attempt("tok-m1", "j-m1").ok());

  // A controller restart: a new registry with the same key; the credential opens j-m0
  // without a review, and only j-m0.
  const int reviews = verifier->ReviewsForTest();
  registry = std::make_unique<AgentRegistry>("controller-2");
  REQUIRE(registry->SetAgentKey(kKey).ok());
  registry->SetBootstrapVerifier(verifier);
  registry->BindJob("ml/j", AgentRegistry::JobBinding{spec, job_uid});
  registry->SetDesired("ml/j", desired);
  CHECK(attempt(credential, "j-m0").ok());
  CHECK(attempt(credential, "j-m1").status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(verifier->ReviewsForTest() == reviews + 1);  // only the refused one was reviewed
  pods.Stop();
}

#endif  // PEREGRINE_HAVE_FAKE_KUBE_API_SERVER

}  // namespace
}  // namespace peregrine::kube
