// The namespaced mode: --namespace takes a list (repeatable, comma-separated) that
// reaches KubeModeOptions; WatchedNamespaces validates and merges it; an Informer given a
// namespace list lists and watches each namespace on its own and caches only their
// objects (against the fake API server over HTTP), a re-list of one namespace keeping
// the others'.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "controller/kube/informer.h"
#include "controller/kube/kube_command.h"
#include "controller/kube/kube_mode.h"
#include "controller/kube/rest_client.h"
#include "tests/testing/eventually.h"
#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
#include "tests/fakes/fake_kube_api_server.h"
#endif

namespace peregrine {
namespace {

using nlohmann::json;

absl::StatusOr<KubeMainOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"--agent-image", "agent:1", "--controller-address", "c:7400"});
  return ParseKubeMainFlags(args, [](std::string_view) { return std::optional<std::string>(); });
}

TEST_CASE("the namespace flag takes a list of namespaces, repeatable and comma-separated", "[unit]") {
  absl::StatusOr<KubeMainOptions> all = Parse({});
  REQUIRE(all.ok());
  CHECK(all->mode.watch_namespaces.empty());
  CHECK(WatchedNamespaces(all->mode)->empty());  // every namespace

  absl::StatusOr<KubeMainOptions> some = Parse({"--namespace", "team-b,team-a", "--namespace", "team-c"});
  REQUIRE(some.ok());
  CHECK(some->mode.watch_namespaces == std::vector<std::string>{"team-b", "team-a", "team-c"});
  CHECK(*WatchedNamespaces(some->mode) == std::vector<std::string>{"team-a", "team-b", "team-c"});

  absl::StatusOr<KubeMainOptions> empty_entry = Parse({"--namespace", "team-a,,team-b"});
  REQUIRE_FALSE(empty_entry.ok());
  CHECK(absl::StrContains(empty_entry.status().message(), "--namespace: empty namespace in 'team-a,,team-b'"));
}

TEST_CASE("WatchedNamespaces merges the single form, drops repeats and names a bad namespace", "[unit]") {
  KubeModeOptions o;
  o.watch_namespaces = {"b", "a", "b"};
  o.watch_namespace = "a";
  CHECK(*WatchedNamespaces(o) == std::vector<std::string>{"a", "b"});
  for (const std::string& bad : std::vector<std::string>{"Team", "-a", "a-", "a/b", "a_b", std::string(64, 'a')}) {
    INFO(bad);
    o.watch_namespaces = {"ok", bad};
    absl::StatusOr<std::vector<std::string>> got = WatchedNamespaces(o);
    REQUIRE_FALSE(got.ok());
    CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(got.status().message(), "'" + bad + "' is not a namespace name"));
  }
  // KubeMode refuses it before connecting to anything.
  o.watch_namespaces = {"Bad"};
  o.controller_address = "c:7400";
  o.agent_image = "agent:1";
  kube::Config config;
  config.server = "http://127.0.0.1:1";
  auto mode = KubeMode::Start(config, o);
  REQUIRE_FALSE(mode.ok());
  CHECK(absl::StrContains(mode.status().message(), "'Bad' is not a namespace name"));
}

#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER

json Pod(const std::string& ns, const std::string& name) {
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"labels", {{"peregrine.dev/job", "j"}}}}},
              {"spec", {{"containers", json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
}

kube::ResourcePath PodsIn(const std::string& ns) {
  return kube::ResourcePath{.group = "", .version = "v1", .plural = "pods", .namespace_name = ns};
}

bool Eventually(const std::function<bool()>& condition) {
  return testing::Eventually(condition, absl::Seconds(60), absl::Milliseconds(5));
}

TEST_CASE("an informer with a namespace list caches those namespaces only, each re-listed on its own", "[integration]") {
  testing::FakeKubeApiServer server;
  REQUIRE(server.Start().ok());
  kube::Config config;
  config.server = server.base_url();
  config.source = "test";
  auto client = kube::RestClient::Create(config);
  REQUIRE(client.ok());
  for (const char* ns : {"team-a", "team-b", "other"}) {
    REQUIRE((*client)->Create(PodsIn(ns), Pod(ns, "p0")).ok());
  }
  kube::InformerOptions options;
  options.resource = PodsIn("");
  options.namespaces = {"team-b", "team-a", "team-b"};
  options.label_selector = "peregrine.dev/job";
  options.backoff.initial = absl::Milliseconds(10);
  options.backoff.max = absl::Milliseconds(200);
  SeededRandom random(7);
  kube::Informer informer(client->get(), options, RealClock(), &random);
  informer.Start();
  REQUIRE(Eventually([&] { return informer.HasSynced(); }));
  CHECK(informer.ListCount() == 2);  // one list per namespace (the repeat dropped)
  CHECK(informer.Keys() == std::vector<std::string>{"team-a/p0", "team-b/p0"});

  // Watched: a pod in the unwatched namespace never shows, the one after it in team-b does.
  REQUIRE((*client)->Create(PodsIn("other"), Pod("other", "p1")).ok());
  REQUIRE((*client)->Create(PodsIn("team-b"), Pod("team-b", "p1")).ok());
  REQUIRE(Eventually([&] { return informer.Get("team-b/p1") != nullptr; }));
  CHECK(informer.Get("other/p1") == nullptr);
  CHECK(informer.Get("other/p0") == nullptr);

  // After a compaction (and a write neither namespace sees) both namespaces re-list; each
  // re-list replaces its own namespace's objects and keeps the other's.
  const int lists = informer.ListCount();
  REQUIRE((*client)->Create(PodsIn("other"), Pod("other", "p2")).ok());
  server.CompactForTest();
  server.DropWatchesForTest();
  REQUIRE(Eventually([&] { return informer.ListCount() >= lists + 2 && informer.HasSynced(); }));
  CHECK(informer.Keys() == std::vector<std::string>{"team-a/p0", "team-b/p0", "team-b/p1"});
  REQUIRE((*client)->Delete(PodsIn("team-a"), "p0").ok());
  REQUIRE(Eventually([&] { return informer.Get("team-a/p0") == nullptr; }));
  CHECK(informer.Keys() == std::vector<std::string>{"team-b/p0", "team-b/p1"});
  informer.Stop();
  server.Stop();
}

#endif  // PEREGRINE_HAVE_FAKE_KUBE_API_SERVER

}  // namespace
}  // namespace peregrine
