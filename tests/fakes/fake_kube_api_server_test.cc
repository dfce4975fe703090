// Tests of FakeKubeApiServer driven over HTTP the way a Kubernetes client drives the
// real API server: each case checks one documented API semantic.
#include "tests/fakes/fake_kube_api_server.h"

#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/fakes/test_client.h"

namespace peregrine::testing {
namespace {

using json = nlohmann::json;

constexpr char kPods[] = "/api/v1/namespaces/ns/pods";
constexpr char kJobs[] = "/apis/peregrine.dev/v1alpha1/namespaces/ns/trainingjobs";

// A started server and a client for it; the server is stopped when the test ends.
struct Env {
  explicit Env(FakeKubeApiServerOptions options = {}) : server(options) {
    REQUIRE(server.Start().ok());
    api = std::make_unique<ApiClient>(server.port());
  }
  ~Env() { server.Stop(); }
  std::unique_ptr<WatchStream> Watch(const std::string& path, httplib::Headers headers = {}) {
    return std::make_unique<WatchStream>(server.port(), path, std::move(headers));
  }
  FakeKubeApiServer server;
  std::unique_ptr<ApiClient> api;
};

json Pod(const std::string& name, json labels = json::object()) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", labels}}},
          {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
}

json Job(const std::string& name, int tensor = 1) {
  return {{"apiVersion", "peregrine.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}}},
          {"spec", {{"parallelism", {{"tensor", tensor}}}}}};
}

int64_t Rv(const json& obj) { return std::stoll(obj["metadata"]["resourceVersion"].get<std::string>()); }

std::set<std::string> Names(const json& list) {
  std::set<std::string> names;
  for (const json& item : list["items"]) names.insert(item["metadata"]["name"].get<std::string>());
  return names;
}

// The watch events with their type and object name, e.g. "ADDED a".
std::vector<std::string> Summaries(const std::vector<json>& events) {
  std::vector<std::string> out;
  for (const json& e : events) {
    std::string name = e["object"]["metadata"].value("name", "");
    out.push_back(name.empty() ? e["type"].get<std::string>()
                               : absl::StrCat(e["type"].get<std::string>(), " ", name));
  }
  return out;
}

TEST_CASE("create sets server fields, get reads them, duplicates get 409 AlreadyExists",
          "[unit]") {
  Env env;
  json sent = Pod("a");
  sent["status"] = {{"phase", "Running"}};
  ApiReply created = env.api->Post(kPods, sent);
  REQUIRE(created.code == 201);
  const json& meta = created.body["metadata"];
  CHECK(meta["namespace"] == "ns");
  CHECK(meta["uid"].get<std::string>().size() == 36);
  CHECK(meta.contains("creationTimestamp"));
  CHECK(meta["generation"] == 1);
  CHECK(created.body["status"]["phase"] == "Pending");  // status is the server's on create
  CHECK(Rv(created.body) == env.server.ResourceVersionForTest());

  ApiReply got = env.api->Get(absl::StrCat(kPods, "/a"));
  REQUIRE(got.code == 200);
  CHECK(got.body == created.body);

  ApiReply dup = env.api->Post(kPods, Pod("a"));
  CHECK(dup.code == 409);
  CHECK(dup.body["kind"] == "Status");
  CHECK(dup.body["reason"] == "AlreadyExists");
  CHECK(dup.body["message"] == "pods \"a\" already exists");

  ApiReply missing = env.api->Get(absl::StrCat(kPods, "/nope"));
  CHECK(missing.code == 404);
  CHECK(missing.body["reason"] == "NotFound");
  CHECK(missing.body["details"]["kind"] == "pods");

  json generated = Pod("");
  generated["metadata"].erase("name");
  generated["metadata"]["generateName"] = "worker-";
  ApiReply gen = env.api->Post(kPods, generated);
  REQUIRE(gen.code == 201);
  std::string name = gen.body["metadata"]["name"];
  CHECK(name.rfind("worker-", 0) == 0);
  CHECK(name.size() == std::string("worker-").size() + 5);
  CHECK(Rv(gen.body) > Rv(created.body));

  json with_rv = Pod("b");
  with_rv["metadata"]["resourceVersion"] = "7";
  CHECK(env.api->Post(kPods, with_rv).code == 500);
  json other_ns = Pod("c");
  other_ns["metadata"]["namespace"] = "elsewhere";
  CHECK(env.api->Post(kPods, other_ns).code == 400);
  CHECK(env.api->Post(kPods, Pod("Upper_Case")).code == 422);
}

TEST_CASE("list filters by namespace, built-in list items omit kind, custom ones keep it",
          "[unit]") {
  Env env;
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  REQUIRE(env.api->Post("/api/v1/namespaces/other/pods", Pod("b")).code == 201);
  REQUIRE(env.api->Post(kJobs, Job("j")).code == 201);

  ApiReply ns_list = env.api->Get(kPods);
  REQUIRE(ns_list.code == 200);
  CHECK(ns_list.body["kind"] == "PodList");
  CHECK(Names(ns_list.body) == std::set<std::string>{"a"});
  CHECK_FALSE(ns_list.body["items"][0].contains("kind"));
  CHECK(std::to_string(env.server.ResourceVersionForTest()) ==
        ns_list.body["metadata"]["resourceVersion"]);

  CHECK(Names(env.api->Get("/api/v1/pods").body) == std::set<std::string>{"a", "b"});
  ApiReply jobs = env.api->Get(kJobs);
  CHECK(jobs.body["kind"] == "TrainingJobList");
  CHECK(jobs.body["items"][0]["kind"] == "TrainingJob");
}

TEST_CASE("label and field selectors follow the documented syntax", "[unit]") {
  Env env;
  REQUIRE(env.api->Post(kPods, Pod("web-a", {{"app", "web"}, {"tier", "a"}})).code == 201);
  REQUIRE(env.api->Post(kPods, Pod("web-b", {{"app", "web"}, {"tier", "b"}})).code == 201);
  REQUIRE(env.api->Post(kPods, Pod("db", {{"app", "db"}})).code == 201);
  REQUIRE(env.api->Post(kPods, Pod("bare")).code == 201);
  REQUIRE(env.server.SetPodPhaseForTest("ns", "db", "Running").ok());

  using Names_ = std::set<std::string>;
  struct Case {
    std::string query;
    Names_ want;
  };
  std::vector<Case> cases = {
      {"labelSelector=app%3Dweb", {"web-a", "web-b"}},
      {"labelSelector=app%3D%3Dweb", {"web-a", "web-b"}},
      {"labelSelector=app!%3Dweb", {"db", "bare"}},  // != also matches objects without the key
      {"labelSelector=tier%20in%20(a,%20b)", {"web-a", "web-b"}},
      {"labelSelector=tier%20notin%20(a)", {"web-b", "db", "bare"}},
      {"labelSelector=app", {"web-a", "web-b", "db"}},
      {"labelSelector=!app", {"bare"}},
      {"labelSelector=app%3Dweb,tier%3Db", {"web-b"}},
      {"labelSelector=", {"web-a", "web-b", "db", "bare"}},
      {"fieldSelector=metadata.name%3Ddb", {"db"}},
      {"fieldSelector=metadata.name!%3Ddb", {"web-a", "web-b", "bare"}},
      {"fieldSelector=status.phase%3DRunning", {"db"}},
      {"labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dweb-a", {"web-a"}},
  };
  for (const Case& c : cases) {
    INFO(c.query);
    ApiReply r = env.api->Get(absl::StrCat(kPods, "?", c.query));
    REQUIRE(r.code == 200);
    CHECK(Names(r.body) == c.want);
  }
  for (std::string garbage : {"labelSelector=tier%20in%20(a", "labelSelector=%3Dx",
                              "labelSelector=a%20b%20c", "labelSelector=app%3D%25%25",
                              "fieldSelector=spec.secret%3Dx", "fieldSelector=nonsense"}) {
    INFO(garbage);
    ApiReply r = env.api->Get(absl::StrCat(kPods, "?", garbage));
    CHECK(r.code == 400);
    CHECK(r.body["reason"] == "BadRequest");
  }
}

TEST_CASE("update with a stale resourceVersion gets 409 Conflict", "[unit]") {
  Env env;
  json pod = env.api->Post(kPods, Pod("a")).body;
  json first = pod;
  first["metadata"]["labels"] = {{"v", "1"}};
  ApiReply ok = env.api->Put(absl::StrCat(kPods, "/a"), first);
  REQUIRE(ok.code == 200);
  CHECK(Rv(ok.body) > Rv(pod));

  json stale = pod;  // still carries the old resourceVersion
  stale["metadata"]["labels"] = {{"v", "2"}};
  ApiReply conflict = env.api->Put(absl::StrCat(kPods, "/a"), stale);
  CHECK(conflict.code == 409);
  CHECK(conflict.body["reason"] == "Conflict");
  CHECK(conflict.body["message"] ==
        "Operation cannot be fulfilled on pods \"a\": the object has been modified; please "
        "apply your changes to the latest version and try again");

  // A no-op update stores nothing: same resourceVersion, no new event.
  int64_t before = env.server.ResourceVersionForTest();
  ApiReply same = env.api->Put(absl::StrCat(kPods, "/a"), ok.body);
  CHECK(same.code == 200);
  CHECK(Rv(same.body) == Rv(ok.body));
  CHECK(env.server.ResourceVersionForTest() == before);

  // Built-in types accept an unconditional update; custom resources require the version.
  json unconditional = ok.body;
  unconditional["metadata"].erase("resourceVersion");
  unconditional["metadata"]["labels"] = {{"v", "3"}};
  CHECK(env.api->Put(absl::StrCat(kPods, "/a"), unconditional).code == 200);
  json job = env.api->Post(kJobs, Job("j")).body;
  job["metadata"].erase("resourceVersion");
  ApiReply invalid = env.api->Put(absl::StrCat(kJobs, "/j"), job);
  CHECK(invalid.code == 422);
  CHECK(invalid.body["reason"] == "Invalid");

  CHECK(env.api->Put(absl::StrCat(kPods, "/missing"), Pod("missing")).code == 404);
  CHECK(env.api->Put(absl::StrCat(kPods, "/a"), Pod("b")).code == 400);  // name != URL
}

TEST_CASE("status subresource: spec and status are written separately, generation follows spec",
          "[unit]") {
  Env env;
  json sent = Job("j", 2);
  sent["status"] = {{"phase", "Running"}};
  json job = env.api->Post(kJobs, sent).body;
  CHECK_FALSE(job.contains("status"));  // status is dropped on create
  CHECK(job["metadata"]["generation"] == 1);
  const std::string path = absl::StrCat(kJobs, "/j");

  // The status subresource changes status only; spec edits sent there are ignored.
  json status_write = job;
  status_write["status"] = {{"phase", "Running"}, {"observedGeneration", 1}};
  status_write["spec"]["parallelism"]["tensor"] = 99;
  ApiReply s = env.api->Put(path + "/status", status_write);
  REQUIRE(s.code == 200);
  CHECK(s.body["status"]["phase"] == "Running");
  CHECK(s.body["spec"]["parallelism"]["tensor"] == 2);
  CHECK(s.body["metadata"]["generation"] == 1);
  CHECK(Rv(s.body) > Rv(job));

  // The main resource ignores status; a metadata-only change keeps the generation.
  json main_write = s.body;
  main_write["status"] = {{"phase", "Failed"}};
  main_write["metadata"]["labels"] = {{"team", "x"}};
  ApiReply m = env.api->Put(path, main_write);
  REQUIRE(m.code == 200);
  CHECK(m.body["status"]["phase"] == "Running");
  CHECK(m.body["metadata"]["labels"]["team"] == "x");
  CHECK(m.body["metadata"]["generation"] == 1);

  // A spec change bumps the generation by one.
  ApiReply spec = env.api->Patch(path, {{"spec", {{"parallelism", {{"tensor", 4}}}}}});
  REQUIRE(spec.code == 200);
  CHECK(spec.body["metadata"]["generation"] == 2);
  CHECK(spec.body["status"]["phase"] == "Running");

  // Merge patch on the status subresource; stale versions are rejected there too.
  ApiReply sp = env.api->Patch(path + "/status", {{"status", {{"observedGeneration", 2}}}});
  REQUIRE(sp.code == 200);
  CHECK(sp.body["status"] == json{{"phase", "Running"}, {"observedGeneration", 2}});
  CHECK(env.api->Put(path + "/status", s.body).code == 409);
  CHECK(env.api->Post(path + "/status", job).code == 405);
  CHECK(env.api->Get(absl::StrCat(kPods, "/x/status")).code == 404);
  CHECK(env.api->Get("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l/status").code == 404);
}

TEST_CASE("merge patch follows RFC 7386, JSON patch follows RFC 6902", "[unit]") {
  Env env;
  json pod = Pod("a", {{"keep", "1"}, {"drop", "2"}});
  pod["metadata"]["annotations"] = {{"x", "y"}};
  json created = env.api->Post(kPods, pod).body;
  const std::string path = absl::StrCat(kPods, "/a");

  json patch = {{"metadata",
                 {{"labels", {{"drop", nullptr}, {"new", "3"}}}, {"annotations", nullptr}}}};
  ApiReply r = env.api->Patch(path, patch);
  REQUIRE(r.code == 200);
  CHECK(r.body["metadata"]["labels"] == json{{"keep", "1"}, {"new", "3"}});
  CHECK_FALSE(r.body["metadata"].contains("annotations"));
  CHECK(r.body["spec"] == created["spec"]);

  // Lists are replaced wholesale.
  ApiReply lists = env.api->Patch(path, {{"spec", {{"containers", {{{"name", "d"}}}}}}});
  REQUIRE(lists.code == 200);
  CHECK(lists.body["spec"]["containers"] == json{{{"name", "d"}}});

  // A resourceVersion in the patch is a precondition.
  json stale = {{"metadata", {{"resourceVersion", created["metadata"]["resourceVersion"]},
                              {"labels", {{"z", "1"}}}}}};
  CHECK(env.api->Patch(path, stale).code == 409);
  json fresh = {{"metadata", {{"resourceVersion", lists.body["metadata"]["resourceVersion"]},
                              {"labels", {{"z", "1"}}}}}};
  CHECK(env.api->Patch(path, fresh).code == 200);

  json ops = {{{"op", "test"}, {"path", "/metadata/labels/z"}, {"value", "1"}},
              {{"op", "replace"}, {"path", "/metadata/labels/z"}, {"value", "2"}}};
  ApiReply jp = env.api->Patch(path, ops, "application/json-patch+json");
  REQUIRE(jp.code == 200);
  CHECK(jp.body["metadata"]["labels"]["z"] == "2");
  json failing = {{{"op", "test"}, {"path", "/metadata/labels/z"}, {"value", "1"}}};
  CHECK(env.api->Patch(path, failing, "application/json-patch+json").code == 422);

  ApiReply smp = env.api->Patch(path, patch, "application/strategic-merge-patch+json");
  CHECK(smp.code == 415);
  CHECK(smp.body["reason"] == "UnsupportedMediaType");
  CHECK(env.api->Patch(absl::StrCat(kPods, "/missing"), patch).code == 404);
}

TEST_CASE("watch from a listed resourceVersion sees every later event in order",
          "[integration]") {
  Env env;
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  ApiReply list = env.api->Get(kPods);
  std::string rv = list.body["metadata"]["resourceVersion"];
  auto watch = env.Watch(absl::StrCat(kPods, "?watch=true&resourceVersion=", rv));
  // A client that accepts gzip still gets each event as it happens, not at stream end.
  auto gzip = env.Watch(absl::StrCat(kPods, "?watch=true&resourceVersion=", rv),
                        {{"Accept-Encoding", "gzip, deflate"}});

  json b = env.api->Post(kPods, Pod("b")).body;
  b["metadata"]["labels"] = {{"x", "1"}};
  REQUIRE(env.api->Put(absl::StrCat(kPods, "/b"), b).code == 200);
  REQUIRE(env.api->Delete(absl::StrCat(kPods, "/a")).code == 200);
  REQUIRE(env.api->Post("/api/v1/namespaces/other/pods", Pod("c")).code == 201);  // not watched
  REQUIRE(env.api->Post(kPods, Pod("d")).code == 201);

  std::vector<json> events = watch->WaitForEvents(4);
  REQUIRE(events.size() >= 4);
  CHECK(Summaries(events) ==
        std::vector<std::string>{"ADDED b", "MODIFIED b", "DELETED a", "ADDED d"});
  int64_t last = std::stoll(rv);
  for (const json& e : events) {
    CHECK(Rv(e["object"]) > last);  // the DELETED object carries the deletion's version
    last = Rv(e["object"]);
  }
  CHECK(watch->http_status() == 200);
  CHECK(Summaries(gzip->WaitForEvents(4)) == Summaries(events));

  // Without a resourceVersion the watch starts with the current state as ADDED events.
  auto fresh = env.Watch(absl::StrCat(kPods, "?watch=1"));
  CHECK(Summaries(fresh->WaitForEvents(2)) == std::vector<std::string>{"ADDED b", "ADDED d"});
}

TEST_CASE("a selector watch sees objects enter and leave the selection", "[integration]") {
  Env env;
  // From a resourceVersion: the events after it arrive however late the watch connects
  // (without one, a watch connecting after the writes sees only the current state).
  const std::string rv = std::to_string(env.server.ResourceVersionForTest());
  auto watch = env.Watch(absl::StrCat(kPods, "?watch=true&labelSelector=app%3Dweb&resourceVersion=", rv));
  json a = env.api->Post(kPods, Pod("a", {{"app", "web"}})).body;
  REQUIRE(env.api->Post(kPods, Pod("other", {{"app", "db"}})).code == 201);
  REQUIRE(env.api->Patch(absl::StrCat(kPods, "/a"), {{"metadata", {{"labels", {{"app", "db"}}}}}})
              .code == 200);
  REQUIRE(env.api->Patch(absl::StrCat(kPods, "/a"), {{"metadata", {{"labels", {{"app", "web"}}}}}})
              .code == 200);
  std::vector<json> events = watch->WaitForEvents(3);
  CHECK(Summaries(events) == std::vector<std::string>{"ADDED a", "DELETED a", "ADDED a"});
}

TEST_CASE("bookmarks carry only the resourceVersion and come only when allowed",
          "[integration]") {
  FakeKubeApiServerOptions options;
  options.bookmark_interval = absl::Milliseconds(1);
  Env env(options);
  auto with = env.Watch(absl::StrCat(kPods, "?watch=true&allowWatchBookmarks=true"));
  auto without = env.Watch(absl::StrCat(kPods, "?watch=true"));
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  REQUIRE(env.api->Post("/api/v1/namespaces/other/pods", Pod("b")).code == 201);

  // Periodic bookmarks arrive, and a bookmark at the latest version follows the write
  // the watcher did not see.
  int64_t latest = env.server.ResourceVersionForTest();
  bool saw_latest = false;
  for (size_t n = 2; !saw_latest && n < 10000; ++n) {
    std::vector<json> events = with->WaitForEvents(n);
    REQUIRE(events.size() >= n);
    const json& e = events.back();
    if (e["type"] != "BOOKMARK") continue;
    CHECK(e["object"]["kind"] == "Pod");
    CHECK(e["object"]["metadata"].size() == 1);
    saw_latest = Rv(e["object"]) == latest;
  }
  CHECK(saw_latest);

  REQUIRE(env.api->Post(kPods, Pod("c")).code == 201);
  std::vector<json> plain = without->WaitForEvents(2);
  CHECK(Summaries(plain) == std::vector<std::string>{"ADDED a", "ADDED c"});
}

TEST_CASE("EmitBookmarksForTest sends a bookmark now", "[integration]") {
  Env env;  // default interval: one minute
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  std::string rv = std::to_string(env.server.ResourceVersionForTest());
  auto watch =
      env.Watch(absl::StrCat(kPods, "?watch=true&allowWatchBookmarks=true&resourceVersion=", rv));
  // The watch must be open before the bookmark is requested.
  REQUIRE(WaitUntil([&] { return env.server.OpenWatchCountForTest() >= 1; }));
  env.server.EmitBookmarksForTest();
  std::vector<json> events = watch->WaitForEvents(1);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["type"] == "BOOKMARK");
  CHECK(events[0]["object"]["metadata"]["resourceVersion"] == rv);
}

TEST_CASE("sendInitialEvents ends the initial state with an annotated bookmark",
          "[integration]") {
  Env env;
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  auto watch = env.Watch(absl::StrCat(kPods,
                                      "?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
                                      "&resourceVersionMatch=NotOlderThan"));
  std::vector<json> events = watch->WaitForEvents(2);
  REQUIRE(events.size() >= 2);
  CHECK(Summaries(events)[0] == "ADDED a");
  CHECK(events[1]["type"] == "BOOKMARK");
  CHECK(events[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true");
  CHECK(env.api->Get(absl::StrCat(kPods, "?watch=true&sendInitialEvents=true")).code == 422);
}

TEST_CASE("a resourceVersion older than the kept history gets 410 Expired", "[integration]") {
  Env env;
  json a = env.api->Post(kPods, Pod("a")).body;
  std::string old_rv = a["metadata"]["resourceVersion"];
  REQUIRE(env.api->Post(kPods, Pod("b")).code == 201);

  // Before compaction an exact list shows the state as of that version.
  ApiReply exact =
      env.api->Get(absl::StrCat(kPods, "?resourceVersion=", old_rv, "&resourceVersionMatch=Exact"));
  REQUIRE(exact.code == 200);
  CHECK(Names(exact.body) == std::set<std::string>{"a"});
  CHECK(exact.body["metadata"]["resourceVersion"] == old_rv);

  env.server.CompactForTest();
  auto watch = env.Watch(absl::StrCat(kPods, "?watch=true&resourceVersion=", old_rv));
  std::vector<json> events = watch->WaitForEvents(1);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["type"] == "ERROR");
  CHECK(events[0]["object"]["kind"] == "Status");
  CHECK(events[0]["object"]["code"] == 410);
  CHECK(events[0]["object"]["reason"] == "Expired");
  CHECK(watch->WaitForEnd());
  CHECK(watch->http_status() == 200);

  ApiReply gone =
      env.api->Get(absl::StrCat(kPods, "?resourceVersion=", old_rv, "&resourceVersionMatch=Exact"));
  CHECK(gone.code == 410);
  CHECK(gone.body["reason"] == "Expired");
  ApiReply newer = env.api->Get(
      absl::StrCat(kPods, "?resourceVersion=", old_rv, "&resourceVersionMatch=NotOlderThan"));
  CHECK(newer.code == 200);
  CHECK(Names(newer.body) == std::set<std::string>{"a", "b"});
  ApiReply future = env.api->Get(absl::StrCat(kPods, "?resourceVersion=999999"));
  CHECK(future.code == 504);
  CHECK(env.api->Get(absl::StrCat(kPods, "?resourceVersion=abc")).code == 400);
  CHECK(env.api->Get(absl::StrCat(kPods, "?resourceVersionMatch=Exact")).code == 400);
}

TEST_CASE("a watcher that falls behind the history limit gets 410", "[integration]") {
  FakeKubeApiServerOptions options;
  options.history_limit = 2;
  Env env(options);
  json a = env.api->Post(kPods, Pod("a")).body;
  for (const char* name : {"b", "c", "d"}) REQUIRE(env.api->Post(kPods, Pod(name)).code == 201);
  auto watch = env.Watch(absl::StrCat(kPods, "?watch=true&resourceVersion=",
                                      a["metadata"]["resourceVersion"].get<std::string>()));
  std::vector<json> events = watch->WaitForEvents(1);
  REQUIRE(!events.empty());
  CHECK(events[0]["object"]["code"] == 410);
}

TEST_CASE("limit and continue page through one consistent snapshot", "[unit]") {
  Env env;
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    REQUIRE(env.api->Post(kPods, Pod(name)).code == 201);
  }
  ApiReply page1 = env.api->Get(absl::StrCat(kPods, "?limit=2"));
  REQUIRE(page1.code == 200);
  CHECK(Names(page1.body) == std::set<std::string>{"a", "b"});
  std::string token = page1.body["metadata"]["continue"];
  REQUIRE(env.api->Post(kPods, Pod("bb")).code == 201);  // after the snapshot
  REQUIRE(env.api->Delete(absl::StrCat(kPods, "/d")).code == 200);

  ApiReply page2 = env.api->Get(absl::StrCat(kPods, "?limit=2&continue=", token));
  REQUIRE(page2.code == 200);
  CHECK(Names(page2.body) == std::set<std::string>{"c", "d"});
  CHECK(page2.body["metadata"]["resourceVersion"] == page1.body["metadata"]["resourceVersion"]);
  ApiReply page3 = env.api->Get(
      absl::StrCat(kPods, "?limit=2&continue=", page2.body["metadata"]["continue"].get<std::string>()));
  CHECK(Names(page3.body) == std::set<std::string>{"e"});
  CHECK_FALSE(page3.body["metadata"].contains("continue"));

  CHECK(env.api->Get(absl::StrCat(kPods, "?limit=2&continue=garbage!")).code == 400);
  CHECK(env.api->Get(absl::StrCat(kPods, "?limit=2&resourceVersion=1&continue=", token)).code ==
        400);
  env.server.CompactForTest();
  ApiReply expired = env.api->Get(absl::StrCat(kPods, "?limit=2&continue=", token));
  CHECK(expired.code == 410);
  CHECK(expired.body["reason"] == "Expired");
}

TEST_CASE("finalizers hold a deleted object until they are removed", "[integration]") {
  Env env;
  json pod = Pod("a");
  pod["metadata"]["finalizers"] = {"peregrine.dev/cleanup"};
  json created = env.api->Post(kPods, pod).body;
  auto watch = env.Watch(absl::StrCat(kPods, "?watch=true&resourceVersion=",
                                      created["metadata"]["resourceVersion"].get<std::string>()));

  ApiReply deleted = env.api->Delete(absl::StrCat(kPods, "/a"));
  REQUIRE(deleted.code == 200);
  CHECK(deleted.body["metadata"].contains("deletionTimestamp"));
  CHECK(deleted.body["metadata"]["deletionGracePeriodSeconds"] == 0);
  ApiReply still = env.api->Get(absl::StrCat(kPods, "/a"));
  REQUIRE(still.code == 200);
  CHECK(still.body["metadata"]["deletionTimestamp"] == deleted.body["metadata"]["deletionTimestamp"]);

  json more = still.body;
  more["metadata"]["finalizers"] = {"peregrine.dev/cleanup", "another"};
  CHECK(env.api->Put(absl::StrCat(kPods, "/a"), more).code == 422);  // none may be added now

  REQUIRE(env.api->Patch(absl::StrCat(kPods, "/a"), {{"metadata", {{"finalizers", nullptr}}}})
              .code == 200);
  CHECK(env.api->Get(absl::StrCat(kPods, "/a")).code == 404);
  CHECK(Summaries(watch->WaitForEvents(2)) == std::vector<std::string>{"MODIFIED a", "DELETED a"});
}

TEST_CASE("delete preconditions on uid and resourceVersion", "[unit]") {
  Env env;
  json pod = env.api->Post(kPods, Pod("a")).body;
  const std::string path = absl::StrCat(kPods, "/a");
  ApiReply wrong_uid = env.api->Delete(path, {{"preconditions", {{"uid", "not-the-uid"}}}});
  CHECK(wrong_uid.code == 409);
  CHECK(wrong_uid.body["reason"] == "Conflict");
  CHECK(env.api->Delete(path, {{"preconditions", {{"resourceVersion", "1"}}}}).code == 409);
  CHECK(env.api->Delete(path, {{"propagationPolicy", "Sideways"}}).code == 422);
  ApiReply ok = env.api->Delete(
      path, {{"preconditions", {{"uid", pod["metadata"]["uid"]},
                                {"resourceVersion", pod["metadata"]["resourceVersion"]}}}});
  CHECK(ok.code == 200);
  CHECK(env.api->Delete(path).code == 404);
}

json OwnedPod(const std::string& name, const json& owner, bool block = false) {
  json pod = Pod(name);
  pod["metadata"]["ownerReferences"] = {{{"apiVersion", "peregrine.dev/v1alpha1"},
                                         {"kind", "TrainingJob"},
                                         {"name", owner["metadata"]["name"]},
                                         {"uid", owner["metadata"]["uid"]},
                                         {"controller", true},
                                         {"blockOwnerDeletion", block}}};
  return pod;
}

TEST_CASE("garbage collection follows ownerReferences", "[integration]") {
  Env env;
  json owner = env.api->Post(kJobs, Job("owner")).body;
  json keeper = env.api->Post(kJobs, Job("keeper")).body;
  REQUIRE(env.api->Post(kPods, OwnedPod("p1", owner)).code == 201);
  json two = OwnedPod("p2", owner);
  two["metadata"]["ownerReferences"].push_back(OwnedPod("x", keeper)["metadata"]["ownerReferences"][0]);
  REQUIRE(env.api->Post(kPods, two).code == 201);
  REQUIRE(env.api->Post(kPods, Pod("unowned")).code == 201);

  SECTION("background: dependents whose owners are all gone are deleted") {
    REQUIRE(env.api->Delete(absl::StrCat(kJobs, "/owner")).code == 200);
    CHECK(env.api->Get(absl::StrCat(kPods, "/p1")).code == 404);
    ApiReply p2 = env.api->Get(absl::StrCat(kPods, "/p2"));  // still owned by keeper
    REQUIRE(p2.code == 200);
    REQUIRE(p2.body["metadata"]["ownerReferences"].size() == 1);
    CHECK(p2.body["metadata"]["ownerReferences"][0]["name"] == "keeper");
    CHECK(env.api->Get(absl::StrCat(kPods, "/unowned")).code == 200);
  }
  SECTION("a dependent of an owner uid that no longer exists is collected on create") {
    json ghost = owner;
    ghost["metadata"]["uid"] = "00000000-0000-4000-8000-000000000000";
    REQUIRE(env.api->Post(kPods, OwnedPod("orphan", ghost)).code == 201);
    CHECK(env.api->Get(absl::StrCat(kPods, "/orphan")).code == 404);
  }
  SECTION("orphan: dependents stay and lose the reference") {
    REQUIRE(env.api->Delete(absl::StrCat(kJobs, "/owner"), {{"propagationPolicy", "Orphan"}})
                .code == 200);
    CHECK(env.api->Get(absl::StrCat(kJobs, "/owner")).code == 404);
    ApiReply p1 = env.api->Get(absl::StrCat(kPods, "/p1"));
    REQUIRE(p1.code == 200);
    CHECK_FALSE(p1.body["metadata"].contains("ownerReferences"));
  }
  SECTION("foreground: the owner waits for blocking dependents") {
    json blocking = OwnedPod("blocker", owner, /*block=*/true);
    blocking["metadata"]["finalizers"] = {"test/hold"};
    REQUIRE(env.api->Post(kPods, blocking).code == 201);
    REQUIRE(env.api->Delete(absl::StrCat(kJobs, "/owner"), {{"propagationPolicy", "Foreground"}})
                .code == 200);
    ApiReply waiting = env.api->Get(absl::StrCat(kJobs, "/owner"));
    REQUIRE(waiting.code == 200);
    CHECK(waiting.body["metadata"].contains("deletionTimestamp"));
    CHECK(waiting.body["metadata"]["finalizers"] == json{"foregroundDeletion"});
    CHECK(env.api->Get(absl::StrCat(kPods, "/p1")).code == 404);
    ApiReply held = env.api->Get(absl::StrCat(kPods, "/blocker"));
    REQUIRE(held.code == 200);
    CHECK(held.body["metadata"].contains("deletionTimestamp"));

    REQUIRE(env.api->Patch(absl::StrCat(kPods, "/blocker"),
                           {{"metadata", {{"finalizers", nullptr}}}})
                .code == 200);
    CHECK(env.api->Get(absl::StrCat(kPods, "/blocker")).code == 404);
    CHECK(env.api->Get(absl::StrCat(kJobs, "/owner")).code == 404);
  }
}

TEST_CASE("nodes are cluster-scoped, cordon and labels by merge patch", "[unit]") {
  Env env;
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", "n1"}}},
               {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
  ApiReply created = env.api->Post("/api/v1/nodes", node);
  REQUIRE(created.code == 201);
  CHECK(created.body["status"] == node["status"]);  // registered with its status
  CHECK_FALSE(created.body["metadata"].contains("namespace"));
  CHECK(env.api->Get("/api/v1/namespaces/ns/nodes/n1").code == 404);

  ApiReply cordoned = env.api->Patch(
      "/api/v1/nodes/n1",
      {{"spec", {{"unschedulable", true}}}, {"metadata", {{"labels", {{"peregrine.dev/bad", "true"}}}}}});
  REQUIRE(cordoned.code == 200);
  CHECK(cordoned.body["spec"]["unschedulable"] == true);
  CHECK(cordoned.body["metadata"]["generation"] == 2);
  CHECK(Names(env.api->Get("/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue").body) ==
        std::set<std::string>{"n1"});

  auto watch = env.Watch(absl::StrCat("/api/v1/nodes?watch=true&resourceVersion=",
                                      cordoned.body["metadata"]["resourceVersion"].get<std::string>()));
  REQUIRE(env.server.SetNodeReadyForTest("n1", false).ok());
  std::vector<json> events = watch->WaitForEvents(1);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["type"] == "MODIFIED");
  CHECK(events[0]["object"]["status"]["conditions"][0]["status"] == "False");
  CHECK(events[0]["object"]["metadata"]["generation"] == 2);
}

TEST_CASE("leases and events.k8s.io events", "[unit]") {
  Env env;
  const std::string leases = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
  json lease = {{"metadata", {{"name", "peregrine-controller"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}}}};
  json held = env.api->Post(leases, lease).body;
  CHECK(held["kind"] == "Lease");
  CHECK(held["apiVersion"] == "coordination.k8s.io/v1");
  // Two candidates race to take the lease from the same version: one wins.
  json take_b = held, take_c = held;
  take_b["spec"]["holderIdentity"] = "b";
  take_c["spec"]["holderIdentity"] = "c";
  CHECK(env.api->Put(leases + "/peregrine-controller", take_b).code == 200);
  CHECK(env.api->Put(leases + "/peregrine-controller", take_c).code == 409);

  const std::string events = "/apis/events.k8s.io/v1/namespaces/ns/events";
  json event = {{"metadata", {{"generateName", "job-"}}},
                {"regarding", {{"kind", "TrainingJob"}, {"name", "j"}}},
                {"reason", "Evicted"},
                {"type", "Warning"},
                {"note", "machine evicted"}};
  REQUIRE(env.api->Post(events, event).code == 201);
  event["regarding"]["name"] = "other";
  REQUIRE(env.api->Post(events, event).code == 201);
  CHECK(env.api->Get(events + "?fieldSelector=regarding.name%3Dj").body["items"].size() == 1);
  CHECK(env.api->Get("/api/v1/namespaces/ns/events").body["items"].empty());  // separate store
}

TEST_CASE("fault hooks: injected failures, request counts, kubelet status changes", "[unit]") {
  Env env;
  env.server.FailNextRequestsForTest("create", "pods", 2, 503);
  for (int i = 0; i < 2; ++i) {
    ApiReply r = env.api->Post(kPods, Pod("a"));
    CHECK(r.code == 503);
    CHECK(r.body["reason"] == "ServiceUnavailable");
  }
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  env.server.FailNextRequestsForTest("*", "*", 1, 429);
  CHECK(env.api->Get(kPods).code == 429);
  CHECK(env.api->Get(kPods).code == 200);
  CHECK(env.server.RequestCountForTest("create", "pods") == 3);
  CHECK(env.server.RequestCountForTest("list", "pods") == 2);
  CHECK(env.server.RequestCountForTest("*", "*") == 5);

  httplib::Client authed("127.0.0.1", env.server.port());
  authed.set_bearer_token_auth("token-123");
  REQUIRE(authed.Get(kPods));
  CHECK(env.server.LastAuthorizationForTest() == "Bearer token-123");

  json before = *env.server.GetForTest("pods", "ns", "a");
  REQUIRE(env.server.SetPodPhaseForTest("ns", "a", "Failed").ok());
  json after = *env.server.GetForTest("pods", "ns", "a");
  CHECK(after["status"]["phase"] == "Failed");
  CHECK(after["metadata"]["generation"] == before["metadata"]["generation"]);
  CHECK(Rv(after) > Rv(before));
  CHECK(env.server.SetPodPhaseForTest("ns", "missing", "Failed").code() ==
        absl::StatusCode::kNotFound);

  auto created = env.server.CreateForTest("trainingjobs.peregrine.dev", "ns", Job("j"));
  REQUIRE(created.ok());
  CHECK(env.server.CreateForTest("trainingjobs.peregrine.dev", "ns", Job("j")).status().code() ==
        absl::StatusCode::kAlreadyExists);
}

TEST_CASE("write observer, request counts by verb and resource, whole-object changes", "[unit]") {
  Env env;
  std::vector<std::string> seen;
  env.server.SetWriteObserverForTest([&seen](const FakeKubeApiServer::WriteRecord& w) {
    const json* status = w.response != nullptr && w.response->contains("status") ? &(*w.response)["status"] : nullptr;
    const std::string phase = status != nullptr && status->is_object() ? status->value("phase", "") : "";
    seen.push_back(absl::StrCat(w.verb, " ", w.resource, " ", w.name, " ", w.code, " ", phase));
  });
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  CHECK(env.api->Post(kPods, Pod("a")).code == 409);
  REQUIRE(env.api->Get(absl::StrCat(kPods, "/a")).code == 200);  // reads are not writes
  REQUIRE(env.api->Delete(absl::StrCat(kPods, "/a")).code == 200);
  CHECK(seen == std::vector<std::string>{"create pods  201 Pending", "create pods  409 ", "delete pods a 200 Pending"});
  const auto counts = env.server.RequestCountsForTest();
  CHECK(counts.at({"create", "pods"}) == 2);
  CHECK(counts.at({"get", "pods"}) == 1);
  CHECK(counts.at({"delete", "pods"}) == 1);
  CHECK(counts.size() == 3);

  REQUIRE(env.api->Post(kPods, Pod("b")).code == 201);
  json before = *env.server.GetForTest("pods", "ns", "b");
  REQUIRE(env.server
              .MutateObjectForTest("pods", "ns", "b",
                                   [](json& pod) {
                                     pod["spec"]["nodeName"] = "node-1";
                                     pod["status"]["phase"] = "Running";
                                     pod["metadata"]["uid"] = "forged";  // the server's field: kept
                                   })
              .ok());
  json after = *env.server.GetForTest("pods", "ns", "b");
  CHECK(after["spec"]["nodeName"] == "node-1");
  CHECK(after["status"]["phase"] == "Running");
  CHECK(after["metadata"]["uid"] == before["metadata"]["uid"]);
  CHECK(Rv(after) > Rv(before));
  CHECK(env.server.MutateObjectForTest("pods", "ns", "missing", [](json&) {}).code() == absl::StatusCode::kNotFound);
}

TEST_CASE("dropped watches break the stream, timeoutSeconds ends it cleanly", "[integration]") {
  Env env;
  auto dropped = env.Watch(absl::StrCat(kPods, "?watch=true"));
  auto timed = env.Watch(absl::StrCat(kPods, "?watch=true&timeoutSeconds=1"));
  CHECK(timed->WaitForEnd());
  CHECK(timed->ended_cleanly());
  // Only `dropped` is open once `timed` has been released.
  REQUIRE(WaitUntil([&] { return env.server.OpenWatchCountForTest() == 1; }));
  env.server.DropWatchesForTest();
  CHECK(dropped->WaitForEnd());
  CHECK_FALSE(dropped->ended_cleanly());
  CHECK(dropped->content_type().rfind("application/json", 0) == 0);
}

TEST_CASE("Stop ends every open watch", "[integration]") {
  Env env;
  std::vector<std::unique_ptr<WatchStream>> watches;
  for (int i = 0; i < 3; ++i) watches.push_back(env.Watch(absl::StrCat(kPods, "?watch=true")));
  REQUIRE(WaitUntil([&] { return env.server.OpenWatchCountForTest() >= 3; }));
  env.server.Stop();
  for (auto& w : watches) CHECK(w->WaitForEnd());
  env.server.Stop();  // idempotent
}

TEST_CASE("malformed requests get a Status, never a crash", "[unit]") {
  Env env;
  ApiReply not_json = env.api->Raw("POST", kPods, "{not json");
  CHECK(not_json.code == 400);
  CHECK(not_json.body["kind"] == "Status");
  CHECK(env.api->Raw("POST", kPods, "[1,2]").code == 400);
  CHECK(env.api->Raw("POST", kPods, std::string("\0\xff\xfe", 3)).code == 400);
  json wrong_kind = Pod("a");
  wrong_kind["kind"] = "Service";
  CHECK(env.api->Post(kPods, wrong_kind).code == 400);
  json bad_meta = Pod("a");
  bad_meta["metadata"] = "text";
  CHECK(env.api->Post(kPods, bad_meta).code == 400);
  CHECK(env.api->Get("/api/v1/namespaces/ns/widgets").code == 404);
  CHECK(env.api->Get("/apis/peregrine.dev/v9/namespaces/ns/trainingjobs").code == 404);
  CHECK(env.api->Get("/nonsense").code == 404);
  CHECK(env.api->Put(kPods, Pod("a")).code == 405);
  CHECK(env.api->Post("/api/v1/pods", Pod("a")).code == 405);
  CHECK(env.api->Get(absl::StrCat(kPods, "?limit=-1")).code == 400);
  CHECK(env.api->Get(absl::StrCat(kPods, "?watch=true&timeoutSeconds=x")).code == 400);
  CHECK(env.api->Patch(absl::StrCat(kPods, "/a"), json::array()).code == 404);
  REQUIRE(env.api->Post(kPods, Pod("a")).code == 201);
  CHECK(env.api->Patch(absl::StrCat(kPods, "/a"), json::array()).code == 400);
  CHECK(env.api->Patch(absl::StrCat(kPods, "/a"), json{{"metadata", {{"name", "b"}}}}).code == 400);
}

}  // namespace
}  // namespace peregrine::testing
