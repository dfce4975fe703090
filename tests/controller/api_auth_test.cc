// The HTTP API's access decisions (controller/api_auth.h): which access a route needs,
// the bearer token of a header, and the refusal message.
#include "controller/api_auth.h"

#include <catch2/catch.hpp>

#include "absl/strings/match.h"

namespace peregrine {
namespace {

TEST_CASE("api auth: each route needs its verb on trainingjobs.peregrine.dev", "[unit]") {
  const ResourceAccess list = RequiredAccess(ApiRoute::kListJobs, "team-a", "ignored");
  CHECK(list == ResourceAccess{"list", "peregrine.dev", "trainingjobs", "team-a", ""});
  CHECK(RequiredAccess(ApiRoute::kListJobs, "", "") == ResourceAccess{"list", "peregrine.dev", "trainingjobs", "", ""});
  CHECK(RequiredAccess(ApiRoute::kGetJob, "ns", "job") == ResourceAccess{"get", "peregrine.dev", "trainingjobs", "ns", "job"});
  CHECK(RequiredAccess(ApiRoute::kUpdateCode, "ns", "job") ==
        ResourceAccess{"update", "peregrine.dev", "trainingjobs", "ns", "job"});
  CHECK(RequiredAccess(ApiRoute::kInjectFault, "ns", "job") ==
        ResourceAccess{"update", "peregrine.dev", "trainingjobs", "ns", "job"});
}

TEST_CASE("api auth: the bearer token of an Authorization header", "[unit]") {
  CHECK(BearerToken("Bearer abc.def-ghi") == "abc.def-ghi");
  CHECK(BearerToken("bearer abc") == "abc");
  CHECK(BearerToken("BEARER   abc  ") == "abc");
  CHECK(BearerToken("Bearer\tabc") == "abc");
  CHECK_FALSE(BearerToken("").has_value());
  CHECK_FALSE(BearerToken("Bearer").has_value());
  CHECK_FALSE(BearerToken("Bearer ").has_value());
  CHECK_FALSE(BearerToken("Bearerabc").has_value());
  CHECK_FALSE(BearerToken("Basic YWRtaW46YWRtaW4=").has_value());
  CHECK_FALSE(BearerToken("abc").has_value());
  CHECK_FALSE(BearerToken("Bearer abc def").has_value());
}

TEST_CASE("api auth: a refusal names the user, verb, resource, object and namespace", "[unit]") {
  ApiUser user;
  user.username = "system:serviceaccount:team-a:ci";
  CHECK(RefusalMessage(user, RequiredAccess(ApiRoute::kUpdateCode, "team-a", "llm"), "no RBAC rule allows it") ==
        "user \"system:serviceaccount:team-a:ci\" may not update trainingjobs.peregrine.dev llm in namespace "
        "team-a: no RBAC rule allows it");
  CHECK(RefusalMessage(user, RequiredAccess(ApiRoute::kListJobs, "", ""), "") ==
        "user \"system:serviceaccount:team-a:ci\" may not list trainingjobs.peregrine.dev in any namespace");
}

}  // namespace
}  // namespace peregrine
