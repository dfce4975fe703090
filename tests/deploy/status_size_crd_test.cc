// The bounded status of a whole large job failing at once (controller/core/list_summary.h
// and the status JSON's truncation) is still accepted by the CRD's status schema.
#include <catch2/catch.hpp>

#include <string>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "controller/status_json.h"
#include "tests/deploy/openapi_validator.h"
#include "tests/deploy/trainingjob_crd.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

TEST_CASE("the status after 100000 ranks crashed at once is accepted by the CRD status schema", "[unit]") {
  constexpr int kMachines = 3'125, kGpus = 32;
  testing::PlanWorld w(testing::TrainJob(kMachines, kGpus, kGpus));
  w.Step();
  w.Step();
  w.Progress(10);
  w.Step();
  for (const SlotStatus& slot : w.status.slots) {
    AgentObservation* a = w.Agent(slot.pod);
    REQUIRE(a != nullptr);
    a->phase = AgentTrainingPhase::kExited;
    for (int local = 0; local < kGpus; ++local) a->exits.push_back(RankExit{slot.index * kGpus + local, 1, 0, {"boom"}});
  }
  w.now += 1'000'000'000;
  w.Step();
  w.now += 5'000'000'000;
  w.Step();
  const std::string json = JobStatusToJson(w.status);
  REQUIRE(json.find("in all)") != std::string::npos);
  YAML::Node object = YAML::Load(json);
  CHECK(absl::StrJoin(ValidateAgainstSchema(TrainingJobStatusSchema(), object), "\n") == "");
}

}  // namespace
}  // namespace peregrine
