// NodeHealthController against the fake API server (real HTTP on 127.0.0.1): the node
// health lifecycle on Nodes, sweeps as batch/v1 Jobs. The fake server has no kubelet and
// no job controller, so the tests play them: they set a sweep Job's status (ready,
// succeeded, failed, conditions) and create its Pod with the status a scheduler or
// kubelet would give it, through the server's status hooks, exactly as those components
// write them. Time is a ManualClock; Pass() is called directly (no thread).
#ifdef PEREGRINE_HAVE_FAKE_KUBE_API_SERVER

#include <algorithm>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/clock.h"
#include "controller/kube/events.h"
#include "controller/kube/informer.h"
#include "controller/kube/node_health_controller.h"
#include "controller/kube/resources.h"
#include "controller/kube/rest_client.h"
#include "controller/node_health_inputs.h"
#include "tests/fakes/fake_kube_api_server.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using nlohmann::json;
using testing::FakeKubeApiServer;

constexpr char kNs[] = "pg-system";
constexpr char kImage[] = "registry.example/peregrine-agent:1.2";

bool Eventually(const std::function<bool()>& condition) {
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (absl::Now() < end) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return condition();
}

json Node(const std::string& name, bool unschedulable = false) {
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}},
               {"spec", {{"taints", json::array({{{"key", "example.com/dedicated"}, {"value", "ml"},
                                                   {"effect", "NoSchedule"}}})}}},
               {"status", {{"allocatable", {{"nvidia.com/gpu", "8"}, {"cpu", "96"}}}}}};
  if (unschedulable) node["spec"]["unschedulable"] = true;
  return node;
}

