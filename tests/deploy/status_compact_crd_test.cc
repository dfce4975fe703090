// The compact forms of a large job's status (controller/status_compact.h) are declared by
// the CRD's status schema, so the API server prunes none of the state a restarted
// controller resumes from: machineTable and machineSummary, the checkpoint placement in
// runs and its event marks by slot, an incident naming the first of its machines with
// their count, and evictions whose reason is their incident's signal.
#include <catch2/catch.hpp>

#include <string>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "tests/deploy/openapi_validator.h"
#include "tests/deploy/trainingjob_crd.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"
#include "tests/testing/status_samples.h"

namespace peregrine {
namespace {

TEST_CASE("a large job's compact status is fully declared by the CRD", "[unit]") {
  constexpr int kMachines = 200;
  testing::PlanWorld w(testing::TrainJob(kMachines, 8, 8), "node-pool-a-");
  w.Step();
  w.Step();
  JobStatus s = w.status;
  s.slots[3].node_unready_since = testing::kSampleT0;
  s.slots[3].node_unready_step = 40;
  s.slots[3].node_unready_progress_at = testing::kSampleT0;
  for (int i = 0; i < kMachines; ++i) s.checkpoint.placement.push_back({i, {(i + 1) % kMachines, (i + 2) % kMachines}});
  for (int i = 0; i < kMachines; i += 2) s.checkpoint.events_seen[s.slots[i].pod] = testing::kSampleT0 + i;
  s.checkpoint.events_seen["j-m0-old"] = testing::kSampleT0;  // a pod no slot holds now
  Incident inc;
  inc.id = 1;
  inc.kind = IncidentKind::kMachineFault;
  inc.signal = "machine node-pool-a-0 (slot 0, pod j-m0): node NotReady; and 99 more (100 in all)";
  inc.detected_at = testing::kSampleT0;
  for (int i = 0; i < 100; ++i) {
    inc.machines.push_back(s.slots[i].machine_id);
    Eviction e{s.slots[i].machine_id, s.slots[i].pod, inc.signal, testing::kSampleT0};
    e.incident_id = 1;
    s.evicted.push_back(e);
  }
  s.incidents.push_back(inc);

  const std::string text = JobStatusToJson(s);
  const nlohmann::json j = nlohmann::json::parse(text);
  REQUIRE(j.contains("machineTable"));
  REQUIRE(j["machineTable"]["nodeUnready"].size() == 1);
  REQUIRE(j["checkpoint"].contains("placementRuns"));
  REQUIRE(j["checkpoint"].contains("eventsSeenBySlot"));
  REQUIRE(j["checkpoint"]["eventsSeen"].size() == 1);
  REQUIRE(j["incidents"][0]["machinesCount"] == 100);
  REQUIRE(j["evictedMachines"][0]["reasonIsIncidentSignal"] == true);
  INFO(text);
  YAML::Node object = YAML::Load(text);  // JSON is YAML
  CHECK(absl::StrJoin(ValidateAgainstSchema(TrainingJobStatusSchema(), object), "\n") == "");
}

}  // namespace
}  // namespace peregrine
