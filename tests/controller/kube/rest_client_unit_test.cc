// Pure parts of the REST client and informer: paths, HTTP -> absl::Status mapping,
// object keys, the jittered backoff sequence.
#include <catch2/catch.hpp>

#include "controller/kube/informer.h"
#include "controller/kube/rest_client.h"

namespace peregrine::kube {
namespace {

TEST_CASE("rest client: resource paths", "[unit]") {
  ResourcePath pods{.group = "", .version = "v1", .plural = "pods", .namespace_name = "ns-1"};
  CHECK(pods.CollectionPath() == "/api/v1/namespaces/ns-1/pods");
  CHECK(pods.ObjectPath("p-0", "status") == "/api/v1/namespaces/ns-1/pods/p-0/status");
  ResourcePath leases{.group = "coordination.k8s.io", .version = "v1", .plural = "leases",
                      .namespace_name = "kube-system"};
  CHECK(leases.ObjectPath("peregrine") ==
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/peregrine");
  ResourcePath nodes{.group = "", .version = "v1", .plural = "nodes", .namespace_name = ""};
  CHECK(nodes.ObjectPath("gpu node/1") == "/api/v1/nodes/gpu%20node%2F1");
}

struct Mapping {
  int http;
  const char* body;
  absl::StatusCode code;
  const char* reason;
};

TEST_CASE("rest client: HTTP errors map to one absl code per next step", "[unit]") {
  const Mapping cases[] = {
      {404, R"({"kind":"Status","reason":"NotFound","message":"pods \"x\" not found","code":404})",
       absl::StatusCode::kNotFound, "NotFound"},
      {409, R"({"kind":"Status","reason":"Conflict","message":"the object has been modified","code":409})",
       absl::StatusCode::kAborted, "Conflict"},
      {409, R"({"kind":"Status","reason":"AlreadyExists","message":"exists","code":409})",
       absl::StatusCode::kAlreadyExists, "AlreadyExists"},
      {410, R"({"kind":"Status","reason":"Expired","message":"too old resource version","code":410})",
       absl::StatusCode::kOutOfRange, "Expired"},
      {410, "", absl::StatusCode::kOutOfRange, "Expired"},
      {422, R"({"kind":"Status","reason":"Invalid","message":"spec.x: Invalid value","code":422})",
       absl::StatusCode::kInvalidArgument, "Invalid"},
      {400, "bad", absl::StatusCode::kInvalidArgument, "BadRequest"},
      {401, "", absl::StatusCode::kUnauthenticated, "Unauthorized"},
      {403, "", absl::StatusCode::kPermissionDenied, "Forbidden"},
      {429, "", absl::StatusCode::kUnavailable, "TooManyRequests"},
      {500, "<html>", absl::StatusCode::kUnavailable, "InternalError"},
      {503, "", absl::StatusCode::kUnavailable, "ServiceUnavailable"},
  };
  for (const Mapping& m : cases) {
    INFO(m.http << " " << m.body);
    const absl::Status s = StatusFromHttp(m.http, m.body, "GET /api/v1/namespaces/a/pods/x");
    CHECK(s.code() == m.code);
    CHECK(KubeReason(s) == m.reason);
    CHECK(HttpCode(s) == m.http);
    CHECK_THAT(std::string(s.message()), Catch::Contains("GET /api/v1/namespaces/a/pods/x"));
  }
  const absl::Status conflict = StatusFromHttp(
      409, R"({"reason":"Conflict","message":"the object has been modified"})", "PUT x");
  CHECK(IsConflict(conflict));
  CHECK_THAT(std::string(conflict.message()), Catch::Contains("the object has been modified"));
  CHECK(IsExpired(StatusFromHttp(410, "", "WATCH x")));
  const absl::Status throttled = StatusFromHttp(429, "", "LIST x", absl::Seconds(3));
  REQUIRE(RetryAfter(throttled).has_value());
  CHECK(*RetryAfter(throttled) == absl::Seconds(3));
  CHECK_FALSE(RetryAfter(absl::UnavailableError("x")).has_value());
  CHECK(KubeReason(absl::NotFoundError("plain")).empty());
}

TEST_CASE("rest client: object keys", "[unit]") {
  CHECK(ObjectKey(nlohmann::json::parse(R"({"metadata":{"name":"a","namespace":"ns"}})")) == "ns/a");
  CHECK(ObjectKey(nlohmann::json::parse(R"({"metadata":{"name":"node-1"}})")) == "node-1");
  CHECK(ObjectKey(nlohmann::json::parse(R"({"metadata":{"name":7}})")).empty());
  CHECK(ObjectKey(nlohmann::json::parse("[1,2]")).empty());
}

TEST_CASE("rest client: a malformed server URL fails at creation, naming the config", "[unit]") {
  Config config;
  config.server = "ftp://x";
  config.source = "kubeconfig /tmp/x, context y";
  auto client = RestClient::Create(config);
  REQUIRE_FALSE(client.ok());
  CHECK_THAT(std::string(client.status().message()), Catch::Contains("kubeconfig /tmp/x"));
  config.server = "https://host:99999";
  CHECK_FALSE(RestClient::Create(config).ok());
}

class FixedRandom : public Random {
 public:
  explicit FixedRandom(double v) : v_(v) {}
  double Uniform01() override { return v_; }

 private:
  double v_;
};

TEST_CASE("informer: backoff grows 800ms x2 to 30s with jitter and resets after quiet", "[unit]") {
  JitteredBackoff backoff{BackoffPolicy{}};
  FixedRandom half(0.5);
  absl::Time t = absl::FromUnixSeconds(1000);
  const double expected_ms[] = {1200, 2400, 4800, 9600, 19200, 38400, 45000, 45000};
  for (double ms : expected_ms) {
    CHECK(backoff.Next(t, half) == absl::Milliseconds(ms));
    t += absl::Seconds(1);
  }
  t += absl::Minutes(3);  // quiet for longer than reset_after
  CHECK(backoff.Next(t, half) == absl::Milliseconds(1200));
  FixedRandom zero(0.0);
  JitteredBackoff unjittered{BackoffPolicy{}};
  CHECK(unjittered.Next(t, zero) == absl::Milliseconds(800));
}

}  // namespace
}  // namespace peregrine::kube