struct Env {
  explicit Env(NodeLifecycleOptions lifecycle = {}) {
    testing::KubeResourceType jobs;
    jobs.group = "batch";
    jobs.version = "v1";
    jobs.plural = "jobs";
    jobs.kind = "Job";
    jobs.namespaced = true;
    jobs.status_subresource = true;
    server.RegisterResource(jobs);
    REQUIRE(server.Start().ok());
    kube::Config config;
    config.server = server.base_url();
    config.bearer_token = "t";
    config.source = "test";
    auto created = kube::RestClient::Create(config, {});
    REQUIRE(created.ok());
    client = *std::move(created);
    kube::InformerOptions io;
    io.resource = NodesPath();
    io.backoff.initial = absl::Milliseconds(10);
    io.backoff.max = absl::Milliseconds(100);
    nodes = std::make_unique<kube::Informer>(client.get(), io, &clock, &random);
    events = std::make_unique<kube::EventRecorder>(client.get(), kube::EventRecorderOptions{}, &clock);
    options.lifecycle = lifecycle;
    options.sweep_image = kImage;
    options.sweep_namespace = kNs;
    StartController();
    nodes->Start();
    REQUIRE(Eventually([&] { return nodes->HasSynced(); }));
  }
  ~Env() {
    controller.reset();
    nodes->Stop();
  }
  void StartController() {
    controller = std::make_unique<NodeHealthController>(client.get(), nodes.get(), events.get(), &clock, options);
  }
  void AddNode(const json& node) {
    REQUIRE(server.CreateForTest("nodes", "", node).ok());
    Sync(node["metadata"]["name"]);
  }
  json GetNode(const std::string& name) {
    auto n = server.GetForTest("nodes", "", name);
    REQUIRE(n.ok());
    return *n;
  }
  // Waits until the informer's cache holds the server's version of the node.
  void Sync(const std::string& name) {
    REQUIRE(Eventually([&] {
      kube::ObjectPtr cached = nodes->Get(name);
      auto stored = server.GetForTest("nodes", "", name);
      return cached != nullptr && stored.ok() &&
             (*cached)["metadata"]["resourceVersion"] == (*stored)["metadata"]["resourceVersion"];
    }));
  }
  absl::Status Pass(const std::string& node) {
    Sync(node);
    return controller->Pass();
  }
  std::string Health(const std::string& node) {
    return GetNode(node)["metadata"]["labels"].value(kNodeHealthLabel, "");
  }
  std::string Annotation(const std::string& node, const char* key) {
    return GetNode(node)["metadata"]["annotations"].value(key, "");
  }
  bool Tainted(const std::string& node) {
    for (const json& t : GetNode(node)["spec"].value("taints", json::array())) {
      if (t["key"] == kQuarantineTaintKey && t["effect"] == "NoSchedule") return true;
    }
    return false;
  }
  bool Cordoned(const std::string& node) { return GetNode(node)["spec"].value("unschedulable", false); }
  absl::StatusOr<json> Job(const std::string& node, int attempt) {
    return server.GetForTest("jobs.batch", kNs, SweepJobName(node, attempt));
  }
  // The job controller and kubelet: the sweep's pod is ready, then it finished.
  void SetJobStatus(const std::string& node, int attempt, const std::function<void(json&)>& mutate) {
    REQUIRE(server.MutateStatusForTest("jobs.batch", kNs, SweepJobName(node, attempt), mutate).ok());
  }
  void JobRunning(const std::string& node, int attempt) {
    SetJobStatus(node, attempt, [](json& s) {
      s["active"] = 1;
      s["ready"] = 1;
      s["startTime"] = "2023-11-14T22:13:20Z";
    });
  }
  void JobDone(const std::string& node, int attempt, bool passed) {
    SetJobStatus(node, attempt, [passed](json& s) {
      s["active"] = 0;
      s["ready"] = 0;
      s[passed ? "succeeded" : "failed"] = 1;
      s["conditions"] = json::array({{{"type", passed ? "Complete" : "Failed"}, {"status", "True"},
                                      {"reason", passed ? "" : "BackoffLimitExceeded"},
                                      {"message", passed ? "" : "Job has reached the specified backoff limit"}}});
    });
  }
  std::vector<std::string> NodeEventReasons(const std::string& node) {
    std::vector<std::string> out;
    auto list = client->List(kube::ResourcePath{"", "v1", "events", "default"}, kube::ListOptions{});
    REQUIRE(list.ok());
    for (const json& e : (*list)["items"]) {
      if (e["involvedObject"]["kind"] == "Node" && e["involvedObject"]["name"] == node) {
        out.push_back(e["reason"]);
      }
    }
    return out;
  }
  int JobCreates() { return server.RequestCountForTest("create", "jobs.batch"); }

  FakeKubeApiServer server;
  ManualClock clock;
  SeededRandom random{3};
  std::unique_ptr<kube::RestClient> client;
  std::unique_ptr<kube::Informer> nodes;
  std::unique_ptr<kube::EventRecorder> events;
  NodeHealthControllerOptions options;
  std::unique_ptr<NodeHealthController> controller;
};

