// The kube-mode controller's HTTP API behind TokenReview and SubjectAccessReview: a
// real KubeMode against the fake API server (tokens and RBAC rules set here), called
// over HTTP on loopback. Every unauthenticated, wrong-audience, wrong-namespace and
// under-privileged request is refused (401/403) and changes nothing; the allowed ones
// succeed.
#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER

#include <httplib.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/kube/kube_mode.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/eventually.h"

namespace peregrine {
namespace {

using nlohmann::json;
using testing::FakeAccessRule;
using testing::FakeKubeApiServer;
using testing::FakeTokenIdentity;
using testing::Eventually;

constexpr char kAudience[] = "peregrine-api";
constexpr char kJobs[] = "trainingjobs.peregrine.dev";

json Manifest(const std::string& ns, const std::string& name) {
  return json{{"apiVersion", "peregrine.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", name}, {"namespace", ns}}},
              {"spec",
               {{"machines", 1},
                {"gpusPerMachine", 1},
                {"parallelism", {{"tensor", 1}, {"pipeline", 1}, {"data", 1}}},
                {"codeVersion", {{"image", "example.com/train:1"}, {"command", json::array({"python", "train.py"})}}},
                {"template", {{"spec", {{"containers", json::array({json{{"name", "trainer"}, {"image", "t:1"}}})}}}}}}}};
}

FakeTokenIdentity Identity(const std::string& user, std::vector<std::string> groups = {},
                           std::vector<std::string> audiences = {kAudience}) {
  FakeTokenIdentity id;
  id.username = user;
  id.uid = absl::StrCat("uid-", user);
  id.groups = std::move(groups);
  id.audiences = std::move(audiences);
  return id;
}

FakeAccessRule Rule(std::vector<std::string> users, std::vector<std::string> verbs, std::string ns,
                    std::vector<std::string> names = {}) {
  FakeAccessRule r;
  r.users = std::move(users);
  r.verbs = std::move(verbs);
  r.api_groups = {"peregrine.dev"};
  r.resources = {"trainingjobs"};
  r.namespace_name = std::move(ns);
  r.resource_names = std::move(names);
  return r;
}

struct AuthEnv {
  AuthEnv() {
    testing::KubeResourceType secrets;  // each job's agent token
    secrets.version = "v1";
    secrets.plural = "secrets";
    secrets.kind = "Secret";
    server.RegisterResource(secrets);
    REQUIRE(server.Start().ok());
    testing::FakeKubeAuth& auth = server.auth();
    auth.AddToken("tok-admin", Identity("admin"));
    auth.AddRule(Rule({"admin"}, {"*"}, ""));
    auth.AddToken("tok-alice", Identity("alice"));  // team-a: get, list, update
    auth.AddRule(Rule({"alice"}, {"get", "list", "update"}, "team-a"));
    auth.AddToken("tok-viewer", Identity("viewer"));  // team-a: read only
    auth.AddRule(Rule({"viewer"}, {"get", "list"}, "team-a"));
    auth.AddToken("tok-ops", Identity("carol", {"ops"}));  // by group, team-b
    FakeAccessRule ops = Rule({}, {"get", "list", "update"}, "team-b");
    ops.groups = {"ops"};
    auth.AddRule(ops);
    auth.AddToken("tok-named", Identity("dave"));  // team-a, job one only
    auth.AddRule(Rule({"dave"}, {"get", "update"}, "team-a", {"one"}));
    auth.AddToken("tok-denied", Identity("eve"));  // allowed, then explicitly denied
    auth.AddRule(Rule({"eve"}, {"*"}, ""));
    FakeAccessRule deny = Rule({"eve"}, {"update"}, "");
    deny.deny = true;
    auth.AddRule(deny);
    auth.AddToken("tok-apiserver-aud", Identity("frank", {}, {}));  // the API server's audience
    auth.AddRule(Rule({"frank"}, {"*"}, ""));
    auth.AddToken("tok-other-aud", Identity("grace", {}, {"vault"}));
    auth.AddRule(Rule({"grace"}, {"*"}, ""));
    auth.AddToken("tok-nobody", Identity("mallory"));  // authenticated, no rules

    config.server = server.base_url();
    config.source = "test";
    KubeModeOptions o;
    o.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
    o.agent_image = "example.com/peregrine-agent:test";
    o.host = "127.0.0.1";
    o.grpc_port = 0;
    o.http_port = 0;
    o.metrics_port = 0;
    o.resync = absl::Seconds(2);
    o.api_audiences = {kAudience};
    auto m = KubeMode::Start(config, o);
    REQUIRE(m.ok());
    mode = *std::move(m);
    for (const auto& [ns, name] : std::vector<std::pair<std::string, std::string>>{
             {"team-a", "one"}, {"team-a", "two"}, {"team-b", "three"}}) {
      REQUIRE(server.CreateForTest(kJobs, ns, Manifest(ns, name)).ok());
    }
    // The controller serves a job once it reconciles it.
    REQUIRE(Eventually([&] {
      auto r = Call("GET", "/api/v1/jobs", "Bearer tok-admin");
      return r.first == 200 && json::parse(r.second).size() == 3;
    }));
  }
  ~AuthEnv() {
    if (mode) mode->Shutdown();
    server.Stop();
  }

