// TokenReview and SubjectAccessReview on the fake API server, over HTTP: the answers
// and validation errors of the real API (fake_kube_auth.h).
#include <catch2/catch.hpp>

#include "tests/fakes/fake_kube_api_server.h"
#include "tests/fakes/test_client.h"

namespace peregrine::testing {
namespace {

using nlohmann::json;

constexpr char kTokenReviews[] = "/apis/authentication.k8s.io/v1/tokenreviews";
constexpr char kAccessReviews[] = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

json TokenReview(const std::string& token, std::vector<std::string> audiences = {}) {
  json spec = {{"token", token}};
  if (!audiences.empty()) spec["audiences"] = audiences;
  return {{"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"spec", spec}};
}

json AccessReview(json spec) {
  return {{"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", std::move(spec)}};
}

TEST_CASE("fake TokenReview: known tokens, audiences, unknown tokens and a missing token", "[integration]") {
  FakeKubeApiServer server;
  FakeTokenIdentity alice;
  alice.username = "alice";
  alice.uid = "u-1";
  alice.groups = {"dev"};
  alice.extra = {{"scope", {"x"}}};
  alice.audiences = {"peregrine", "vault"};
  server.auth().AddToken("tok-a", alice);
  FakeTokenIdentity sa;
  sa.username = "system:serviceaccount:ml:ci";
  server.auth().AddToken("tok-sa", sa);  // the API server's audience
  REQUIRE(server.Start().ok());
  ApiClient client(server.port());

  ApiReply r = client.Post(kTokenReviews, TokenReview("tok-a", {"peregrine", "other"}));
  REQUIRE(r.code == 201);
  CHECK(r.body["kind"] == "TokenReview");
  CHECK(r.body["status"]["authenticated"] == true);
  CHECK(r.body["status"]["audiences"] == json::array({"peregrine"}));
  CHECK(r.body["status"]["user"] == json{{"username", "alice"}, {"uid", "u-1"}, {"groups", json::array({"dev"})},
                                         {"extra", {{"scope", json::array({"x"})}}}});
  // Not for the API server's audience, nor for an audience it lacks.
  CHECK(client.Post(kTokenReviews, TokenReview("tok-a")).body["status"]["authenticated"] == false);
  r = client.Post(kTokenReviews, TokenReview("tok-a", {"other"}));
  CHECK(r.body["status"]["authenticated"] == false);
  CHECK(r.body["status"]["error"].get<std::string>().find("invalid for the target audiences") != std::string::npos);
  r = client.Post(kTokenReviews, TokenReview("tok-sa"));
  CHECK(r.body["status"]["authenticated"] == true);
  CHECK(r.body["status"]["audiences"] == json::array({kApiServerAudience}));
  r = client.Post(kTokenReviews, TokenReview("nope"));
  CHECK(r.code == 201);
  CHECK(r.body["status"]["authenticated"] == false);
  CHECK(r.body["status"].contains("error"));
  r = client.Post(kTokenReviews, TokenReview(""));
  CHECK(r.code == 400);
  CHECK(r.body["message"] == "token is required for TokenReview in authentication");
  CHECK(client.Get(kTokenReviews).code == 405);
  CHECK(server.RequestCountForTest("create", "tokenreviews.authentication.k8s.io") == 6);
}

TEST_CASE("fake TokenReview: a bound service-account token names its pod and is valid only for its audiences", "[integration]") {
  FakeKubeApiServer server;
  server.auth().AddBoundServiceAccountToken("tok-pod", "ml", "default", "job-m0", "pod-uid-1", {"peregrine.dev"});
  REQUIRE(server.Start().ok());
  ApiClient client(server.port());
  ApiReply r = client.Post(kTokenReviews, TokenReview("tok-pod", {"peregrine.dev"}));
  REQUIRE(r.code == 201);
  CHECK(r.body["status"]["authenticated"] == true);
  CHECK(r.body["status"]["audiences"] == json::array({"peregrine.dev"}));
  const json& user = r.body["status"]["user"];
  CHECK(user["username"] == "system:serviceaccount:ml:default");
  CHECK(user["groups"] == json::array({"system:serviceaccounts", "system:serviceaccounts:ml", "system:authenticated"}));
  CHECK(user["extra"]["authentication.kubernetes.io/pod-name"] == json::array({"job-m0"}));
  CHECK(user["extra"]["authentication.kubernetes.io/pod-uid"] == json::array({"pod-uid-1"}));
  // Not a token for the API server, and not once its pod is gone.
  CHECK(client.Post(kTokenReviews, TokenReview("tok-pod")).body["status"]["authenticated"] == false);
  server.auth().RevokeToken("tok-pod");
  CHECK(client.Post(kTokenReviews, TokenReview("tok-pod", {"peregrine.dev"})).body["status"]["authenticated"] == false);
}

TEST_CASE("fake SubjectAccessReview: RBAC-like grants, namespaces, names, groups, deny and validation", "[integration]") {
  FakeKubeApiServer server;
  FakeAccessRule rule;
  rule.users = {"alice"};
  rule.verbs = {"get", "update"};
  rule.api_groups = {"peregrine.dev"};
  rule.resources = {"trainingjobs"};
  rule.namespace_name = "ml";
  server.auth().AddRule(rule);
  FakeAccessRule named = rule;
  named.users = {};
  named.groups = {"ops"};
  named.resource_names = {"llm"};
  named.verbs = {"*"};
  server.auth().AddRule(named);
  FakeAccessRule deny = rule;
  deny.users = {"mallory"};
  deny.namespace_name = "";
  deny.deny = true;
  server.auth().AddRule(deny);
  REQUIRE(server.Start().ok());
  ApiClient client(server.port());
  auto review = [&](json spec) { return client.Post(kAccessReviews, AccessReview(std::move(spec))); };
  auto attrs = [](const std::string& verb, const std::string& ns, const std::string& name = "") {
    json a = {{"verb", verb}, {"group", "peregrine.dev"}, {"resource", "trainingjobs"}, {"namespace", ns}};
    if (!name.empty()) a["name"] = name;
    return a;
  };

  ApiReply r = review({{"user", "alice"}, {"resourceAttributes", attrs("update", "ml", "x")}});
  REQUIRE(r.code == 201);
  CHECK(r.body["status"]["allowed"] == true);
  CHECK(r.body["status"]["reason"].get<std::string>().find("RoleBinding") != std::string::npos);
  r = review({{"user", "alice"}, {"resourceAttributes", attrs("update", "web", "x")}});
  CHECK(r.body["status"]["allowed"] == false);
  CHECK_FALSE(r.body["status"].contains("denied"));  // no opinion
  CHECK(review({{"user", "alice"}, {"resourceAttributes", attrs("delete", "ml", "x")}}).body["status"]["allowed"] == false);
  // A namespaced grant does not cover all namespaces.
  CHECK(review({{"user", "alice"}, {"resourceAttributes", attrs("get", "")}}).body["status"]["allowed"] == false);
  // By group, named object only, never a list.
  CHECK(review({{"user", "bob"}, {"groups", json::array({"ops"})}, {"resourceAttributes", attrs("patch", "ml", "llm")}})
            .body["status"]["allowed"] == true);
  CHECK(review({{"user", "bob"}, {"groups", json::array({"ops"})}, {"resourceAttributes", attrs("patch", "ml", "x")}})
            .body["status"]["allowed"] == false);
  CHECK(review({{"user", "bob"}, {"groups", json::array({"ops"})}, {"resourceAttributes", attrs("list", "ml")}})
            .body["status"]["allowed"] == false);
  // An explicit deny.
  r = review({{"user", "mallory"}, {"resourceAttributes", attrs("update", "ml", "x")}});
  CHECK(r.body["status"]["allowed"] == false);
  CHECK(r.body["status"]["denied"] == true);
  // Validation.
  CHECK(review({{"resourceAttributes", attrs("get", "ml")}}).code == 422);
  CHECK(review({{"user", "alice"}}).code == 422);
  CHECK(review({{"user", "alice"}, {"resourceAttributes", attrs("get", "ml")}, {"nonResourceAttributes", {{"path", "/x"}}}})
            .code == 422);
  CHECK(review({{"user", "alice"}, {"nonResourceAttributes", {{"path", "/healthz"}, {"verb", "get"}}}})
            .body["status"]["allowed"] == false);
}

}  // namespace
}  // namespace peregrine::testing
