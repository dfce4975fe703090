// TokenReview and SubjectAccessReview bodies and the reading of their answers
// (controller/kube/api_reviews.h), per the documented semantics of both APIs.
#include "controller/kube/api_reviews.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"

namespace peregrine::kube {
namespace {

using nlohmann::json;

TEST_CASE("api reviews: the TokenReview request carries the token and the audiences asked for", "[unit]") {
  json r = TokenReviewRequest("t0k", {});
  CHECK(r["apiVersion"] == "authentication.k8s.io/v1");
  CHECK(r["kind"] == "TokenReview");
  CHECK(r["spec"] == json{{"token", "t0k"}});  // no audiences: the API server's own
  CHECK(TokenReviewRequest("t0k", {"a", "b"})["spec"]["audiences"] == json::array({"a", "b"}));
  CHECK(TokenReviewsPath().ObjectPath("").find("/apis/authentication.k8s.io/v1/tokenreviews") == 0);
  CHECK(SubjectAccessReviewsPath().CollectionPath() == "/apis/authorization.k8s.io/v1/subjectaccessreviews");
}

TEST_CASE("api reviews: a TokenReview answer gives the user only when authenticated for an audience asked for", "[unit]") {
  json ok = {{"status",
              {{"authenticated", true},
               {"audiences", json::array({"peregrine"})},
               {"user", {{"username", "alice"}, {"uid", "u1"}, {"groups", json::array({"dev", "system:authenticated"})},
                         {"extra", {{"scopes", json::array({"a", "b"})}}}}}}}};
  auto user = InterpretTokenReview(ok, {"peregrine"});
  REQUIRE(user.ok());
  CHECK(user->username == "alice");
  CHECK(user->uid == "u1");
  CHECK(user->groups == std::vector<std::string>{"dev", "system:authenticated"});
  CHECK(user->extra.at("scopes") == std::vector<std::string>{"a", "b"});

  // Another audience than the one asked for.
  json other = ok;
  other["status"]["audiences"] = json::array({"vault"});
  CHECK(InterpretTokenReview(other, {"peregrine"}).status().code() == absl::StatusCode::kUnauthenticated);
  other["status"].erase("audiences");
  CHECK(InterpretTokenReview(other, {"peregrine"}).status().code() == absl::StatusCode::kUnauthenticated);
  // No audiences asked for: the API server's own, whatever it answers.
  CHECK(InterpretTokenReview(other, {}).ok());

  json refused = {{"status", {{"authenticated", false}, {"error", "token expired"}}}};
  auto r = InterpretTokenReview(refused, {});
  CHECK(r.status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(absl::StrContains(r.status().message(), "token expired"));
  CHECK(InterpretTokenReview(json{{"status", json::object()}}, {}).status().code() ==
        absl::StatusCode::kUnauthenticated);
  CHECK(InterpretTokenReview(json{{"status", {{"authenticated", "true"}}}}, {}).status().code() ==
        absl::StatusCode::kUnauthenticated);  // not a boolean
  json nameless = ok;
  nameless["status"]["user"]["username"] = "";
  CHECK(InterpretTokenReview(nameless, {"peregrine"}).status().code() == absl::StatusCode::kUnauthenticated);
  CHECK(InterpretTokenReview(json::object(), {}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("api reviews: the SubjectAccessReview request carries the user and the resource attributes", "[unit]") {
  ApiUser user{"alice", "u1", {"dev"}, {{"scopes", {"a"}}}};
  json r = SubjectAccessReviewRequest(user, RequiredAccess(ApiRoute::kUpdateCode, "team-a", "llm"));
  CHECK(r["apiVersion"] == "authorization.k8s.io/v1");
  CHECK(r["kind"] == "SubjectAccessReview");
  CHECK(r["spec"] == json{{"user", "alice"},
                          {"uid", "u1"},
                          {"groups", json::array({"dev"})},
                          {"extra", {{"scopes", json::array({"a"})}}},
                          {"resourceAttributes", {{"verb", "update"}, {"group", "peregrine.dev"},
                                                  {"resource", "trainingjobs"}, {"namespace", "team-a"},
                                                  {"name", "llm"}}}});
  json all = SubjectAccessReviewRequest(ApiUser{"bob", "", {}, {}}, RequiredAccess(ApiRoute::kListJobs, "", ""));
  CHECK(all["spec"] == json{{"user", "bob"},
                            {"resourceAttributes", {{"verb", "list"}, {"group", "peregrine.dev"},
                                                    {"resource", "trainingjobs"}}}});
}

TEST_CASE("api reviews: only allowed=true allows, denied and no opinion refuse", "[unit]") {
  auto d = InterpretSubjectAccessReview(json{{"status", {{"allowed", true}, {"reason", "RBAC: allowed"}}}});
  REQUIRE(d.ok());
  CHECK(d->allowed);
  d = InterpretSubjectAccessReview(json{{"status", {{"allowed", false}}}});  // no opinion
  REQUIRE(d.ok());
  CHECK_FALSE(d->allowed);
  CHECK(d->reason == "no RBAC rule allows it");
  d = InterpretSubjectAccessReview(json{{"status", {{"allowed", false}, {"denied", true}, {"reason", "policy"}}}});
  CHECK_FALSE(d->allowed);
  CHECK(d->reason == "policy");
  d = InterpretSubjectAccessReview(json{{"status", {{"allowed", true}, {"denied", true}}}});
  CHECK_FALSE(d->allowed);  // contradictory: refuse
  d = InterpretSubjectAccessReview(json{{"status", {{"allowed", "true"}}}});
  CHECK_FALSE(d->allowed);
  d = InterpretSubjectAccessReview(
      json{{"status", {{"allowed", false}, {"reason", "r"}, {"evaluationError", "webhook timed out"}}}});
  CHECK(d->reason == "r (webhook timed out)");
  CHECK(InterpretSubjectAccessReview(json::object()).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::kube