bool Has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST_CASE("node health: a node evicted as the culprit is quarantined, swept by a pinned Job and returned", "[integration]") {
  Env env;
  env.AddNode(Node("gpu-1"));
  REQUIRE(env.controller->Quarantine("gpu-1", "machine gpu-1 (slot 0, pod j-m0-0): inspection xid 79").ok());

  // Quarantined on the Node: cordon, taint, the cordon's label and the record.
  CHECK(env.Health("gpu-1") == "quarantined");
  CHECK(env.Cordoned("gpu-1"));
  CHECK(env.Tainted("gpu-1"));
  CHECK(env.GetNode("gpu-1")["metadata"]["labels"].contains(kQuarantineLabel));
  CHECK_THAT(env.Annotation("gpu-1", kNodeHealthReasonAnnotation), Catch::Contains("xid 79"));
  CHECK_FALSE(env.Annotation("gpu-1", kNodeHealthFailuresAnnotation).empty());  // a fault eviction is a failure

  // Its sweep: a Job pinned to the node, tolerating the quarantine, running the checks.
  auto job = env.Job("gpu-1", 1);
  REQUIRE(job.ok());
  const json& pod = (*job)["spec"]["template"]["spec"];
  CHECK(pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
           ["matchFields"][0] == json{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"gpu-1"}}});
  CHECK(pod["tolerations"].dump().find(kQuarantineTaintKey) != std::string::npos);
  CHECK(pod["tolerations"].dump().find("node.kubernetes.io/unschedulable") != std::string::npos);
  CHECK(pod["containers"][0]["image"] == kImage);
  CHECK(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8");
  const std::string script = pod["containers"][0]["command"][2];
  CHECK_THAT(script, Catch::Contains("--kind gemm") && Catch::Contains("--kind eud") &&
                         Catch::Contains("'level=3'") && Catch::Contains("--gpus 8"));
  CHECK((*job)["spec"]["backoffLimit"] == 0);

  // Nothing runs yet: asking again creates nothing new.
  REQUIRE(env.Pass("gpu-1").ok());
  CHECK(env.JobCreates() == 1);
  CHECK(env.Health("gpu-1") == "quarantined");

  env.JobRunning("gpu-1", 1);
  REQUIRE(env.Pass("gpu-1").ok());
  CHECK(env.Health("gpu-1") == "sweeping");
  CHECK_THAT(env.Annotation("gpu-1", kNodeHealthSweepAnnotation), Catch::Contains("attempts=1"));

  env.JobDone("gpu-1", 1, /*passed=*/true);
  REQUIRE(env.Pass("gpu-1").ok());
  CHECK(env.Health("gpu-1") == "healthy");
  const json node = env.GetNode("gpu-1");
  CHECK_FALSE(node["spec"].contains("unschedulable"));
  CHECK_FALSE(env.Tainted("gpu-1"));
  CHECK(node["spec"]["taints"].size() == 1);  // the node's own taint stays
  CHECK(node["spec"]["taints"][0]["key"] == "example.com/dedicated");
  CHECK_FALSE(node["metadata"]["labels"].contains(kQuarantineLabel));
  CHECK_FALSE(node["metadata"]["annotations"].contains(kQuarantineReasonAnnotation));
  CHECK(env.JobCreates() == 1);
  const auto reasons = env.NodeEventReasons("gpu-1");
  CHECK(Has(reasons, "NodeQuarantined"));
  CHECK(Has(reasons, "NodeSweepStarted"));
  CHECK(Has(reasons, "NodeHealthy"));

  // The machine is back: quarantining it again is a new episode and a new sweep (attempt 2).
  REQUIRE(env.controller->Quarantine("gpu-1", "machine gpu-1 (slot 0, pod j-m0-1): pod failed").ok());
  CHECK(env.Health("gpu-1") == "quarantined");
  CHECK(env.Job("gpu-1", 2).ok());
}

