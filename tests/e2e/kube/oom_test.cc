// A pod whose training container is OOMKilled is the workload's failure, not its machine's,
// end to end against the fake API server (kube_env.h): the pod is replaced (the warm standby
// takes its slot, the job runs on), but its node is not cordoned, not labelled quarantined
// and status.cordons stays empty; the eviction records machineFault false.
#include <catch2/catch.hpp>

#include <string>

#include "controller/core/job_state.h"
#include "tests/e2e/kube/kube_env.h"

namespace peregrine::e2e {
namespace {

TEST_CASE("an OOMKilled pod is replaced by the standby and its node is not cordoned", "[integration]") {
  Env env;
  RunJob(env, "oom", 3, 5);
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
