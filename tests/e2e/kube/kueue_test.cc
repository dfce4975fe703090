// Kueue admission end to end against the fake API server (kube_env.h) serving Kueue's
// resources (tests/fakes/fake_kueue.h), the test playing Kueue: a TrainingJob labelled
// kueue.x-k8s.io/queue-name gets a Workload it owns and runs no pod until the Workload is
// admitted; its pods then carry the admitted flavor's node labels and tolerations; an
// eviction suspends it (pods gone, quota released as Kueue's integrations do) until it is
// admitted again; the finished job finishes its Workload. Without Kueue installed the job
// waits with KueueNotInstalled and never runs.
#include <catch2/catch.hpp>

#include <string>

#include "absl/strings/str_cat.h"
#include "controller/core/conditions.h"
#include "controller/core/job_state.h"
#include "controller/kube/resources.h"
#include "tests/e2e/kube/kube_env.h"
#include "tests/fakes/fake_kueue.h"

namespace peregrine::e2e {
namespace {

using testing::kFakeWorkloads;

int JobPods(Env& env, const std::string& job) {
  kube::ListOptions opts;
  opts.label_selector = absl::StrCat(kJobLabel, "=", job);
  auto list = env.client->List(PodsPath(kNs), opts);
  return list.ok() ? static_cast<int>((*list)["items"].size()) : -1;
}

json QueuedManifest(const std::string& name, int machines) {
  json m = JobManifest(name, machines);
  m["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-a"}};
  return m;
}

std::string SuspendedReason(const JobStatus& st) {
  const Condition* c = FindCondition(st, "Suspended");
  return c != nullptr && c->status == ConditionStatus::kTrue ? c->reason : "";
}

std::string WorkloadOf(Env& env, const std::string& job) {
  return absl::StrCat("trainingjob-", job, "-", env.Uid(kJobs, job).substr(0, 8));
}

json WlCondition(const json& workload, const std::string& type) {
  for (const json& c : workload["status"].value("conditions", json::array())) {
    if (c["type"] == type) return c;
  }
  return json::object();
}

TEST_CASE("a queued TrainingJob runs only while Kueue admits its Workload, on the admitted flavor", "[integration]") {
  Env env;
  testing::ServeKueue(env.server);
  const json toleration = {{"key", "gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}};
  REQUIRE(testing::CreateResourceFlavor(env.server, "a100", {{"gpu.example.com/model", "a100"}}, {toleration}).ok());
  env.StartController();
  env.StartKubelet();
  env.Submit(QueuedManifest("queued", 2));

  // Not admitted: suspended, no pods, the Workload created and owned by the job.
  REQUIRE(env.WaitStatus("queued", [](const JobStatus& st) { return SuspendedReason(st) == "WorkloadNotAdmitted"; }));
  const std::string wl_name = WorkloadOf(env, "queued");
  auto wl = env.server.GetForTest(kFakeWorkloads, kNs, wl_name);
  REQUIRE(wl.ok());
  CHECK((*wl)["spec"]["queueName"] == "team-a");
  CHECK((*wl)["metadata"]["ownerReferences"][0]["uid"] == env.Uid(kJobs, "queued"));
  CHECK((*wl)["metadata"]["ownerReferences"][0]["controller"] == true);
  REQUIRE((*wl)["spec"]["podSets"].size() == 2);
  CHECK((*wl)["spec"]["podSets"][0]["name"] == "workers");
  CHECK((*wl)["spec"]["podSets"][0]["count"] == 2);
  CHECK((*wl)["spec"]["podSets"][1]["name"] == "standbys");
  CHECK((*wl)["spec"]["podSets"][1]["count"] == 1);
  CHECK(env.server.RequestCountForTest("create", "pods") == 0);

  // Admitted: the job runs, every pod on the flavor's nodes with its toleration.
  REQUIRE(testing::AdmitWorkload(env.server, kNs, wl_name, "cluster-gpu", "a100").ok());
  REQUIRE(env.WaitStatus("queued", RunningWithStandby(3)));
  for (const std::string pod : {"queued-m0", "queued-m1", "queued-s0"}) {
    auto p = env.server.GetForTest("pods", kNs, pod);
    REQUIRE(p.ok());
    CHECK((*p)["spec"]["nodeSelector"]["gpu.example.com/model"] == "a100");
    CHECK((*p)["spec"]["tolerations"].size() == 1);
    CHECK((*p)["spec"]["tolerations"][0] == toleration);
  }

  // Evicted: suspended, pods gone, and the quota released as Kueue's integrations do.
  REQUIRE(testing::EvictWorkload(env.server, kNs, wl_name, "Preempted", "Preempted to admit a higher priority one").ok());
  REQUIRE(env.WaitStatus("queued", [](const JobStatus& st) { return SuspendedReason(st) == "WorkloadEvicted"; }));
  CHECK(Eventually([&] { return JobPods(env, "queued") == 0; }));
  REQUIRE(Eventually([&] {
    auto w = env.server.GetForTest(kFakeWorkloads, kNs, wl_name);
    return w.ok() && !(*w)["status"].contains("admission") && WlCondition(*w, "QuotaReserved").value("reason", "") == "Pending";
  }));
  auto released = env.server.GetForTest(kFakeWorkloads, kNs, wl_name);
  REQUIRE(released.ok());
  CHECK(WlCondition(*released, "Admitted")["status"] == "False");
  CHECK(WlCondition(*released, "Requeued")["status"] == "True");

  // Admitted again: attempt 2 runs; then the job finishes and so does its Workload.
  REQUIRE(testing::AdmitWorkload(env.server, kNs, wl_name, "cluster-gpu", "a100").ok());
  REQUIRE(env.WaitStatus("queued", [](const JobStatus& st) {
    return st.phase == JobPhase::kRunning && st.attempt == 2 && st.last_completed_step >= 3;
  }));
  env.script.finish_step = env.Status("queued")->last_completed_step + 3;
  REQUIRE(env.WaitStatus("queued", [](const JobStatus& st) { return st.phase == JobPhase::kSucceeded; }));
  CHECK(Eventually([&] {
    auto w = env.server.GetForTest(kFakeWorkloads, kNs, wl_name);
    return w.ok() && WlCondition(*w, "Finished").value("status", "") == "True" &&
           WlCondition(*w, "Finished").value("reason", "") == "Succeeded";
  }));
}

TEST_CASE("without Kueue installed a queued TrainingJob says so, waits without pods and starts once Kueue is there", "[integration]") {
  Env env;
  env.StartController();
  env.StartKubelet();
  env.Submit(QueuedManifest("nokueue", 1));
  REQUIRE(env.WaitStatus("nokueue", [](const JobStatus& st) { return SuspendedReason(st) == "KueueNotInstalled"; }));
  const Condition* c = FindCondition(*env.Status("nokueue"), "Suspended");
  REQUIRE(c != nullptr);
  CHECK_THAT(c->message, Catch::Contains("does not serve workloads.kueue.x-k8s.io/v1beta1"));
  CHECK(env.Status("nokueue")->phase == JobPhase::kSuspended);
  CHECK(env.server.RequestCountForTest("create", "pods") == 0);
  CHECK(JobPods(env, "nokueue") == 0);

  // Kueue installed: a later round (the 2 s resync) creates the Workload, and admission
  // starts the job.
  testing::ServeKueue(env.server);
  REQUIRE(testing::CreateResourceFlavor(env.server, "default", {}, {}).ok());
  REQUIRE(env.WaitStatus("nokueue", [](const JobStatus& st) { return SuspendedReason(st) == "WorkloadNotAdmitted"; }));
  REQUIRE(testing::AdmitWorkload(env.server, kNs, WorkloadOf(env, "nokueue"), "cq", "default").ok());
  REQUIRE(env.WaitStatus("nokueue", [](const JobStatus& st) {
    return st.phase == JobPhase::kRunning && st.last_completed_step >= 2;
  }));
}

}  // namespace
}  // namespace peregrine::e2e