TEST_CASE("node health: a node that keeps failing its sweeps is retired and never returned automatically", "[integration]") {
  Env env;
  env.AddNode(Node("gpu-2"));
  REQUIRE(env.controller->Quarantine("gpu-2", "machine gpu-2 (slot 1, pod j-m1-0): inspection ecc").ok());
  // Failure 1: the eviction. Failure 2: sweep 1 fails.
  env.JobRunning("gpu-2", 1);
  REQUIRE(env.Pass("gpu-2").ok());
  env.JobDone("gpu-2", 1, /*passed=*/false);
  REQUIRE(env.Pass("gpu-2").ok());
  CHECK(env.Health("gpu-2") == "quarantined");
  CHECK(env.Cordoned("gpu-2"));
  CHECK_FALSE(env.Job("gpu-2", 2).ok());  // backing off
  CHECK_THAT(env.Annotation("gpu-2", kNodeHealthReasonAnnotation), Catch::Contains("backoff limit"));

  // After the back-off, sweep 2 starts; it fails too: failure 3 retires the machine.
  env.clock.Advance(absl::Hours(1));  // past the back-off (10 min doubled per failure in the window)
  REQUIRE(env.Pass("gpu-2").ok());
  REQUIRE(env.Job("gpu-2", 2).ok());
  env.JobRunning("gpu-2", 2);
  REQUIRE(env.Pass("gpu-2").ok());
  env.JobDone("gpu-2", 2, /*passed=*/false);
  REQUIRE(env.Pass("gpu-2").ok());
  CHECK(env.Health("gpu-2") == "retired");
  CHECK(env.Cordoned("gpu-2"));
  CHECK(env.Tainted("gpu-2"));
  CHECK(Has(env.NodeEventReasons("gpu-2"), "NodeRetired"));

  // Days later nothing has been swept or returned.
  const int creates = env.JobCreates();
  env.clock.Advance(absl::Hours(24 * 8));
  REQUIRE(env.Pass("gpu-2").ok());
  CHECK(env.JobCreates() == creates);
  CHECK(env.Health("gpu-2") == "retired");
  CHECK(env.Cordoned("gpu-2"));

  // An operator returns it (after a repair): healthy, failures forgotten, back in service.
  REQUIRE(env.client
              ->MergePatch(NodesPath(), "gpu-2",
                           json{{"metadata", {{"annotations", {{kNodeHealthReturnAnnotation, "GPU 3 replaced"}}}}}})
              .ok());
  REQUIRE(env.Pass("gpu-2").ok());
  CHECK(env.Health("gpu-2") == "healthy");
  CHECK_FALSE(env.Cordoned("gpu-2"));
  CHECK_FALSE(env.Tainted("gpu-2"));
  CHECK(env.Annotation("gpu-2", kNodeHealthReturnAnnotation).empty());
  CHECK(env.Annotation("gpu-2", kNodeHealthFailuresAnnotation).empty());
  CHECK_THAT(env.Annotation("gpu-2", kNodeHealthReasonAnnotation), Catch::Contains("GPU 3 replaced"));
  CHECK(Has(env.NodeEventReasons("gpu-2"), "NodeReturned"));
}

TEST_CASE("node health: a quarantined node someone uncordons and untaints gets its cordon and taint back", "[integration]") {
  Env env;
  env.options.sweep_image = "";  // sweeps off: the node stays quarantined
  env.StartController();
  env.AddNode(Node("gpu-9"));
  REQUIRE(env.controller->Quarantine("gpu-9", "machine gpu-9 (slot 0, pod j-m0-0): pod failed").ok());
  CHECK(env.JobCreates() == 0);
  json untaint = env.GetNode("gpu-9")["spec"]["taints"];
  untaint.erase(std::remove_if(untaint.begin(), untaint.end(), [](const json& t) { return t["key"] == kQuarantineTaintKey; }),
                untaint.end());
  REQUIRE(env.client->MergePatch(NodesPath(), "gpu-9", json{{"spec", {{"unschedulable", nullptr}, {"taints", untaint}}}}).ok());
  REQUIRE_FALSE(env.Cordoned("gpu-9"));
  REQUIRE(env.Pass("gpu-9").ok());
  CHECK(env.Cordoned("gpu-9"));
  CHECK(env.Tainted("gpu-9"));
  CHECK(env.Health("gpu-9") == "quarantined");
  CHECK(Has(env.NodeEventReasons("gpu-9"), "NodeQuarantineRestored"));
  CHECK(env.JobCreates() == 0);
}

