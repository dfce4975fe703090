// The operator end to end: KubeMode against FakeKubeApiServer, with the test playing the
// scheduler, kubelet and agents (harness.h). Every test asserts end states read from the
// API server (the TrainingJob status subresource, the objects that exist) and tears down
// everything it started, also when an assertion fails (RAII in Env, kube_env.h).
#include <catch2/catch.hpp>

#include <httplib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_cat.h"
#include "controller/core/job_state.h"
#include "controller/kube/kube_mode.h"
#include "cli/peregrinectl.h"
#include "tests/deploy/openapi_validator.h"
#include "tests/deploy/run_process.h"
#include "tests/e2e/kube/kube_env.h"
#include "tests/testing/captured_run.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::e2e {
namespace {

bool Phase(const JobStatus& st, JobPhase p) { return st.phase == p; }

// A live scrape of the controller's /metrics.
std::string Scrape(KubeMode& mode) {
  httplib::Client http("127.0.0.1", mode.metrics_port());
  auto res = http.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
}

// peregrinectl (the tool as a function) against the controller's HTTP API.
testing::CapturedRun Ctl(KubeMode& mode, std::vector<std::string> args) {
  args.insert(args.begin(), {"--controller", absl::StrCat("http://127.0.0.1:", mode.http_port()), "--token", kCtlToken});
  return testing::RunCaptured([&](std::ostream& out, std::ostream& err) { return RunPeregrinectl(args, out, err); });
}

const Condition* FindCondition(const JobStatus& st, const std::string& type) {
  for (const Condition& c : st.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

TEST_CASE("a TrainingJob runs from creation to completion", "[integration]") {
  Env env;
  env.script.finish_step = 15;
  env.StartController();
  env.StartKubelet();
  env.Submit(JobManifest("demo", 2));
  REQUIRE(env.WaitStatus("demo", [](const JobStatus& st) { return Phase(st, JobPhase::kSucceeded); }));
  auto st = env.Status("demo");
  CHECK(st->last_completed_step == 15);
  CHECK(st->slots.size() == 2);
  CHECK(st->incidents.empty());
  CHECK(env.kubelet->PodErrors().empty());
  // The job's objects: headless Service, the finalizer, and Events; no Secret (the
  // agents registered with their pods' service-account tokens, then credentials).
  auto svc = env.server.GetForTest("services", kNs, "demo");
  REQUIRE(svc.ok());
  CHECK((*svc)["spec"]["clusterIP"] == "None");
  CHECK_FALSE(env.server.GetForTest("secrets", kNs, "demo-peregrine-token").ok());
  CHECK(env.server.RequestCountForTest("create", "tokenreviews.authentication.k8s.io") > 0);
  auto job = env.server.GetForTest(kJobs, kNs, "demo");
  REQUIRE(job.ok());
  CHECK((*job)["metadata"]["finalizers"] == json::array({kTeardownFinalizer}));
  CHECK(env.server.RequestCountForTest("create", "events") > 0);
  const Condition* valid = FindCondition(*st, "Valid");
  REQUIRE(valid != nullptr);
  CHECK(valid->status == ConditionStatus::kTrue);
  // The finished job's standby was deleted; its machine pods stay for their logs.
  CHECK(Eventually([&] { return !env.server.GetForTest("pods", kNs, "demo-s0").ok(); }));
  CHECK(env.server.GetForTest("pods", kNs, "demo-m0").ok());
}

TEST_CASE("a pod dies and a standby takes its slot, the other pods untouched", "[integration]") {
  Env env;
  RunJob(env, "swap", 3, 5);
  const auto before = *env.Status("swap");
  const std::string standby = before.standbys.at(0).pod;
  const std::string uid0 = env.Uid("pods", "swap-m0"), uid2 = env.Uid("pods", "swap-m2");
  REQUIRE(env.kubelet->KillPod("swap-m1"));
  REQUIRE(env.WaitStatus("swap", [&](const JobStatus& st) {
    return st.incidents.size() == 1 && st.incidents[0].resumed_at != 0 && Phase(st, JobPhase::kRunning);
  }));
  auto st = *env.Status("swap");
  CHECK(st.slots[1].pod == standby);
  CHECK(st.slots[0].pod == "swap-m0");
  CHECK(st.slots[2].pod == "swap-m2");
  CHECK(st.incidents[0].kind == IncidentKind::kMachineLost);
  REQUIRE(st.evicted.size() == 1);
  CHECK(st.evicted[0].pod == "swap-m1");
  CHECK(env.Uid("pods", "swap-m0") == uid0);
  CHECK(env.Uid("pods", "swap-m2") == uid2);
  CHECK(Eventually([&] { return !env.server.GetForTest("pods", kNs, "swap-m1").ok(); }));
  // The pool is replenished with a new standby.
  CHECK(env.WaitStatus("swap", [&](const JobStatus& s) { return s.standbys.size() == 1 && s.standbys[0].pod != standby; }));
}

// Events about a cluster-scoped Node live in the "default" namespace.
std::vector<json> NodeEvents(Env& env, const std::string& node) {
  std::vector<json> out;
  auto list = env.client->List(kube::ResourcePath{"", "v1", "events", "default"}, kube::ListOptions{});
  if (!list.ok()) return out;
  for (const json& e : (*list)["items"]) {
    if (e["involvedObject"]["kind"] == "Node" && e["involvedObject"]["name"] == node) out.push_back(e);
  }
  return out;
}

TEST_CASE("a node going NotReady evicts exactly its machine, once, and cordons it", "[integration]") {
  Env env;
  KubeMode* first = RunJob(env, "nr", 3, 5);
  const auto before = *env.Status("nr");
  const std::string standby = before.standbys.at(0).pod;
  const std::string bad_node = env.kubelet->NodeOf("nr-m1");
  REQUIRE(!bad_node.empty());
  std::map<std::string, std::string> uids;
  for (const char* pod : {"nr-m0", "nr-m2", standby.c_str()}) uids[pod] = env.Uid("pods", pod);
  const int node_patches = env.server.RequestCountForTest("patch", "nodes");

  REQUIRE(env.kubelet->NodeDown("nr-m1"));
  REQUIRE(env.WaitStatus("nr", [](const JobStatus& st) {
    return st.incidents.size() == 1 && st.incidents[0].resumed_at != 0 && Phase(st, JobPhase::kRunning);
  }));
  auto st = *env.Status("nr");
  REQUIRE(st.evicted.size() == 1);
  CHECK(st.evicted[0].machine_id == bad_node);
  CHECK(st.evicted[0].pod == "nr-m1");
  CHECK_THAT(st.evicted[0].reason, Catch::Contains("node " + bad_node + " NotReady"));
  CHECK(st.slots[1].pod == standby);
  CHECK(st.slots[0].pod == "nr-m0");
  CHECK(st.slots[2].pod == "nr-m2");
  // The standby took the slot in place: the same pod object, like the other machines.
  for (const auto& [pod, uid] : uids) CHECK(env.Uid("pods", pod) == uid);
  CHECK(Eventually([&] { return !env.server.GetForTest("pods", kNs, "nr-m1").ok(); }));

  // The node is cordoned, labelled and has an Event; no other node was patched.
  REQUIRE(Eventually([&] { return env.server.RequestCountForTest("patch", "nodes") == node_patches + 1; }));
  auto node = env.server.GetForTest("nodes", "", bad_node);
  REQUIRE(node.ok());
  CHECK((*node)["spec"]["unschedulable"] == true);
  CHECK((*node)["metadata"]["labels"].contains("peregrine.dev/quarantined"));
  CHECK_THAT((*node)["metadata"]["annotations"]["peregrine.dev/quarantine-reason"].get<std::string>(),
             Catch::Contains("NotReady"));
  CHECK(Eventually([&] { return NodeEvents(env, bad_node).size() == 1; }));
  for (const char* pod : {"nr-m0", "nr-m2"}) {
    auto other = env.server.GetForTest("nodes", "", env.kubelet->NodeOf(pod));
    REQUIRE(other.ok());
    CHECK_FALSE((*other)["spec"].contains("unschedulable"));
  }

  // A controller restart neither evicts nor cordons again.
  REQUIRE(env.WaitStatus("nr", [](const JobStatus& s) { return s.standby_ready == 1 && s.last_completed_step >= 8; }));
  first->Shutdown();
  const int pod_deletes = env.server.RequestCountForTest("delete", "pods");
  const uint64_t step = env.Status("nr")->last_completed_step;
  env.StartController("replica-b");
  env.kubelet->ReconnectAll();
  REQUIRE(env.WaitStatus("nr", [&](const JobStatus& s) { return s.last_completed_step >= step + 5; }));
  st = *env.Status("nr");
  CHECK(st.evicted.size() == 1);
  CHECK(st.incidents.size() == 1);
  CHECK(st.recoveries == 1);
  CHECK(env.server.RequestCountForTest("delete", "pods") == pod_deletes);
  CHECK(env.server.RequestCountForTest("patch", "nodes") == node_patches + 1);
  CHECK(NodeEvents(env, bad_node).size() == 1);
}

TEST_CASE("watch streams drop mid-recovery and reconcile still converges", "[integration]") {
  Env env;
  RunJob(env, "drop", 2, 3);
  env.script.progress = false;
  REQUIRE(env.kubelet->KillPod("drop-m0"));
  env.server.DropWatchesForTest();
  REQUIRE(env.WaitStatus("drop", [](const JobStatus& st) { return st.evicted.size() == 1; }));
  env.server.DropWatchesForTest();
  env.script.progress = true;
  env.server.DropWatchesForTest();
  REQUIRE(env.WaitStatus("drop", [](const JobStatus& st) {
    return Phase(st, JobPhase::kRunning) && st.incidents.size() == 1 && st.incidents[0].resumed_at != 0;
  }));
  CHECK(env.Status("drop")->evicted.size() == 1);
}

TEST_CASE("a stale status write is re-read and retried", "[integration]") {
  Env env;
  KubeMode* mode = env.StartController();
  env.StartKubelet();
  env.script.finish_step = 10;
  // Between the controller's read and its first status write, another client writes the
  // job: the write carries a stale resourceVersion and meets a real 409.
  env.server.InterleaveWriteForTest("update", "trainingjobs.peregrine.dev/status", 1);
  env.Submit(JobManifest("stale", 1));
  REQUIRE(env.WaitStatus("stale", [](const JobStatus& st) { return Phase(st, JobPhase::kSucceeded); }));
  CHECK(env.Status("stale")->last_completed_step == 10);
  // The other client's write survived (the status write did not clobber it) ...
  auto object = env.server.GetForTest(kJobs, kNs, "stale");
  REQUIRE(object.ok());
  CHECK((*object)["metadata"]["annotations"]["test.peregrine.dev/interleaved"] == "1");
  // ... the conflict happened once, and it was retried inside the same write (re-read,
  // re-applied, written): no reconcile round failed because of it.
  const std::string scrape = Scrape(*mode);
  INFO(scrape);
  CHECK_THAT(scrape, Catch::Contains(
                         "peregrine_kube_api_request_errors_total{code=\"409\",resource=\"trainingjobs\",verb=\"UPDATE_STATUS\"} 1"));
  CHECK_THAT(scrape, Catch::Contains("peregrine_reconcile_errors_total 0"));
}

TEST_CASE("a controller restarted mid-recovery does not evict twice", "[integration]") {
  Env env;
  KubeMode* first = RunJob(env, "restart", 2, 3);
  env.script.progress = false;  // recovery cannot complete before the restart
  REQUIRE(env.kubelet->KillPod("restart-m1"));
  REQUIRE(env.WaitStatus("restart", [](const JobStatus& st) { return st.evicted.size() == 1; }));
  // The status (the eviction's intent) is written before the pod delete: wait for the
  // delete too, so the restart lands after the whole eviction. A restart between the two
  // is the chaos suite's business (tests/e2e/chaos).
  REQUIRE(Eventually([&] { return env.server.RequestCountForTest("delete", "pods") == 1; }));
  first->Shutdown();
  const int pod_deletes = env.server.RequestCountForTest("delete", "pods");
  env.StartController("replica-b");
  env.kubelet->ReconnectAll();
  env.script.progress = true;
  REQUIRE(env.WaitStatus("restart", [](const JobStatus& st) {
    return Phase(st, JobPhase::kRunning) && st.incidents.size() == 1 && st.incidents[0].resumed_at != 0;
  }));
  auto st = *env.Status("restart");
  CHECK(st.evicted.size() == 1);
  CHECK(st.recoveries == 1);
  // Exactly one pod was ever deleted, the dead machine's, by the first controller; the
  // new one deleted nothing (no second eviction, no standby churn).
  CHECK(env.server.DeleteRequestsForTest("pods") == std::vector<std::string>{"restart-m1"});
  CHECK(env.server.RequestCountForTest("delete", "pods") == pod_deletes);
  CHECK(st.slots[0].pod == "restart-m0");
  CHECK(st.slots[1].pod == "restart-s0");  // the standby took the dead machine's slot
}

TEST_CASE("two controller replicas compete and only the leader acts", "[integration]") {
  Env env;
  KubeMode* a = env.StartController("replica-a", /*leader_elect=*/true);
  REQUIRE(Eventually([&] { return a->IsLeader(); }));
  KubeMode* b = env.StartController("replica-b", /*leader_elect=*/true);
  env.StartKubelet();
  env.Submit(JobManifest("ha", 2));
  REQUIRE(env.WaitStatus("ha", [](const JobStatus& st) { return Phase(st, JobPhase::kRunning) && st.last_completed_step >= 3; }));
  CHECK_FALSE(b->IsLeader());
  CHECK(b->ApiWritesForTest() == 0);
  CHECK(a->ApiWritesForTest() > 0);
  {
    // A follower turns agents away with UNAVAILABLE.
    auto stub = v1::AgentService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", b->grpc_port()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    auto stream = stub->Connect(&ctx);
    v1::ControllerMessage in;
    CHECK_FALSE(stream->Read(&in));
    CHECK(stream->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  }
  // The leader steps down (releasing the Lease); the follower takes over and the job ends.
  env.script.finish_step = 30;
  a->Shutdown();
  REQUIRE(Eventually([&] { return b->IsLeader(); }));
  env.kubelet->ReconnectAll();
  REQUIRE(env.WaitStatus("ha", [](const JobStatus& st) { return Phase(st, JobPhase::kSucceeded); }));
  CHECK(b->ApiWritesForTest() > 0);
  CHECK(env.Status("ha")->incidents.empty());
}

TEST_CASE("a leader whose Lease renewals fail stops writing while the other replica takes over",
          "[integration]") {
  Env env;
  KubeMode* a = env.StartController("replica-a", /*leader_elect=*/true);
  REQUIRE(Eventually([&] { return a->IsLeader(); }));
  KubeMode* b = env.StartController("replica-b", /*leader_elect=*/true);
  env.StartKubelet();
  env.script.finish_step = 40;
  env.Submit(JobManifest("renew", 2));
  REQUIRE(env.WaitStatus("renew", [](const JobStatus& st) { return Phase(st, JobPhase::kRunning) && st.last_completed_step >= 3; }));
  REQUIRE(b->ApiWritesForTest() == 0);
  // The API server stops accepting the leader's renewals (no graceful release): with a
  // 2 s renew deadline and 300 ms retries the leader makes at most ~8 attempts; the
  // rest of the 10 failures meet the follower's first attempts, which it retries.
  env.server.FailNextRequestsForTest("update", "leases.coordination.k8s.io", 10, 500);
  bool both = false;
  REQUIRE(Eventually([&] {
    both = both || (a->IsLeader() && b->IsLeader());
    return a->LostLeadership();
  }));
  const int64_t a_writes = a->ApiWritesForTest();
  REQUIRE(Eventually([&] {
    both = both || (a->IsLeader() && b->IsLeader());
    return b->IsLeader();
  }));
  CHECK_FALSE(both);
  env.kubelet->ReconnectAll();
  REQUIRE(env.WaitStatus("renew", [](const JobStatus& st) { return Phase(st, JobPhase::kSucceeded); }));
  CHECK(b->ApiWritesForTest() > 0);
  CHECK_FALSE(a->IsLeader());
  // Not one write from the old leader after it lost the Lease, while b finished the job.
  CHECK(a->ApiWritesForTest() == a_writes);
  CHECK(env.Status("renew")->incidents.empty());
}

TEST_CASE("a 100-machine job converges with a bounded number of API calls", "[integration]") {
  Env env;
  env.script.finish_step = 3;
  KubeMode* mode = env.StartController();
  env.StartKubelet();
  constexpr int kMachines = 100;
  env.Submit(JobManifest("big", kMachines));
  REQUIRE(env.WaitStatus("big", [](const JobStatus& st) { return Phase(st, JobPhase::kSucceeded); },
                         absl::Seconds(240)));
  auto st = *env.Status("big");
  const int standbys = 1;
  const int status_writes = env.server.RequestCountForTest("update", "trainingjobs.peregrine.dev/status");
  const int64_t requests = mode->ApiRequestsForTest();
  INFO("requests " << requests << ", status writes " << status_writes);
  // One create per pod: no pod is created twice.
  CHECK(env.server.RequestCountForTest("create", "pods") == kMachines + standbys);
  // Every status write is caused by an observable change (a pod seen running, a step, a
  // phase), never by a heartbeat: at most one per pod plus a few per step and phase.
  CHECK(status_writes <= kMachines + standbys + 10 * 3 + 20);
  // Each agent's first registration is checked with one TokenReview (its projected
  // service-account token); reconnects use the per-pod credential and cost nothing.
  const int token_reviews = env.server.RequestCountForTest("create", "tokenreviews.authentication.k8s.io");
  INFO("token reviews " << token_reviews);
  CHECK(token_reviews <= kMachines + standbys);
  // Reads come from the informer caches: the whole run costs the pod creates, the agents'
  // bootstrap reviews, the status writes (each a GET + PUT), a handful of events and setup
  // calls - O(machines), with a constant independent of how many heartbeats and
  // reconciles happened.
  CHECK(requests <= 2 * (kMachines + standbys) + 2 * status_writes + 30);
  CHECK(st.slots.size() == kMachines);
}

// The CRD's schema, as the API server would apply it (the deploy suite's validator).
std::vector<std::string> SchemaErrors(const json& manifest) {
  const YAML::Node crd = YAML::LoadFile(PEREGRINE_SOURCE_DIR "/crds/peregrine.dev_trainingjobs.yaml");
  YAML::Node doc = YAML::Load(manifest.dump());
  return ValidateAgainstSchema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"], doc);
}

TEST_CASE("a TrainingJob the schema admits but no cluster can run gets Valid=False and no pods",
          "[integration]") {
  Env env;
  env.StartController();
  // gpusPerMachine 1, but the template's trainer asks for 2 GPUs: the schema cannot see
  // inside the pod template, the controller can.
  json manifest = JobManifest("bad", 2);
  manifest["spec"]["template"]["spec"]["containers"][0]["resources"] = {{"limits", {{"nvidia.com/gpu", 2}}}};
  const std::vector<std::string> schema_errors = SchemaErrors(manifest);
  INFO(absl::StrJoin(schema_errors, "\n"));
  REQUIRE(schema_errors.empty());
  env.Submit(manifest);
  REQUIRE(env.WaitStatus("bad", [](const JobStatus& st) {
    const Condition* c = FindCondition(st, "Valid");
    return c != nullptr && c->status == ConditionStatus::kFalse;
  }));
  auto st = *env.Status("bad");
  const Condition* c = FindCondition(st, "Valid");
  CHECK(c->reason == "InvalidSpec");
  CHECK_THAT(c->message, Catch::Contains("nvidia.com/gpu: 2 conflicts with spec.gpusPerMachine = 1"));
  CHECK(st.phase == JobPhase::kPending);
  CHECK(env.server.RequestCountForTest("create", "pods") == 0);
  // Fixing the spec lets it start.
  auto obj = env.server.GetForTest(kJobs, kNs, "bad");
  REQUIRE(obj.ok());
  auto fixed = *obj;
  fixed["spec"]["template"]["spec"]["containers"][0].erase("resources");
  REQUIRE(env.client->Update(TrainingJobsPath(kNs), "bad", fixed).ok());
  CHECK(env.WaitStatus("bad", [](const JobStatus& s) {
    const Condition* v = FindCondition(s, "Valid");
    return v != nullptr && v->status == ConditionStatus::kTrue;
  }));
  CHECK(Eventually([&] { return env.server.RequestCountForTest("create", "pods") >= 2; }));
}

TEST_CASE("a pod the API server refuses with 422 becomes Valid=False PodRejected, not a retry loop",
          "[integration]") {
  Env env;
  env.StartController();
  // An admission webhook or a pod-level rule the controller cannot know: 422 Invalid.
  env.server.FailNextRequestsForTest("create", "pods", 1, 422);
  env.Submit(JobManifest("refused", 2));
  REQUIRE(env.WaitStatus("refused", [](const JobStatus& st) {
    const Condition* c = FindCondition(st, "Valid");
    return c != nullptr && c->status == ConditionStatus::kFalse;
  }));
  const JobStatus refused = *env.Status("refused");
  const Condition* c = FindCondition(refused, "Valid");
  CHECK(c->reason == "PodRejected");
  CHECK_THAT(c->message, Catch::Contains("cannot be created") && Catch::Contains("422"));
  // The first create was refused; the round stopped there and nothing was retried,
  // also across the resync period (2 s) and the status writes that wake the job.
  const int creates = env.server.RequestCountForTest("create", "pods");
  CHECK(creates >= 1);
  REQUIRE(env.client->MergePatch(TrainingJobsPath(kNs), "refused", json{{"metadata", {{"labels", {{"touched", "1"}}}}}})
              .ok());  // an informer event that is not a spec change
  // Absence cannot be waited on: watch for a retry over 3 s, longer than the resync
  // (2 s) and than many rounds of the old 5 ms-doubling retry. A slow machine can only
  // make this pass without a retry, never fail a correct controller.
  CHECK_FALSE(Eventually([&] { return env.server.RequestCountForTest("create", "pods") > creates; },
                         absl::Seconds(3)));
  // A spec change (new generation) tries again, and this time the server accepts.
  REQUIRE(env.client->MergePatch(TrainingJobsPath(kNs), "refused", json{{"spec", {{"faultTolerance", {{"restartGraceSeconds", 2}}}}}})
              .ok());
  CHECK(env.WaitStatus("refused", [](const JobStatus& s) {
    const Condition* v = FindCondition(s, "Valid");
    return v != nullptr && v->status == ConditionStatus::kTrue;
  }));
}

TEST_CASE("stuck pods show in the PodsStuck condition and a stuck standby is replaced", "[integration]") {
  Env env;
  env.tweak_options = [](KubeModeOptions& o) { o.standby_pending_timeout = absl::Seconds(2); };
  env.StartController();
  env.StartKubelet();
  // The scheduler finds no node for machine 1; the first standby's image cannot be pulled.
  env.kubelet->StickPod("stuck-m1", json{{"phase", "Pending"},
                                         {"conditions", json::array({json{{"type", "PodScheduled"},
                                                                          {"status", "False"},
                                                                          {"reason", "Unschedulable"},
                                                                          {"message", "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}}})}});
  env.kubelet->StickPod("stuck-s0", json{{"phase", "Pending"},
                                         {"containerStatuses",
                                          json::array({json{{"name", "trainer"},
                                                            {"state", {{"waiting", {{"reason", "ImagePullBackOff"},
                                                                                    {"message", "Back-off pulling image \"example.com/train:1\""}}}}}}})}});
  env.Submit(JobManifest("stuck", 2));
  // The job says which pod is stuck and why.
  REQUIRE(env.WaitStatus("stuck", [](const JobStatus& st) {
    const Condition* c = FindCondition(st, "PodsStuck");
    return c != nullptr && c->status == ConditionStatus::kTrue && absl::StrContains(c->message, "stuck-m1: Unschedulable: 0/8 nodes");
  }));
  // The standby stuck past the pending timeout is deleted and another takes its place.
  REQUIRE(env.WaitStatus("stuck", [](const JobStatus& st) {
    return !st.standbys.empty() && st.standbys[0].pod != "stuck-s0";
  }));
  REQUIRE(Eventually([&] { return !env.server.GetForTest("pods", kNs, "stuck-s0").ok(); }));
  {
    const JobStatus st = *env.Status("stuck");
    bool recorded = false;
    for (const Eviction& e : st.evicted) {
      recorded = recorded || (e.pod == "stuck-s0" && absl::StrContains(e.reason, "ImagePullBackOff") &&
                              e.machine_id.empty());
    }
    CHECK(recorded);
  }
  CHECK(env.server.RequestCountForTest("patch", "nodes") == 0);  // no node was cordoned for it
  // The active pod is never replaced for being unschedulable; once it is scheduled the job
  // runs, the new standby becomes ready and the condition clears.
  env.kubelet->Unstick("stuck-m1");
  REQUIRE(env.WaitStatus("stuck", [](const JobStatus& st) {
    const Condition* c = FindCondition(st, "PodsStuck");
    return Phase(st, JobPhase::kRunning) && st.standby_ready == 1 && c != nullptr && c->status == ConditionStatus::kFalse;
  }));
  CHECK(env.Status("stuck")->slots[1].pod == "stuck-m1");
}

TEST_CASE("kube-mode /metrics passes promtool and shows API requests and errors", "[integration]") {
  Env env;
  KubeMode* mode = env.StartController();
  env.StartKubelet();
  // One status write meets a 409 Conflict: it must show as an error series.
  env.server.FailNextRequestsForTest("update", "trainingjobs.peregrine.dev/status", 1, 409);
  env.Submit(JobManifest("metrics", 2));
  REQUIRE(env.WaitStatus("metrics", RunningWithStandby(3)));
  // Two actives and one standby hold agent streams.
  REQUIRE(Eventually([&] { return absl::StrContains(Scrape(*mode), "peregrine_agents_connected 3"); }));
  const std::string scrape = Scrape(*mode);
  absl::StatusOr<ProcessResult> check = RunProcess({"promtool", "check", "metrics"}, {}, scrape);
  REQUIRE(check.ok());  // promtool comes with the Debian package prometheus
  INFO("promtool said:\n" << check->out << check->err << "\nscrape:\n" << scrape);
  CHECK(check->exit_code == 0);
  CHECK_THAT(scrape, Catch::Contains("peregrine_kube_api_request_duration_seconds_count{resource=\"pods\",verb=\"CREATE\"} 3"));
  CHECK_THAT(scrape, Catch::Contains("peregrine_kube_api_request_duration_seconds_bucket{resource=\"trainingjobs\",verb=\"UPDATE_STATUS\""));
  CHECK_THAT(scrape, Catch::Contains(
                         "peregrine_kube_api_request_errors_total{code=\"409\",resource=\"trainingjobs\",verb=\"UPDATE_STATUS\"} 1"));
  // Watches stay open for minutes: they are not request latencies.
  CHECK_THAT(scrape, !Catch::Contains("verb=\"WATCH\",le="));
  CHECK_THAT(scrape, !Catch::Contains("peregrine_kube_api_request_duration_seconds_count{resource=\"pods\",verb=\"WATCH\"}"));
  // Nothing is waiting in the work queue once the job is steady (delayed resyncs are not depth).
  CHECK(Eventually([&] { return absl::StrContains(Scrape(*mode), "peregrine_workqueue_depth 0"); }));
}

TEST_CASE("deleting a TrainingJob removes every object it owns", "[integration]") {
  Env env;
  KubeMode* mode = RunJob(env, "gone", 2, 0);
  // The job's metric series are live while it runs ...
  const std::string series = "job=\"gone\",namespace=\"train\"";
  REQUIRE(Eventually([&] { return absl::StrContains(Scrape(*mode), "peregrine_job_last_completed_step{" + series); }));
  // The metrics follow the status write within the same round: wait for them.
  CHECK(Eventually([&] { return absl::StrContains(Scrape(*mode), "peregrine_jobs{phase=\"Running\"} 1"); }));
  REQUIRE(env.client->Delete(TrainingJobsPath(kNs), "gone").ok());
  REQUIRE(Eventually([&] { return !env.server.GetForTest(kJobs, kNs, "gone").ok(); }));
  CHECK(Eventually([&] {
    for (const char* pod : {"gone-m0", "gone-m1", "gone-s0"}) {
      if (env.server.GetForTest("pods", kNs, pod).ok()) return false;
    }
    return !env.server.GetForTest("services", kNs, "gone").ok();
  }));
  CHECK(Eventually([&] { return env.kubelet->RunningPods().empty(); }));
  // ... and gone from a live scrape once it is deleted: no alert can fire on it, and it
  // left the phase counts.
  const std::string after = Scrape(*mode);
  INFO(after);
  CHECK_FALSE(absl::StrContains(after, series));
  CHECK(absl::StrContains(after, "peregrine_jobs{phase=\"Running\"} 0"));
  CHECK(absl::StrContains(after, "peregrine_jobs{phase=\"Pending\"} 0"));
  // The HTTP API no longer lists it.
  CHECK(Ctl(*mode, {"status", "train/gone"}).code == 1);
}

TEST_CASE("peregrinectl sends the kubeconfig user's token when the controller asks for one", "[integration]") {
  Env env;
  KubeMode* mode = env.StartController();
  env.Submit(JobManifest("kc", 1));
  testing::TempDir dir("peregrinectl-kubeconfig");
  auto kubeconfig = [&](const std::string& file, const std::string& user) {
    return dir.Write(file, "apiVersion: v1\nkind: Config\ncurrent-context: ctx\nclusters:\n- name: c\n  cluster:\n"
                           "    server: https://127.0.0.1:6443\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n"
                           "    user: u\nusers:\n- name: u\n  user:\n" + user);
  };
  auto ctl = [&](const std::string& config) {
    std::vector<std::string> args = {"--controller", absl::StrCat("http://127.0.0.1:", mode->http_port()),
                                     "--kubeconfig", config, "status", "train/kc"};
    return testing::RunCaptured([&](std::ostream& out, std::ostream& err) { return RunPeregrinectl(args, out, err); });
  };
  const std::string good = kubeconfig("good", absl::StrCat("    token: ", kCtlToken, "\n"));
  REQUIRE(Eventually([&] { return absl::StrContains(ctl(good).out, "train/kc"); }));
  const std::string file = kubeconfig("file", absl::StrCat("    tokenFile: ", dir.Write("token", absl::StrCat(kCtlToken, "\n")), "\n"));
  CHECK(ctl(file).code == 0);
  // A token the API server does not know: the controller's 401.
  const testing::CapturedRun bad = ctl(kubeconfig("bad", "    token: forged\n"));
  CHECK(bad.code == 1);
  CHECK(absl::StrContains(bad.err, "not authenticated"));
  CHECK_FALSE(absl::StrContains(bad.err, "forged"));
  // An exec credential plugin (EKS, GKE, AKS) is run, and its token sent.
  const std::string get_token = dir.Write(
      "get-token", absl::StrCat("#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",",
                                "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"", kCtlToken, "\"}}'\n"));
  std::filesystem::permissions(get_token, std::filesystem::perms::owner_all);
  const testing::CapturedRun plugin = ctl(kubeconfig(
      "plugin", "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: " + get_token +
                    "\n      interactiveMode: Never\n"));
  INFO(plugin.err);
  CHECK(plugin.code == 0);
  CHECK(absl::StrContains(plugin.out, "train/kc"));
  // Legacy auth-provider plugins are not run: say so.
  const testing::CapturedRun legacy = ctl(kubeconfig("legacy", "    auth-provider:\n      name: oidc\n"));
  CHECK(legacy.code == 1);
  CHECK(absl::StrContains(legacy.err, "auth-provider"));
  CHECK(absl::StrContains(legacy.err, "--token"));
}

TEST_CASE("peregrinectl status and update work against the kube-mode controller", "[integration]") {
  Env env;
  KubeMode* mode = env.StartController();
  env.StartKubelet();
  env.Submit(JobManifest("ctl", 2));
  REQUIRE(env.WaitStatus("ctl", [](const JobStatus& st) {
    return Phase(st, JobPhase::kRunning) && st.last_completed_step >= 3;
  }));
  REQUIRE(Eventually([&] { return absl::StrContains(Ctl(*mode, {"status", "train/ctl"}).out, "phase Running"); }));
  const testing::CapturedRun status = Ctl(*mode, {"status", "train/ctl"});
  CHECK(status.code == 0);
  CHECK_THAT(status.out, Catch::Contains("job train/ctl: 2 machines x 1 GPUs"));
  CHECK_THAT(status.out, Catch::Contains("ctl-m0"));
  CHECK_THAT(status.out, Catch::Contains("ctl-m1"));
  CHECK(Ctl(*mode, {"status", "train/other"}).code == 1);

  // A code update is written to the TrainingJob (the API server stays the source of
  // truth) and reaches the job like any edit: urgent, it restarts in place.
  const JobStatus before = *env.Status("ctl");
  const int64_t generation = (*env.server.GetForTest(kJobs, kNs, "ctl"))["metadata"]["generation"].get<int64_t>();
  const testing::CapturedRun update = Ctl(*mode, {"update", "train/ctl", "--revision", "r2", "--command", "python train2.py",
                                       "--urgent"});
  INFO(update.err);
  REQUIRE(update.code == 0);
  CHECK_THAT(update.out, Catch::Contains("urgent"));
  auto object = env.server.GetForTest(kJobs, kNs, "ctl");
  REQUIRE(object.ok());
  CHECK((*object)["spec"]["codeVersion"]["revision"] == "r2");
  CHECK((*object)["spec"]["codeVersion"]["command"] == json::array({"python", "train2.py"}));
  CHECK((*object)["spec"]["codeVersion"]["image"] == "example.com/train:1");  // kept
  CHECK((*object)["metadata"]["annotations"]["peregrine.dev/hot-update"] == "urgent");
  CHECK((*object)["metadata"]["generation"].get<int64_t>() == generation + 1);
  REQUIRE(env.WaitStatus("ctl", [&](const JobStatus& st) {
    return st.code.revision == "r2" && st.attempt == before.attempt + 1 && Phase(st, JobPhase::kRunning) &&
           st.last_completed_step > st.resume_step;
  }));
  const JobStatus after = *env.Status("ctl");
  CHECK(after.slots[0].pod == before.slots[0].pod);
  CHECK(after.slots[1].pod == before.slots[1].pod);
  CHECK(after.evicted.empty());
  CHECK(after.observed_generation == generation + 1);

  // A later lazy update removes the annotation again.
  REQUIRE(Ctl(*mode, {"update", "train/ctl", "--revision", "r3"}).code == 0);
  object = env.server.GetForTest(kJobs, kNs, "ctl");
  REQUIRE(object.ok());
  CHECK_FALSE((*object)["metadata"].value("annotations", json::object()).contains("peregrine.dev/hot-update"));
  CHECK(env.WaitStatus("ctl", [](const JobStatus& st) { return st.pending_code && st.pending_code->revision == "r3"; }));
  // Unknown jobs and bad requests are refused with a clear message.
  const testing::CapturedRun missing = Ctl(*mode, {"update", "train/nope", "--revision", "r9"});
  CHECK(missing.code == 1);
  CHECK_THAT(missing.err, Catch::Contains("no TrainingJob train/nope"));
  CHECK(Ctl(*mode, {"update", "train/ctl"}).code == 2);  // no --revision
}

}  // namespace
}  // namespace peregrine::e2e
