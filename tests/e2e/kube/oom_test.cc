// A pod whose training container is OOMKilled is the workload's failure, not its machine's,
// end to end against the fake API server (harness.h): the pod is replaced (the warm standby
// takes its slot, the job runs on), but its node is not cordoned, not labelled quarantined
// and status.cordons stays empty; the eviction records machineFault false.
#include <catch2/catch.hpp>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "controller/core/job_state.h"
#include "controller/kube/kube_mode.h"
#include "controller/status_json.h"
#include "tests/e2e/kube/harness.h"

namespace peregrine::e2e {
namespace {

using testing::FakeKubeApiServer;

constexpr char kNs[] = "train";
constexpr char kJobs[] = "trainingjobs.peregrine.dev";

json Job(const std::string& name) {
  return json{
      {"apiVersion", "peregrine.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", name}, {"namespace", kNs}}},
      {"spec",
       {{"machines", 3},
        {"gpusPerMachine", 1},
        {"parallelism", {{"tensor", 1}, {"pipeline", 1}, {"data", 3}}},
        {"codeVersion", {{"image", "example.com/train:1"}, {"command", json::array({"python", "train.py"})}}},
        {"template",
         {{"spec", {{"containers", json::array({json{{"name", "trainer"}, {"image", "example.com/train:1"}}})}}}}},
        {"standby", {{"min", 1}, {"max", 1}}},
        {"faultTolerance", {{"restartGraceSeconds", 1}}}}}};
}

struct Env {
  Env() {
    for (const char* plural : {"secrets", "configmaps"}) {
      testing::KubeResourceType type;
      type.version = "v1";
      type.plural = plural;
      type.kind = std::string(plural) == "secrets" ? "Secret" : "ConfigMap";
      server.RegisterResource(type);
    }
    REQUIRE(server.Start().ok());
    config.server = server.base_url();
    config.source = "test";
    auto c = kube::RestClient::Create(config);
    REQUIRE(c.ok());
    client = *std::move(c);
  }
  ~Env() {
    if (kubelet) kubelet->Stop();
    if (mode) mode->Shutdown();
    server.Stop();
  }

  void StartController() {
    KubeModeOptions o;
    o.controller_address = "peregrine-grpc.peregrine-system.svc:7400";
    o.agent_image = "example.com/peregrine-agent:test";
    o.host = "127.0.0.1";
    o.grpc_port = 0;
    o.http_port = 0;
    o.metrics_port = 0;
    o.heartbeat_ms = 100;
    o.resync = absl::Seconds(1);
    o.decision.triage_window_ns = 300'000'000;
    auto m = KubeMode::Start(config, o);
    REQUIRE(m.ok());
    mode = *std::move(m);
    KubeMode* started = mode.get();
    kubelet = std::make_unique<FakeKubelet>(&server, client.get(), kNs,
                                            [started] { return absl::StrCat("127.0.0.1:", started->grpc_port()); },
                                            &script);
  }

  std::optional<JobStatus> Status(const std::string& name) {
    auto obj = server.GetForTest(kJobs, kNs, name);
    if (!obj.ok() || !obj->contains("status") || !(*obj)["status"].contains("phase")) return std::nullopt;
    auto st = JobStatusFromJson((*obj)["status"].dump());
    return st.ok() ? std::optional<JobStatus>(*st) : std::nullopt;
  }

  bool WaitStatus(const std::string& name, const std::function<bool(const JobStatus&)>& pred) {
    return Eventually([&] {
      auto st = Status(name);
      return st.has_value() && pred(*st);
    }, absl::Seconds(90));
  }

  FakeKubeApiServer server;
  kube::Config config;
  std::unique_ptr<kube::RestClient> client;
  TrainingScript script;
  std::unique_ptr<KubeMode> mode;
  std::unique_ptr<FakeKubelet> kubelet;
};

TEST_CASE("an OOMKilled pod is replaced by the standby and its node is not cordoned", "[integration]") {
  Env env;
  env.StartController();
  REQUIRE(env.server.CreateForTest(kJobs, kNs, Job("oom")).ok());
  REQUIRE(env.WaitStatus("oom", [](const JobStatus& st) {
    return st.phase == JobPhase::kRunning && st.last_completed_step >= 5 && st.standby_ready == 1;
  }));
  const JobStatus before = *env.Status("oom");
  const std::string standby = before.standbys.at(0).pod;
  const std::string node = env.kubelet->NodeOf("oom-m1");
  REQUIRE(!node.empty());
  const int node_patches = env.server.RequestCountForTest("patch", "nodes");

  REQUIRE(env.kubelet->OomKillPod("oom-m1"));
  REQUIRE(env.WaitStatus("oom", [&](const JobStatus& st) {
    return st.incidents.size() == 1 && st.incidents[0].resumed_at != 0 && st.phase == JobPhase::kRunning &&
           st.last_completed_step >= before.last_completed_step + 3;
  }));
  const JobStatus st = *env.Status("oom");
  CHECK(st.slots[1].pod == standby);  // the standby took the slot
  REQUIRE(st.evicted.size() == 1);
  CHECK(st.evicted[0].pod == "oom-m1");
  CHECK(st.evicted[0].machine_id == node);
  CHECK_FALSE(st.evicted[0].machine_fault);
  CHECK_FALSE(st.evicted[0].quarantined);
  CHECK_THAT(st.evicted[0].reason, Catch::Contains("OOMKilled"));
  CHECK(st.cordons.empty());
  // The node is as it was: schedulable, not labelled, never patched.
  auto n = env.server.GetForTest("nodes", "", node);
  REQUIRE(n.ok());
  const json& node_obj = *n;
  CHECK_FALSE((node_obj.contains("spec") && node_obj["spec"].value("unschedulable", false)));
  CHECK_FALSE(node_obj["metadata"].value("labels", json::object()).contains("peregrine.dev/quarantined"));
  CHECK(env.server.RequestCountForTest("patch", "nodes") == node_patches);
  // The pool is replenished and the job keeps training.
  CHECK(env.WaitStatus("oom", [&](const JobStatus& s) {
    return s.standbys.size() == 1 && s.standbys[0].pod != standby && s.standby_ready == 1;
  }));
  CHECK(env.Status("oom")->cordons.empty());
}

}  // namespace
}  // namespace peregrine::e2e