TEST_CASE("node health: a machine over-evicted with its group gets a short sweep, no failure, and returns", "[integration]") {
  Env env;
  env.AddNode(Node("gpu-3"));
  const std::string reason =
      "hang: stack aggregation (investigation 1): pp 0 over-evicted (machines gpu-4, gpu-3); "
      "machine gpu-4 (slot 0, pod j-m0-0): in the group stack aggregation over-evicts; "
      "machine gpu-3 (slot 2, pod j-m2-0): in the group stack aggregation over-evicts";
  REQUIRE(env.controller->Quarantine("gpu-3", reason).ok());
  CHECK(env.Health("gpu-3") == "quarantined");
  CHECK(env.Annotation("gpu-3", kNodeHealthFailuresAnnotation).empty());
  CHECK_THAT(env.Annotation("gpu-3", kNodeHealthSweepAnnotation), Catch::Contains("kind=short"));
  auto job = env.Job("gpu-3", 1);
  REQUIRE(job.ok());
  const std::string script = (*job)["spec"]["template"]["spec"]["containers"][0]["command"][2];
  CHECK_THAT(script, Catch::Contains("'level=1'"));
  env.JobRunning("gpu-3", 1);
  REQUIRE(env.Pass("gpu-3").ok());
  env.JobDone("gpu-3", 1, /*passed=*/true);
  REQUIRE(env.Pass("gpu-3").ok());
  CHECK(env.Health("gpu-3") == "healthy");
  CHECK_FALSE(env.Cordoned("gpu-3"));
  CHECK_FALSE(env.Tainted("gpu-3"));
}

TEST_CASE("node health: a controller restarted mid-sweep resumes from the record on the Node", "[integration]") {
  Env env;
  env.AddNode(Node("gpu-5"));
  REQUIRE(env.controller->Quarantine("gpu-5", "machine gpu-5 (slot 0, pod j-m0-0): pod failed").ok());
  env.JobRunning("gpu-5", 1);
  REQUIRE(env.Pass("gpu-5").ok());
  REQUIRE(env.Health("gpu-5") == "sweeping");

  env.controller.reset();  // the controller goes away mid-sweep
  env.JobDone("gpu-5", 1, /*passed=*/true);
  env.StartController();  // a new one knows nothing but what is on the Node
  REQUIRE(env.Pass("gpu-5").ok());
  CHECK(env.Health("gpu-5") == "healthy");
  CHECK_FALSE(env.Cordoned("gpu-5"));
  CHECK(env.JobCreates() == 1);
}

TEST_CASE("node health: a sweep that cannot start keeps the node quarantined with the reason on the Node", "[integration]") {
  Env env;
  env.AddNode(Node("gpu-6"));
  REQUIRE(env.controller->Quarantine("gpu-6", "machine gpu-6 (slot 0, pod j-m0-0): pod failed").ok());
  auto job = env.Job("gpu-6", 1);
  REQUIRE(job.ok());
  // The sweep's pod as the job controller makes it (owned by the Job), with the
  // scheduler's verdict.
  const std::string job_name = SweepJobName("gpu-6", 1);
  const json owner = {{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"name", job_name},
                      {"uid", (*job)["metadata"]["uid"]}, {"controller", true}};
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", job_name + "-x7k2p"}, {"namespace", kNs}, {"labels", {{kSweepJobLabel, job_name}}},
                            {"ownerReferences", {owner}}}},
              {"spec", {{"containers", {{{"name", "sweep"}, {"image", kImage}}}}}},
              {"status",
               {{"phase", "Pending"},
                {"conditions",
                 {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                   {"message", "0/3 nodes are available: 1 Insufficient nvidia.com/gpu."}}}}}}};
  REQUIRE(env.server.CreateForTest("pods", kNs, pod).ok());
  REQUIRE(env.server.MutateStatusForTest("pods", kNs, job_name + "-x7k2p", [&](json& s) { s = pod["status"]; }).ok());
  REQUIRE(env.Pass("gpu-6").ok());
  CHECK(env.Health("gpu-6") == "quarantined");
  CHECK(env.Cordoned("gpu-6"));
  CHECK_THAT(env.Annotation("gpu-6", kNodeHealthSweepBlockedAnnotation),
             Catch::Contains("Unschedulable") && Catch::Contains("Insufficient nvidia.com/gpu"));
  CHECK(Has(env.NodeEventReasons("gpu-6"), "NodeSweepBlocked"));
  CHECK_FALSE(env.Job("gpu-6", 1).ok());  // deleted, for a fresh try (its pod with it)
  CHECK(Eventually([&] { return !env.server.GetForTest("pods", kNs, job_name + "-x7k2p").ok(); }));

  // Within the retry interval nothing is tried; after it, the same attempt again.
  REQUIRE(env.Pass("gpu-6").ok());
  CHECK(env.JobCreates() == 1);
  env.clock.Advance(absl::Minutes(6));
  REQUIRE(env.Pass("gpu-6").ok());
  CHECK(env.JobCreates() == 2);
  CHECK(env.Job("gpu-6", 1).ok());
  CHECK(env.Health("gpu-6") == "quarantined");
  env.JobRunning("gpu-6", 1);
  REQUIRE(env.Pass("gpu-6").ok());
  CHECK(env.Health("gpu-6") == "sweeping");
  CHECK(env.Annotation("gpu-6", kNodeHealthSweepBlockedAnnotation).empty());
}

