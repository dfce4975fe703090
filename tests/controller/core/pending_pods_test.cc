// Before an attempt starts (phase Pending: the first attempt, or the next after a
// suspension) a slot whose pod is lost is created again (decide_pods.cc,
// RecreateLostPendingSlots): no rank trains yet, so there is nothing to recover and no
// machine to blame. Walked with PlanWorld at fixed times; no clocks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "controller/core/decision_engine.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

bool Creates(const JobPlan& plan, const std::string& pod) {
  return std::any_of(plan.create_pods.begin(), plan.create_pods.end(),
                     [&](const PodToCreate& c) { return c.name == pod; });
}

bool HasEvent(const JobPlan& plan, const std::string& reason) {
  return std::any_of(plan.events.begin(), plan.events.end(), [&](const JobEvent& e) { return e.reason == reason; });
}

TEST_CASE("a suspended job resumed while the cache still shows an old pod creates that slot's pod once the old one is gone", "[unit]") {
  testing::PlanWorld w(testing::TrainJob(2, 1, 1));
  w.Step();
  w.Step();
  REQUIRE(w.status.phase == JobPhase::kRunning);
  REQUIRE(w.status.attempt == 1);
  const PodObservation old_m1 = *w.Pod("j-m1");

  w.job.spec.suspend = true;
  w.Step();
  REQUIRE(w.status.phase == JobPhase::kSuspended);
  REQUIRE(w.Pod("j-m1") == nullptr);

  // Lifted at once: the controller's cache has not seen j-m1's deletion yet and still
  // shows the old pod running on its old machine.
  w.obs.pods.push_back(old_m1);
  w.job.spec.suspend = false;
  JobPlan resumed = w.Step();
  CHECK(w.status.phase == JobPhase::kPending);
  CHECK(Creates(resumed, "j-m0"));
  CHECK_FALSE(Creates(resumed, "j-m1"));  // the cache shows one

  // The deletion reaches the cache: the slot's pod is created again.
  w.obs.pods.erase(std::remove_if(w.obs.pods.begin(), w.obs.pods.end(),
                                  [](const PodObservation& p) { return p.name == "j-m1"; }),
                   w.obs.pods.end());
  JobPlan recreated = w.Step();
  CHECK(Creates(recreated, "j-m1"));
  CHECK(HasEvent(recreated, "PodRecreated"));
  CHECK(recreated.delete_pods.empty());
  CHECK(w.status.incidents.empty());
  w.Step();
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(w.status.attempt == 2);
  CHECK(w.quarantined.empty());
}

TEST_CASE("a pod that fails before the first attempt starts is deleted and created again, no machine blamed", "[unit]") {
  testing::PlanWorld w(testing::TrainJob(2, 1, 1));
  w.Step();  // the pods are created and come up
  REQUIRE(w.status.attempt == 0);
  PodObservation* m0 = w.Pod("j-m0");
  REQUIRE(m0 != nullptr);
  m0->running = false;
  m0->failed = true;
  m0->reason = "container trainer exited with code 1";
  JobPlan lost = w.Step();
  CHECK(w.status.attempt == 0);
  REQUIRE(lost.delete_pods.size() == 1);
  CHECK(lost.delete_pods[0].name == "j-m0");
  CHECK(HasEvent(lost, "PodRecreated"));
  JobPlan recreated = w.Step();
  CHECK(Creates(recreated, "j-m0"));
  w.Step();
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(w.status.attempt == 1);
  CHECK(w.status.incidents.empty());
  CHECK(w.quarantined.empty());
}

}  // namespace
}  // namespace peregrine