  // (status, body) of one API request; authorization "" sends no header.
  std::pair<int, std::string> Call(const std::string& method, const std::string& path,
                                   const std::string& authorization, const std::string& body = "",
                                   std::string* www_authenticate = nullptr) {
    httplib::Client http("127.0.0.1", mode->http_port());
    httplib::Headers headers;
    if (!authorization.empty()) headers.emplace("Authorization", authorization);
    httplib::Result res = method == "GET" ? http.Get(path.c_str(), headers)
                                          : http.Post(path.c_str(), headers, body, "application/json");
    if (!res) return {0, ""};
    if (www_authenticate != nullptr) *www_authenticate = res->get_header_value("WWW-Authenticate");
    return {res->status, res->body};
  }

  std::string Revision(const std::string& ns, const std::string& name) {
    auto obj = server.GetForTest(kJobs, ns, name);
    REQUIRE(obj.ok());
    return (*obj)["spec"]["codeVersion"].value("revision", "");
  }

  FakeKubeApiServer server;
  kube::Config config;
  std::unique_ptr<KubeMode> mode;
};

std::string CodeBody(const std::string& revision) {
  return json{{"revision", revision}, {"image", "example.com/evil:1"}, {"urgent", true}}.dump();
}

struct Variant {
  std::string what;
  std::string method;
  std::string path;
  std::string authorization;
  int want;
};