TEST_CASE("node health: a node someone else had cordoned is never uncordoned, only untainted", "[integration]") {
  Env env;
  env.AddNode(Node("gpu-7", /*unschedulable=*/true));
  REQUIRE(env.controller->Quarantine("gpu-7", "machine gpu-7 (slot 0, pod j-m0-0): pod failed").ok());
  CHECK(env.Annotation("gpu-7", kCordonedBeforeAnnotation) == "true");
  env.JobRunning("gpu-7", 1);
  REQUIRE(env.Pass("gpu-7").ok());
  env.JobDone("gpu-7", 1, /*passed=*/true);
  REQUIRE(env.Pass("gpu-7").ok());
  CHECK(env.Health("gpu-7") == "healthy");
  CHECK(env.Cordoned("gpu-7"));  // still the administrator's cordon
  CHECK_FALSE(env.Tainted("gpu-7"));
}

TEST_CASE("node health: a record that does not decode gets an Event naming the key and the Node is left alone", "[integration]") {
  Env env;
  json node = Node("gpu-8");
  node["metadata"]["labels"][kNodeHealthLabel] = "quarantined";
  node["metadata"]["annotations"] = {{kNodeHealthSinceAnnotation, "yesterday"}};
  env.AddNode(node);
  const std::string rv = env.GetNode("gpu-8")["metadata"]["resourceVersion"];
  REQUIRE(env.Pass("gpu-8").ok());
  CHECK(env.GetNode("gpu-8")["metadata"]["resourceVersion"] == rv);
  REQUIRE(Has(env.NodeEventReasons("gpu-8"), "NodeHealthRecordInvalid"));
  auto list = env.client->List(kube::ResourcePath{"", "v1", "events", "default"}, kube::ListOptions{});
  REQUIRE(list.ok());
  CHECK(list->dump().find(kNodeHealthSinceAnnotation) != std::string::npos);
  // An eviction still cordons and taints it (the machine faulted), the record left as is.
  REQUIRE(env.controller->Quarantine("gpu-8", "machine gpu-8 (slot 0, pod p): pod failed").ok());
  CHECK(env.Cordoned("gpu-8"));
  CHECK(env.Tainted("gpu-8"));
  CHECK(env.Annotation("gpu-8", kNodeHealthSinceAnnotation) == "yesterday");
}

