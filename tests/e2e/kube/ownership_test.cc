// Least privilege end to end, KubeMode against FakeKubeApiServer (harness.h):
//   - a pod carrying a job's peregrine.dev/job label but no ownerReference to the job is
//     not the job's: it is never listed, adopted or deleted, neither while the job runs
//     nor when the job is deleted and torn down;
//   - with a namespace list the controller reconciles TrainingJobs in those namespaces
//     only: a job elsewhere gets no status, no finalizer, no pods.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

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

json Job(const std::string& ns, const std::string& name) {
  return json{
      {"apiVersion", "peregrine.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", name}, {"namespace", ns}}},
      {"spec",
       {{"machines", 2},
        {"gpusPerMachine", 1},
        {"parallelism", {{"tensor", 1}, {"pipeline", 1}, {"data", 2}}},
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

  void StartController(std::vector<std::string> namespaces) {
    KubeModeOptions o;
    o.watch_namespaces = std::move(namespaces);
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

  std::optional<JobStatus> Status(const std::string& ns, const std::string& name) {
    auto obj = server.GetForTest(kJobs, ns, name);
    if (!obj.ok() || !obj->contains("status") || !(*obj)["status"].contains("phase")) return std::nullopt;
    auto st = JobStatusFromJson((*obj)["status"].dump());
    return st.ok() ? std::optional<JobStatus>(*st) : std::nullopt;
  }

  bool Running(const std::string& name, uint64_t step) {
    return Eventually([&] {
      auto st = Status(kNs, name);
      return st && st->phase == JobPhase::kRunning && st->last_completed_step >= step && st->standby_ready == 1;
    });
  }

  FakeKubeApiServer server;
  kube::Config config;
  std::unique_ptr<kube::RestClient> client;
  TrainingScript script;
  std::unique_ptr<KubeMode> mode;
  std::unique_ptr<FakeKubelet> kubelet;
};

bool Named(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_CASE("a pod with the job's label but no ownerReference survives the job's whole life and tear-down", "[integration]") {
  Env env;
  env.StartController({kNs});
  // Someone else's pod, labelled as the job's, running before the job exists (the
  // kubelet marks it Running without an agent).
  env.kubelet->StickPod("own-stray", json{{"phase", "Running"}});
  json stray = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", "own-stray"}, {"namespace", kNs}, {"labels", {{kJobLabel, "own"}}}}},
                {"spec", {{"containers", json::array({json{{"name", "main"}, {"image", "busybox"}}})}}}};
  auto created = env.server.CreateForTest("pods", kNs, stray);
  REQUIRE(created.ok());
  const std::string stray_uid = (*created)["metadata"]["uid"];
  REQUIRE(Eventually([&] {
    auto p = env.server.GetForTest("pods", kNs, "own-stray");
    return p.ok() && (*p)["status"].value("phase", "") == "Running";
  }));

  REQUIRE(env.server.CreateForTest(kJobs, kNs, Job(kNs, "own")).ok());
  REQUIRE(env.Running("own", 3));
  // Many rounds later: not adopted into a slot or the standby pool, not deleted.
  const JobStatus st = *env.Status(kNs, "own");
  for (const SlotStatus& s : st.slots) CHECK(s.pod != "own-stray");
  for (const StandbyStatus& s : st.standbys) CHECK(s.pod != "own-stray");
  CHECK_FALSE(Named(env.server.DeleteRequestsForTest("pods"), "own-stray"));

  // Deleting the job tears down its own pods (and the garbage collector the rest), not the stray.
  REQUIRE(env.client->Delete(TrainingJobsPath(kNs), "own").ok());
  REQUIRE(Eventually([&] { return !env.server.GetForTest(kJobs, kNs, "own").ok(); }));
  REQUIRE(Eventually([&] {
    for (const char* pod : {"own-m0", "own-m1", "own-s0"}) {
      if (env.server.GetForTest("pods", kNs, pod).ok()) return false;
    }
    return true;
  }));
  CHECK(Named(env.server.DeleteRequestsForTest("pods"), "own-m0"));  // the tear-down deleted its own
  CHECK_FALSE(Named(env.server.DeleteRequestsForTest("pods"), "own-stray"));
  auto after = env.server.GetForTest("pods", kNs, "own-stray");
  REQUIRE(after.ok());
  CHECK((*after)["metadata"]["uid"] == stray_uid);
  CHECK_FALSE((*after)["metadata"].contains("deletionTimestamp"));
  CHECK_FALSE((*after)["metadata"].contains("ownerReferences"));
}

TEST_CASE("with a namespace list a TrainingJob in another namespace is ignored", "[integration]") {
  Env env;
  REQUIRE(env.server.CreateForTest(kJobs, "elsewhere", Job("elsewhere", "far")).ok());
  env.StartController({kNs, "quiet"});
  REQUIRE(env.server.CreateForTest(kJobs, kNs, Job(kNs, "near")).ok());
  REQUIRE(env.Running("near", 2));
  // The job outside the list: no status, no finalizer, no pods, no Service.
  auto far = env.server.GetForTest(kJobs, "elsewhere", "far");
  REQUIRE(far.ok());
  CHECK_FALSE(far->contains("status"));
  CHECK_FALSE((*far)["metadata"].contains("finalizers"));
  for (const char* pod : {"far-m0", "far-m1", "far-s0"}) CHECK_FALSE(env.server.GetForTest("pods", "elsewhere", pod).ok());
  CHECK_FALSE(env.server.GetForTest("services", "elsewhere", "far").ok());
}

}  // namespace
}  // namespace peregrine::e2e