TEST_CASE("kube-mode API: unauthenticated, wrong-audience, wrong-namespace and under-privileged requests are refused", "[integration]") {
  AuthEnv env;
  const std::string code_a1 = "/api/v1/jobs/team-a/one/code";
  const std::string code_a2 = "/api/v1/jobs/team-a/two/code";
  const std::string code_b3 = "/api/v1/jobs/team-b/three/code";
  const std::vector<Variant> refused = {
      {"no header", "POST", code_a1, "", 401},
      {"empty bearer", "POST", code_a1, "Bearer ", 401},
      {"basic auth", "POST", code_a1, "Basic YWRtaW46YWRtaW4=", 401},
      {"token without scheme", "POST", code_a1, "tok-admin", 401},
      {"unknown token", "POST", code_a1, "Bearer tok-forged", 401},
      {"token with a space", "POST", code_a1, "Bearer tok-admin extra", 401},
      {"the API server's audience", "POST", code_a1, "Bearer tok-apiserver-aud", 401},
      {"another audience", "POST", code_a1, "Bearer tok-other-aud", 401},
      {"another audience reads", "GET", "/api/v1/jobs/team-a/one", "Bearer tok-other-aud", 401},
      {"unauthenticated list", "GET", "/api/v1/jobs", "", 401},
      {"unauthenticated status", "GET", "/api/v1/jobs/team-a/one", "", 401},
      {"unauthenticated faults", "POST", "/api/v1/jobs/team-a/one/faults", "", 401},
      {"forged token faults", "POST", "/api/v1/jobs/team-a/one/faults", "Bearer tok-forged", 401},
      {"wrong namespace update", "POST", code_b3, "Bearer tok-alice", 403},
      {"wrong namespace status", "GET", "/api/v1/jobs/team-b/three", "Bearer tok-alice", 403},
      {"group in the wrong namespace", "POST", code_a1, "Bearer tok-ops", 403},
      {"read-only updates", "POST", code_a1, "Bearer tok-viewer", 403},
      {"read-only injects faults", "POST", "/api/v1/jobs/team-a/one/faults", "Bearer tok-viewer", 403},
      {"other job by name", "POST", code_a2, "Bearer tok-named", 403},
      {"other job status by name", "GET", "/api/v1/jobs/team-a/two", "Bearer tok-named", 403},
      {"explicit deny", "POST", code_a1, "Bearer tok-denied", 403},
      {"no rules update", "POST", code_a1, "Bearer tok-nobody", 403},
      {"no rules status", "GET", "/api/v1/jobs/team-a/one", "Bearer tok-nobody", 403},
      {"no rules, missing job", "POST", "/api/v1/jobs/team-a/gone/code", "Bearer tok-nobody", 403},
  };
  int succeeded = 0;
  for (const Variant& v : refused) {
    INFO(v.what);
    std::string www;
    const auto [status, body] = env.Call(v.method, v.path, v.authorization, CodeBody("evil"), &www);
    CHECK(status == v.want);
    if (status >= 200 && status < 300) ++succeeded;
    if (v.want == 401) CHECK(absl::StartsWith(www, "Bearer"));
    // Never echo a token.
    CHECK_FALSE(absl::StrContains(body, "tok-"));
    if (v.want == 403) {
      CHECK(absl::StrContains(body, "trainingjobs.peregrine.dev"));
      CHECK(absl::StrContains(body, "may not"));
    }
  }
  CHECK(succeeded == 0);
  CHECK(env.Revision("team-a", "one").empty());
  CHECK(env.Revision("team-a", "two").empty());
  CHECK(env.Revision("team-b", "three").empty());

  // The allowed ones succeed.
  CHECK(env.Call("POST", code_a1, "Bearer tok-alice", CodeBody("r-alice")).first == 200);
  CHECK(env.Revision("team-a", "one") == "r-alice");
  CHECK(env.Call("POST", code_a1, "bearer tok-named", CodeBody("r-dave")).first == 200);
  CHECK(env.Revision("team-a", "one") == "r-dave");
  CHECK(env.Call("POST", code_b3, "Bearer tok-ops", CodeBody("r-ops")).first == 200);
  CHECK(env.Revision("team-b", "three") == "r-ops");
  CHECK(env.Call("POST", code_a2, "Bearer tok-admin", CodeBody("r-admin")).first == 200);
  CHECK(env.Revision("team-a", "two") == "r-admin");
  CHECK(env.Call("GET", "/api/v1/jobs/team-a/one", "Bearer tok-viewer").first == 200);
  CHECK(env.Call("GET", "/api/v1/jobs/team-a/one", "Bearer tok-denied").first == 200);  // deny is on update only
  // Fault injection is local-mode only: an allowed caller gets 409, not 401/403.
  CHECK(env.Call("POST", "/api/v1/jobs/team-a/one/faults", "Bearer tok-alice", "{}").first == 409);
  // A missing job is 404 for who may update it.
  CHECK(env.Call("POST", "/api/v1/jobs/team-a/gone/code", "Bearer tok-alice", CodeBody("x")).first == 404);
}

TEST_CASE("kube-mode API: the job list holds only the namespaces the caller may list", "[integration]") {
  AuthEnv env;
  auto names = [&](const std::string& authorization) {
    auto [status, body] = env.Call("GET", "/api/v1/jobs", authorization);
    REQUIRE(status == 200);
    std::vector<std::string> out;
    for (const json& j : json::parse(body)) out.push_back(j["namespace"].get<std::string>() + "/" + j["name"].get<std::string>());
    std::sort(out.begin(), out.end());
    return out;
  };
  CHECK(names("Bearer tok-admin") == std::vector<std::string>{"team-a/one", "team-a/two", "team-b/three"});
  CHECK(names("Bearer tok-viewer") == std::vector<std::string>{"team-a/one", "team-a/two"});
  CHECK(names("Bearer tok-ops") == std::vector<std::string>{"team-b/three"});
  CHECK(names("Bearer tok-nobody").empty());
  CHECK(names("Bearer tok-named").empty());  // resourceNames never match a list
}

TEST_CASE("kube-mode metrics and health are on their own port without a token", "[integration]") {
  AuthEnv env;
  REQUIRE(env.mode->metrics_port() != env.mode->http_port());
  httplib::Client metrics("127.0.0.1", env.mode->metrics_port());
  auto m = metrics.Get("/metrics");
  REQUIRE(m);
  CHECK(m->status == 200);
  CHECK(absl::StrContains(m->body, "peregrine_controller_is_leader"));
  CHECK(metrics.Get("/healthz")->status == 200);
  CHECK(metrics.Get("/api/v1/jobs")->status == 404);  // no API on the metrics port
  httplib::Client api("127.0.0.1", env.mode->http_port());
  CHECK(api.Get("/metrics")->status == 404);
  CHECK(api.Get("/healthz")->status == 200);
}

}  // namespace
}  // namespace peregrine

#endif  // PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