TEST_CASE("node health: SweepJobName is a valid, distinct Job name per node and attempt", "[unit]") {
  const std::string long_node(200, 'a');
  for (const std::string& n : {std::string("gpu-1"), std::string("ip-10-0-1-7.ec2.internal"), long_node}) {
    const std::string name = SweepJobName(n, 12);
    CHECK(name.size() <= 63);
    CHECK(name.rfind("pg-sweep-", 0) == 0);
    for (char c : name) CHECK((std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-'));
  }
  CHECK(SweepJobName("GPU-1", 1) != SweepJobName("gpu-1", 1));
  CHECK(SweepJobName("gpu-1", 1) != SweepJobName("gpu-1", 2));
}

TEST_CASE("node health: QuarantineInput tells an over-evicted group member from a culprit by the machine's own item", "[unit]") {
  const std::string over = "machine 1 (slot 1, pod j-m1-0): in the group stack aggregation over-evicts";
  CHECK(QuarantineInput("1", "hang; " + over, 5).kind == NodeInputKind::kOverEviction);
  CHECK(QuarantineInput("1", over, 5).kind == NodeInputKind::kOverEviction);
  // Another machine's over-eviction, or a name that only ends like this one's: a culprit.
  CHECK(QuarantineInput("0", "machine 10 (slot 1, pod p): in the group stack aggregation over-evicts", 5).kind ==
        NodeInputKind::kFaultEviction);
  CHECK(QuarantineInput("1", "machine 1 (slot 1, pod p): pod failed; machine 2 (slot 2, pod q): in the group "
                             "stack aggregation over-evicts", 5).kind == NodeInputKind::kFaultEviction);
  // Not named (a summarised list): the safe side, a culprit with a full sweep.
  const NodeInput unnamed = QuarantineInput("7", "hang; and 9 more (12 in all)", 5);
  CHECK(unnamed.kind == NodeInputKind::kFaultEviction);
  CHECK(unnamed.at == 5);
  CHECK(unnamed.detail == "hang; and 9 more (12 in all)");
}

// The sweep pod's command, run here with /bin/sh and the real peregrine-diagnose on the
// stand-in device (what the agent image runs on a GPU node): exit 0 when every check
// passes, 1 when one has no passing result.
int RunSweepScript(const std::string& diagnose, const std::string& dir, bool standin = true) {
  testing::ChildProcess::Options o;
  o.argv = {"/bin/sh", "-c", SweepScript(diagnose, SweepKind::kFull, 2)};
  o.env = {{"PEREGRINE_MACHINE_ID", "3"}};
  if (standin) {
    o.env["PEREGRINE_SIM_FAULTS"] = dir + "/no-faults";
    o.env["PEREGRINE_STANDIN_DEVICE"] = testing::BinaryPath("lib/sim/libperegrine_sim_device.so");
  }
  o.stdout_path = dir + "/sweep.log";
  auto child = testing::ChildProcess::Start(o);
  REQUIRE(child != nullptr);
  const std::optional<int> status = child->Wait(std::chrono::minutes(5));
  REQUIRE(status.has_value());
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

TEST_CASE("node health: the sweep pod's script passes a healthy machine and fails when a check has no passing result", "[integration]") {
  testing::DescendantGuard guard;
  testing::TempDir dir;
  CHECK(RunSweepScript(testing::BinaryPath("bin/peregrine-diagnose"), dir.path()) == 0);
  const std::string log = testing::ReadFile(dir.path() + "/sweep.log");
  CHECK_THAT(log, Catch::Contains("peregrine-diagnose: result kind: \"gemm\" passed: true") &&
                      Catch::Contains("peregrine-diagnose: result kind: \"eud\" passed: true"));
  CHECK(RunSweepScript(dir.path() + "/missing/peregrine-diagnose", dir.path()) == 1);
  CHECK_THAT(testing::ReadFile(dir.path() + "/sweep.log"),
             Catch::Contains("sweep: gemm failed") && Catch::Contains("sweep: eud failed"));
  // No CUDA device (nor the stand-in) on a node whose GPUs the pod holds: a fault.
  if (access("/dev/nvidia0", F_OK) != 0) {
    CHECK(RunSweepScript(testing::BinaryPath("bin/peregrine-diagnose"), dir.path(), /*standin=*/false) == 1);
    CHECK_THAT(testing::ReadFile(dir.path() + "/sweep.log"), Catch::Contains("sweep: gemm found no CUDA device"));
  }
}

}  // namespace
}  // namespace peregrine

#endif  // PEREGRINE_HAVE_FAKE_KUBE_API_SERVER
