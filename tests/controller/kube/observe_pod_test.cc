// A pod as the decision core sees it, table-driven: ObservePodObject (pod_observer.h, the
// adapter's pure mapping of a pod and its node) then the core's rules for pods that cannot
// start (controller/core/pod_health.h: FailStuckStandbys, StuckPodsMessage).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "controller/core/pod_health.h"
#include "controller/kube/pod_observer.h"

namespace peregrine {
namespace {

using nlohmann::json;

json Pod(const std::string& role, json status) {
  return json{{"metadata",
               {{"name", "job-" + role},
                {"creationTimestamp", "2026-01-01T00:00:00Z"},
                {"labels", {{"peregrine.dev/role", role}}}}},
              {"spec", {{"nodeName", "node-1"}}},
              {"status", std::move(status)}};
}

json Waiting(const std::string& reason) {
  return json{{"phase", "Pending"},
              {"containerStatuses",
               json::array({json{{"name", "trainer"}, {"state", {{"waiting", {{"reason", reason}, {"message", "m"}}}}}}})}};
}

TEST_CASE("A pod maps to phases, stuck reasons and the standby pending timeout", "[unit]") {
  const absl::Time created = absl::FromUnixSeconds(1767225600);  // 2026-01-01T00:00:00Z
  const absl::Duration timeout = absl::Minutes(10);
  const json ready_node = {{"status", {{"conditions", json::array({json{{"type", "Ready"}, {"status", "True"}}})}}}};
  const json lost_node = {{"status", {{"conditions", json::array({json{{"type", "Ready"}, {"status", "Unknown"}}})}}}};
  const json unschedulable = {{"phase", "Pending"},
                              {"conditions", json::array({json{{"type", "PodScheduled"},
                                                               {"status", "False"},
                                                               {"reason", "Unschedulable"},
                                                               {"message", "0/3 nodes are available"}}})}};
  struct Case {
    const char* name;
    json pod;
    const json* node;
    absl::Duration age;
    bool running, failed;
    const char* waiting;  // substring of waiting_reason ("" = empty)
    const char* reason;   // substring of reason ("" = empty)
    bool machine;         // machine_id kept
  };
  const std::vector<Case> cases = {
      {"running", Pod("active", {{"phase", "Running"}}), &ready_node, absl::Minutes(1), true, false, "", "", true},
      {"failed", Pod("active", {{"phase", "Failed"}}), &ready_node, absl::Minutes(1), false, true, "", "pod Failed", true},
      // An unready node alone is not a failure: the core judges it (JudgeNodeUnready).
      {"node lost", Pod("active", {{"phase", "Running"}}), &lost_node, absl::Minutes(1), true, false, "",
       "node node-1 NotReady (Ready=Unknown)", true},
      {"creating is not stuck", Pod("standby", Waiting("ContainerCreating")), &ready_node, absl::Hours(1), false,
       false, "", "", true},
      {"image pull back-off", Pod("active", Waiting("ImagePullBackOff")), &ready_node, absl::Hours(1), false, false,
       "ImagePullBackOff (container trainer): m", "", true},
      {"config error", Pod("active", Waiting("CreateContainerConfigError")), &ready_node, absl::Minutes(1), false,
       false, "CreateContainerConfigError", "", true},
      {"unschedulable", Pod("active", unschedulable), nullptr, absl::Hours(1), false, false,
       "Unschedulable: 0/3 nodes are available", "", true},
      {"standby stuck, within the timeout", Pod("standby", Waiting("ErrImagePull")), &ready_node, absl::Minutes(9),
       false, false, "ErrImagePull", "", true},
      {"standby stuck past the timeout", Pod("standby", Waiting("ErrImagePull")), &ready_node, absl::Minutes(10),
       false, true, "ErrImagePull", "stuck Pending for 10m: ErrImagePull", false},
      {"standby unschedulable past the timeout", Pod("standby", unschedulable), nullptr, absl::Hours(2), false, true,
       "Unschedulable", "stuck Pending for 2h: Unschedulable", false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    std::vector<PodObservation> pods = {ObservePodObject(c.pod, c.node)};
    JobStatus status;  // the core knows the standbys from the status
    if (c.pod["metadata"]["labels"]["peregrine.dev/role"] == "standby") {
      StandbyStatus standby;
      standby.pod = pods[0].name;
      status.standbys.push_back(standby);
    }
    FailStuckStandbys(status, absl::ToUnixNanos(created + c.age), absl::ToInt64Nanoseconds(timeout), pods);
    const PodObservation& obs = pods[0];
    CHECK(obs.running == c.running);
    CHECK(obs.failed == c.failed);
    if (std::string(c.waiting).empty()) {
      CHECK(obs.waiting_reason.empty());
    } else {
      CHECK_THAT(obs.waiting_reason, Catch::Contains(c.waiting));
    }
    if (std::string(c.reason).empty()) {
      CHECK(obs.reason.empty());
    } else {
      CHECK_THAT(obs.reason, Catch::Contains(c.reason));
    }
    CHECK(obs.machine_id == (c.machine ? "node-1" : ""));
  }
}

TEST_CASE("Pods lost for causes not their machine's are marked so: node causes are not", "[unit]") {
  const json ready_node = {{"status", {{"conditions", json::array({json{{"type", "Ready"}, {"status", "True"}}})}}}};
  const json oom = {{"phase", "Failed"},
                    {"containerStatuses",
                     json::array({json{{"name", "trainer"},
                                       {"state", {{"terminated", {{"reason", "OOMKilled"}, {"exitCode", 137}}}}}}})}};
  const json evicted = {{"phase", "Failed"},
                        {"reason", "Evicted"},
                        {"message", "The node was low on resource: memory. Threshold quantity: 100Mi"}};
  auto disrupted = [](const char* reason) {
    return json{{"phase", "Running"},
                {"conditions", json::array({json{{"type", "DisruptionTarget"},
                                                 {"status", "True"},
                                                 {"reason", reason},
                                                 {"message", "m"}}})}};
  };
  json deleted = Pod("active", {{"phase", "Running"}});
  deleted["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:00Z";
  struct Case {
    const char* name;
    json pod;
    bool failed, not_machine_fault;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"OOMKilled", Pod("active", oom), true, true, "container trainer OOMKilled (exit code 137)"},
      {"evicted for memory pressure", Pod("active", evicted), true, true, "pod Evicted: The node was low on resource: memory"},
      {"preempted by the scheduler", Pod("active", disrupted("PreemptionByScheduler")), true, true,
       "PreemptionByScheduler"},
      {"evicted through the API", Pod("active", disrupted("EvictionByEvictionAPI")), true, true,
       "EvictionByEvictionAPI"},
      {"deleted by a user", deleted, true, true, "not by Peregrine"},
      // The taint manager deletes pods of an unreachable node: that is the node's.
      {"taint manager", Pod("active", disrupted("DeletionByTaintManager")), false, false, ""},
      {"crashed", Pod("active", {{"phase", "Failed"},
                                 {"containerStatuses",
                                  json::array({json{{"name", "trainer"},
                                                    {"state", {{"terminated", {{"reason", "Error"}, {"exitCode", 1}}}}}}})}}),
       true, false, "container trainer terminated (Error, exit code 1)"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const PodObservation obs = ObservePodObject(c.pod, &ready_node);
    CHECK(obs.failed == c.failed);
    CHECK(obs.not_machine_fault == c.not_machine_fault);
    CHECK_FALSE(obs.node_unready);
    if (std::string(c.reason).empty()) {
      CHECK(obs.reason.empty());
    } else {
      CHECK_THAT(obs.reason, Catch::Contains(c.reason));
    }
  }
  const json lost_node = {{"status", {{"conditions", json::array({json{{"type", "Ready"}, {"status", "False"}}})}}}};
  const PodObservation on_lost = ObservePodObject(Pod("active", {{"phase", "Running"}}), &lost_node);
  CHECK(on_lost.node_unready);
  CHECK(on_lost.running);
  CHECK_FALSE(on_lost.failed);
  CHECK(on_lost.reason == "node node-1 NotReady (Ready=False)");
}

TEST_CASE("StuckPodsMessage lists at most five stuck pods", "[unit]") {
  std::vector<PodObservation> pods;
  CHECK(StuckPodsMessage(pods).empty());
  for (int i = 0; i < 8; ++i) {
    PodObservation p;
    p.name = "j-m" + std::to_string(i);
    if (i != 0) p.waiting_reason = "ImagePullBackOff";
    pods.push_back(p);
  }
  CHECK(StuckPodsMessage(pods) ==
        "j-m1: ImagePullBackOff; j-m2: ImagePullBackOff; j-m3: ImagePullBackOff; j-m4: ImagePullBackOff; "
        "j-m5: ImagePullBackOff; and 2 more");
}

}  // namespace
}  // namespace peregrine
