// Least privilege end to end, KubeMode against FakeKubeApiServer (kube_env.h):
//   - a pod carrying a job's peregrine.dev/job label but no ownerReference to the job is
//     not the job's: it is never listed, adopted or deleted, neither while the job runs
//     nor when the job is deleted and torn down;
//   - with a namespace list the controller reconciles TrainingJobs in those namespaces
//     only: a job elsewhere gets no status, no finalizer, no pods.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "controller/core/job_state.h"
#include "controller/kube/kube_mode.h"
#include "controller/kube/resources.h"
#include "tests/e2e/kube/kube_env.h"

namespace peregrine::e2e {
namespace {

bool Named(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_CASE("a pod with the job's label but no ownerReference survives the job's whole life and tear-down", "[integration]") {
  Env env;
  env.StartController();
  env.StartKubelet();
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

  env.Submit(JobManifest("own", 2));
  REQUIRE(env.WaitStatus("own", RunningWithStandby(3)));
  // Many rounds later: not adopted into a slot or the standby pool, not deleted.
  const JobStatus st = *env.Status("own");
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
  env.Submit(JobManifest({.ns = "elsewhere", .name = "far", .machines = 2}));
  env.tweak_options = [](KubeModeOptions& o) {
    o.watch_namespace.clear();
    o.watch_namespaces = {kNs, "quiet"};
  };
  env.StartController();
  env.StartKubelet();
  env.Submit(JobManifest("near", 2));
  REQUIRE(env.WaitStatus("near", RunningWithStandby(2)));
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
