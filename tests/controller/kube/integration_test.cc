// The real client against the in-process fake API server (HTTP on 127.0.0.1, port 0):
// CRUD and error mapping, optimistic concurrency, informers through dropped watches and
// 410s, leader election between two electors, Event aggregation.
// Every test stops and joins what it started; conditions are polled with a generous
// deadline, never slept for.
#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/leader_election.h"
#include "controller/kube/rest_client.h"
#include "tests/fakes/fake_kube_api_server.h"

namespace peregrine::kube {
namespace {

using nlohmann::json;
using testing::FakeKubeApiServer;

const ResourcePath kPods{.group = "", .version = "v1", .plural = "pods", .namespace_name = "train"};
const ResourcePath kJobs{.group = "peregrine.dev", .version = "v1alpha1", .plural = "trainingjobs",
                         .namespace_name = "train"};

// Polls `condition` until it holds or a deadline far beyond any healthy run passes.
bool Eventually(const std::function<bool()>& condition,
                absl::Duration deadline = absl::Seconds(60)) {
  const absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

class CountingObserver : public RequestObserver {
 public:
  void OnRequestDone(absl::string_view verb, absl::string_view resource, int http_code,
                     absl::Duration) override {
    absl::MutexLock lock(&mu_);
    ++counts_[absl::StrCat(verb, " ", resource, " ", http_code)];
  }
  int Count(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return counts_[key];
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, int> counts_ ABSL_GUARDED_BY(mu_);
};

struct Fixture {
  Fixture() {
    REQUIRE(server.Start().ok());
    Config config;
    config.server = server.base_url();
    config.bearer_token = "test-token";
    config.source = "test";
    RestClientOptions options;
    options.observer = &observer;
    auto created = RestClient::Create(config, options);
    REQUIRE(created.ok());
    client = *std::move(created);
  }
  FakeKubeApiServer server;
  CountingObserver observer;
  std::unique_ptr<RestClient> client;
};

json Pod(const std::string& name, const std::string& job) {
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "train"},
                            {"labels", {{"peregrine.dev/job", job}}}}},
              {"spec", {{"containers", json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
}

json Job(const std::string& name) {
  return json{{"apiVersion", "peregrine.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", name}, {"namespace", "train"}}},
              {"spec", {{"replicas", 2}}}};
}

std::string Rv(const json& object) { return object["metadata"]["resourceVersion"].get<std::string>(); }

TEST_CASE("kube integration: create, get, list, patch, conflicts and deletes", "[integration]") {
  Fixture f;
  auto created = f.client->Create(kPods, Pod("p-0", "job-a"));
  REQUIRE(created.ok());
  CHECK(f.server.LastAuthorizationForTest() == "Bearer test-token");
  REQUIRE(f.client->Create(kPods, Pod("p-1", "job-b")).ok());
  CHECK(f.client->Create(kPods, Pod("p-0", "job-a")).status().code() ==
        absl::StatusCode::kAlreadyExists);

  auto got = f.client->Get(kPods, "p-0");
  REQUIRE(got.ok());
  CHECK((*got)["metadata"]["uid"] == (*created)["metadata"]["uid"]);
  CHECK(f.client->Get(kPods, "nope").status().code() == absl::StatusCode::kNotFound);

  ListOptions by_job;
  by_job.label_selector = "peregrine.dev/job=job-b";
  auto selected = f.client->List(kPods, by_job);
  REQUIRE(selected.ok());
  REQUIRE((*selected)["items"].size() == 1);
  CHECK((*selected)["items"][0]["metadata"]["name"] == "p-1");
  CHECK_FALSE((*selected)["metadata"]["resourceVersion"].get<std::string>().empty());

  // Pages are followed to the end.
  for (int i = 2; i < 7; ++i) REQUIRE(f.client->Create(kPods, Pod(absl::StrCat("p-", i), "job-c")).ok());
  ListOptions small_pages;
  small_pages.page_size = 2;
  auto paged = f.client->List(kPods, small_pages);
  REQUIRE(paged.ok());
  CHECK((*paged)["items"].size() == 7);

  auto patched = f.client->MergePatch(kPods, "p-0", json{{"metadata", {{"labels", {{"extra", "1"}}}}}});
  REQUIRE(patched.ok());
  CHECK((*patched)["metadata"]["labels"]["extra"] == "1");
  CHECK((*patched)["metadata"]["labels"]["peregrine.dev/job"] == "job-a");

  // A write conditioned on the old resourceVersion conflicts: kAborted.
  json stale = *got;
  stale["metadata"]["labels"]["x"] = "y";
  auto conflict = f.client->Update(kPods, "p-0", stale);
  REQUIRE_FALSE(conflict.ok());
  CHECK(IsConflict(conflict.status()));
  CHECK(KubeReason(conflict.status()) == "Conflict");

  // Delete preconditions.
  const std::string uid = (*created)["metadata"]["uid"];
  DeleteOptions wrong_uid, stale_version, right_uid;
  wrong_uid.precondition_uid = "wrong-uid";
  stale_version.precondition_resource_version = Rv(*got);
  right_uid.precondition_uid = uid;
  CHECK(IsConflict(f.client->Delete(kPods, "p-0", wrong_uid)));
  CHECK(IsConflict(f.client->Delete(kPods, "p-0", stale_version)));
  REQUIRE(f.client->Delete(kPods, "p-0", right_uid).ok());
  CHECK(absl::IsNotFound(f.client->Get(kPods, "p-0").status()));
  CHECK(absl::IsNotFound(f.client->Delete(kPods, "p-0")));

  CHECK(f.observer.Count("CREATE pods 201") == 7);
  CHECK(f.observer.Count("CREATE pods 409") == 1);
  CHECK(f.observer.Count("GET pods 404") == 2);
  CHECK(f.observer.Count("DELETE pods 409") == 2);
}

TEST_CASE("kube integration: 429 with Retry-After is retried and 5xx maps to Unavailable",
          "[integration]") {
  Fixture f;
  REQUIRE(f.client->Create(kPods, Pod("p-0", "job-a")).ok());
  f.server.FailNextRequestsForTest("get", "pods", 1, 429);
  const int before = f.server.RequestCountForTest("get", "pods");
  auto got = f.client->Get(kPods, "p-0");
  INFO(got.status().ToString());
  REQUIRE(got.ok());
  CHECK(f.server.RequestCountForTest("get", "pods") == before + 2);
  CHECK(f.observer.Count("GET pods 429") == 1);

  f.server.FailNextRequestsForTest("patch", "pods", 1, 500);
  auto failed = f.client->MergePatch(kPods, "p-0", json{{"metadata", {{"labels", {{"a", "b"}}}}}});
  CHECK(failed.status().code() == absl::StatusCode::kUnavailable);
  CHECK(HttpCode(failed.status()) == 500);

  Config nowhere;
  nowhere.server = "http://127.0.0.1:1";  // nothing listens on port 1
  auto unreachable = RestClient::Create(nowhere);
  REQUIRE(unreachable.ok());
  CHECK((*unreachable)->Get(kPods, "p-0").status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("kube integration: a status update with a stale resourceVersion is retried after re-reading", "[integration]") {
  Fixture f;
  REQUIRE(f.client->Create(kJobs, Job("job-a")).ok());
  int attempts = 0;
  auto written = UpdateWithRetryOnConflict(
      *f.client, kJobs, "job-a", /*status_subresource=*/true, [&](json& job) -> absl::Status {
        ++attempts;
        if (attempts == 1) {
          // Another writer changes the status between our read and our write.
          absl::Status other = f.server.MutateStatusForTest(
              "trainingjobs.peregrine.dev", "train", "job-a",
              [](json& status) { status["standbyReady"] = 3; });
          if (!other.ok()) return other;
        }
        job["status"]["phase"] = "Running";
        return absl::OkStatus();
      });
  REQUIRE(written.ok());
  CHECK(attempts == 2);
  auto stored = f.client->Get(kJobs, "job-a");
  REQUIRE(stored.ok());
  CHECK((*stored)["status"]["phase"] == "Running");
  CHECK((*stored)["status"]["standbyReady"] == 3);  // the other writer's change survived

  // Without retries left, the conflict is reported as kAborted.
  auto exhausted = UpdateWithRetryOnConflict(
      *f.client, kJobs, "job-a", true,
      [&](json& job) -> absl::Status {
        absl::Status other = f.server.MutateStatusForTest(
            "trainingjobs.peregrine.dev", "train", "job-a",
            [](json& status) { status["standbyReady"] = status["standbyReady"].get<int>() + 1; });
        if (!other.ok()) return other;
        job["status"]["phase"] = "Degraded";
        return absl::OkStatus();
      },
      /*max_attempts=*/2);
  CHECK(exhausted.status().code() == absl::StatusCode::kAborted);
}

class KeyRecorder {
 public:
  void Add(const std::string& key) {
    absl::MutexLock lock(&mu_);
    keys_.insert(key);
  }
  bool Saw(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return keys_.contains(key);
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    keys_.clear();
  }

 private:
  absl::Mutex mu_;
  std::set<std::string> keys_ ABSL_GUARDED_BY(mu_);
};

InformerOptions FastInformerOptions() {
  InformerOptions options;
  options.resource = kPods;
  options.backoff.initial = absl::Milliseconds(10);
  options.backoff.max = absl::Milliseconds(200);
  return options;
}

std::string Label(const ObjectPtr& object, const char* key) {
  if (object == nullptr) return "";
  return (*object)["metadata"]["labels"].value(key, "");
}

TEST_CASE("kube integration: informer lists, watches creates/updates/deletes and indexes by job",
          "[integration]") {
  Fixture f;
  REQUIRE(f.client->Create(kPods, Pod("p-0", "job-a")).ok());
  SeededRandom random(7);
  Informer informer(f.client.get(), FastInformerOptions(), RealClock(), &random);
  informer.AddIndex("job", IndexByLabel("peregrine.dev/job"));
  KeyRecorder keys;
  informer.AddHandler([&](const std::string& key) { keys.Add(key); });
  informer.Start();

  REQUIRE(Eventually([&] { return informer.HasSynced(); }));
  CHECK(keys.Saw("train/p-0"));
  CHECK(informer.Get("train/p-0") != nullptr);

  REQUIRE(f.client->Create(kPods, Pod("p-1", "job-a")).ok());
  REQUIRE(f.client->Create(kPods, Pod("p-2", "job-b")).ok());
  REQUIRE(Eventually([&] { return informer.ByIndex("job", "job-a").size() == 2; }));
  REQUIRE(Eventually([&] { return informer.ByIndex("job", "job-b").size() == 1; }));
  CHECK(keys.Saw("train/p-1"));

  // An update moves p-2 between index buckets.
  REQUIRE(f.client->MergePatch(kPods, "p-2", json{{"metadata", {{"labels", {{"peregrine.dev/job", "job-a"}}}}}}).ok());
  REQUIRE(Eventually([&] { return informer.ByIndex("job", "job-a").size() == 3; }));
  CHECK(informer.ByIndex("job", "job-b").empty());
  CHECK(Label(informer.Get("train/p-2"), "peregrine.dev/job") == "job-a");

  keys.Clear();
  REQUIRE(f.client->Delete(kPods, "p-1").ok());
  REQUIRE(Eventually([&] { return informer.Get("train/p-1") == nullptr; }));
  CHECK(keys.Saw("train/p-1"));
  CHECK(informer.ByIndex("job", "job-a").size() == 2);
  CHECK(informer.Keys() == std::vector<std::string>{"train/p-0", "train/p-2"});
  CHECK(informer.ListCount() == 1);
  CHECK(f.server.RequestCountForTest("watch", "pods") >= 1);
  informer.Stop();
  // The server notices the closed connection when it next writes to it.
  CHECK(Eventually([&] {
    f.server.EmitBookmarksForTest();
    return f.server.OpenWatchCountForTest() == 0;
  }));
}

TEST_CASE("kube integration: informer resumes after a dropped watch and re-lists after 410",
          "[integration]") {
  Fixture f;
  REQUIRE(f.client->Create(kPods, Pod("p-0", "job-a")).ok());
  REQUIRE(f.client->Create(kPods, Pod("p-doomed", "job-a")).ok());
  // Backoff waits run on a manual clock: while the informer is backing off, nothing
  // moves until the test advances the clock, so the order of events is fixed.
  ManualClock clock;
  SeededRandom random(11);
  Informer informer(f.client.get(), FastInformerOptions(), &clock, &random);
  KeyRecorder keys;
  informer.AddHandler([&](const std::string& key) { keys.Add(key); });
  informer.Start();
  REQUIRE(Eventually([&] { return informer.HasSynced() && f.server.OpenWatchCountForTest() == 1; }));
  const auto advance_until = [&](const std::function<bool()>& condition) {
    return Eventually([&] {
      clock.Advance(absl::Minutes(1));
      return condition();
    });
  };

  // Bookmarks advance the resourceVersion without touching the cache.
  REQUIRE(f.client->Create(kJobs, Job("unrelated")).ok());  // bumps the global revision
  const std::string before_bookmark = informer.LastSyncResourceVersion();
  f.server.EmitBookmarksForTest();
  REQUIRE(Eventually([&] { return informer.LastSyncResourceVersion() != before_bookmark; }));
  CHECK(informer.Keys().size() == 2);

  // Dropped watch: the informer backs off, then resumes from its resourceVersion and
  // sees what happened meanwhile as events, without a new list. (The injected failure
  // makes an immediate reconnect fail too, so it always ends up waiting on the clock.)
  f.server.FailNextRequestsForTest("watch", "pods", 1, 503);
  f.server.DropWatchesForTest();
  REQUIRE(Eventually([&] { return !informer.LastError().ok(); }));
  REQUIRE(f.client->Create(kPods, Pod("p-1", "job-a")).ok());
  REQUIRE(advance_until([&] { return informer.Get("train/p-1") != nullptr; }));
  CHECK(informer.ListCount() == 1);

  // 410: the history is compacted while the informer is backing off; resuming from
  // its resourceVersion is refused, so it re-lists, and the list must surface a delete
  // and a create it never saw as events.
  REQUIRE(Eventually([&] { return informer.LastError().ok() && f.server.OpenWatchCountForTest() == 1; }));
  f.server.FailNextRequestsForTest("watch", "pods", 1, 503);
  f.server.DropWatchesForTest();
  REQUIRE(Eventually([&] { return !informer.LastError().ok(); }));
  REQUIRE(f.client->Delete(kPods, "p-doomed").ok());
  REQUIRE(f.client->Create(kPods, Pod("p-2", "job-a")).ok());
  f.server.CompactForTest();
  keys.Clear();
  REQUIRE(advance_until([&] { return informer.ListCount() >= 2; }));
  REQUIRE(Eventually([&] {
    return informer.Get("train/p-2") != nullptr && informer.Get("train/p-doomed") == nullptr;
  }));
  CHECK(keys.Saw("train/p-doomed"));
  CHECK(keys.Saw("train/p-2"));
  // And it watches again from the new list.
  REQUIRE(f.client->Create(kPods, Pod("p-3", "job-a")).ok());
  REQUIRE(advance_until([&] { return informer.Get("train/p-3") != nullptr; }));
  informer.Stop();
  // The server notices the closed connection when it next writes to it.
  CHECK(Eventually([&] {
    f.server.EmitBookmarksForTest();
    return f.server.OpenWatchCountForTest() == 0;
  }));
}

struct Candidate {
  Candidate(RestClient* client, const std::string& id, bool release) : random(id.size()) {
    LeaderElectionConfig config;
    config.lease_namespace = "peregrine-system";
    config.lease_name = "peregrine-controller";
    config.identity = id;
    config.lease_duration = absl::Seconds(2);
    config.renew_deadline = absl::Milliseconds(1500);
    config.retry_period = absl::Milliseconds(200);
    config.release_on_stop = release;
    LeaderCallbacks callbacks;
    callbacks.on_started_leading = [this] { ++started; };
    callbacks.on_stopped_leading = [this] { ++stopped; };
    auto created = LeaderElector::Create(client, config, callbacks, RealClock(), &random);
    REQUIRE(created.ok());
    elector = *std::move(created);
  }
  SeededRandom random;
  std::atomic<int> started{0};
  std::atomic<int> stopped{0};
  std::unique_ptr<LeaderElector> elector;
};

// Samples both electors continuously; a sandwich (a, b, a) all true means both led at
// once, since leadership cannot be lost and regained within microseconds.
class OverlapMonitor {
 public:
  OverlapMonitor(LeaderElector* a, LeaderElector* b) : a_(a), b_(b) {
    thread_ = std::thread([this] {
      while (!done_.load()) {
        const bool a1 = a_->IsLeader();
        const bool b1 = b_->IsLeader();
        const bool a2 = a_->IsLeader();
        const bool b2 = b_->IsLeader();
        if ((a1 && b1 && a2) || (b1 && a2 && b2)) overlap_ = true;
        std::this_thread::yield();
      }
    });
  }
  ~OverlapMonitor() { Finish(); }
  bool Finish() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
    return overlap_.load();
  }

 private:
  LeaderElector* a_;
  LeaderElector* b_;
  std::atomic<bool> done_{false};
  std::atomic<bool> overlap_{false};
  std::thread thread_;
};

void RunTakeover(bool release_on_stop) {
  Fixture f;
  const ResourcePath leases{.group = "coordination.k8s.io", .version = "v1", .plural = "leases",
                            .namespace_name = "peregrine-system"};
  Candidate a(f.client.get(), "replica-a", release_on_stop);
  Candidate b(f.client.get(), "replica-b", release_on_stop);
  OverlapMonitor monitor(a.elector.get(), b.elector.get());
  a.elector->Start();
  b.elector->Start();
  REQUIRE(Eventually([&] { return a.elector->IsLeader() || b.elector->IsLeader(); }));
  Candidate& leader = a.elector->IsLeader() ? a : b;
  Candidate& follower = &leader == &a ? b : a;
  const std::string leader_id = &leader == &a ? "replica-a" : "replica-b";
  const std::string follower_id = &leader == &a ? "replica-b" : "replica-a";
  auto lease = f.client->Get(leases, "peregrine-controller");
  REQUIRE(lease.ok());
  CHECK((*lease)["spec"]["holderIdentity"] == leader_id);
  const int transitions = (*lease)["spec"].value("leaseTransitions", 0);
  REQUIRE(Eventually([&] { return follower.elector->CurrentHolder() == leader_id; }));
  CHECK_FALSE(follower.elector->IsLeader());

  // The leader stops renewing; the follower takes over.
  leader.elector->Stop();
  CHECK_FALSE(leader.elector->IsLeader());
  CHECK(leader.stopped.load() == 1);
  REQUIRE(Eventually([&] { return follower.elector->IsLeader(); }));
  CHECK(follower.started.load() == 1);
  auto after = f.client->Get(leases, "peregrine-controller");
  REQUIRE(after.ok());
  CHECK((*after)["spec"]["holderIdentity"] == follower_id);
  CHECK((*after)["spec"].value("leaseTransitions", 0) == transitions + 1);
  follower.elector->Stop();
  CHECK(follower.stopped.load() == 1);
  CHECK_FALSE(monitor.Finish());
}

TEST_CASE("kube integration: two electors, one leads and the other takes over when the leader stops renewing", "[integration]") {
  RunTakeover(/*release_on_stop=*/false);
}

TEST_CASE("kube integration: two electors, one leads and a released lease is taken over",
          "[integration]") {
  RunTakeover(/*release_on_stop=*/true);
}

TEST_CASE("kube integration: a leader that cannot renew stops leading by the renew deadline",
          "[integration]") {
  Fixture f;
  Candidate a(f.client.get(), "replica-a", false);
  a.elector->Start();
  REQUIRE(Eventually([&] { return a.elector->IsLeader(); }));
  // 20 failures take at least 20 retry periods (4 s), past the 1.5 s renew deadline.
  f.server.FailNextRequestsForTest("*", "leases.coordination.k8s.io", 20, 503);
  REQUIRE(Eventually([&] { return !a.elector->IsLeader() && a.stopped.load() == 1; }));
  // Once the API server answers again it leads again (a new term, announced).
  REQUIRE(Eventually([&] { return a.elector->IsLeader() && a.started.load() == 2; }));
  a.elector->Stop();
}

TEST_CASE("kube integration: events are created and repeats aggregated into a count",
          "[integration]") {
  Fixture f;
  ManualClock clock;
  EventRecorder recorder(f.client.get(), {.component = "peregrine-controller", .instance = "pod-0",
                                          .aggregation_window = absl::Minutes(10), .max_tracked = 2},
                         &clock);
  const ObjectReference job{.api_version = "peregrine.dev/v1alpha1", .kind = "TrainingJob",
                            .namespace_name = "train", .name = "job-a", .uid = "uid-1"};
  const ResourcePath events{.group = "", .version = "v1", .plural = "events", .namespace_name = "train"};
  REQUIRE(recorder.Record(job, EventType::kWarning, "FailSlow", "rank 3 is slow").ok());
  clock.Advance(absl::Seconds(30));
  REQUIRE(recorder.Record(job, EventType::kWarning, "FailSlow", "rank 3 is slow").ok());
  clock.Advance(absl::Seconds(30));
  REQUIRE(recorder.Record(job, EventType::kWarning, "FailSlow", "rank 3 is slow").ok());
  auto list = f.client->List(events, {});
  REQUIRE(list.ok());
  REQUIRE((*list)["items"].size() == 1);
  const json& event = (*list)["items"][0];
  CHECK(event["count"] == 3);
  CHECK(event["type"] == "Warning");
  CHECK(event["reason"] == "FailSlow");
  CHECK(event["involvedObject"]["name"] == "job-a");
  CHECK(event["involvedObject"]["uid"] == "uid-1");
  CHECK(event["firstTimestamp"] != event["lastTimestamp"]);

  // A different message is a different event; outside the window a new one is made.
  REQUIRE(recorder.Record(job, EventType::kNormal, "Recovered", "restarted in place").ok());
  clock.Advance(absl::Minutes(11));
  REQUIRE(recorder.Record(job, EventType::kNormal, "Recovered", "restarted in place").ok());
  auto after = f.client->List(events, {});
  REQUIRE(after.ok());
  CHECK((*after)["items"].size() == 3);
  CHECK(recorder.TrackedForTest() <= 2);

  CHECK(recorder.Record(ObjectReference{}, EventType::kNormal, "X", "y").code() ==
        absl::StatusCode::kInvalidArgument);
  const std::string huge(5000, 'x');
  REQUIRE(recorder.Record(job, EventType::kNormal, "Big", huge).ok());
  auto all = f.client->List(events, {});
  REQUIRE(all.ok());
  int big = 0;
  for (const json& e : (*all)["items"]) {
    if (e["reason"] != "Big") continue;
    ++big;
    CHECK(e["message"].get<std::string>().size() == 1024);
  }
  CHECK(big == 1);
}

}  // namespace
}  // namespace peregrine::kube

#endif  // PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
