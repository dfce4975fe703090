// peregrinectl / kubectl peregrine status on a job larger than the status lists machine by
// machine: the stored status keeps its slots compactly (machineTable) and the command
// prints the counts and where the list is served instead of a table row per machine.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "cli/job_text.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

using nlohmann::json;

TEST_CASE("job text: a large job's status prints its machine counts and where the list is served", "[unit]") {
  testing::PlanWorld w(testing::TrainJob(200, 8, 8), "node-pool-a-");
  w.Step();
  w.Step();
  const json object = {{"metadata", {{"namespace", "ml"}, {"name", "j"}}},
                       {"spec", {{"machines", 200}, {"gpusPerMachine", 8}}},
                       {"status", json::parse(JobStatusToJson(w.status))}};
  absl::StatusOr<json> view = JobViewFromObject(object);
  REQUIRE(view.ok());
  std::ostringstream out;
  PrintJobStatus(*view, out);
  const std::string text = out.str();
  INFO(text);
  CHECK_THAT(text, Catch::Contains("machines: 200 (200 seen running, 0 replaced, 0 on unready nodes); the list: "
                                   "GET /api/v1/jobs/ml/j/machines on the controller"));
  CHECK_THAT(text, !Catch::Contains(" j-m0 "));  // no row per machine (the standby keeps its row)
  CHECK_THAT(text, Catch::Contains(" j-s0 "));

  // A small job's status still lists them, one row each, and no summary line.
  testing::PlanWorld small(testing::TrainJob(4, 8, 8), "node-pool-a-");
  small.Step();
  small.Step();
  json small_object = object;
  small_object["status"] = json::parse(JobStatusToJson(small.status));
  std::ostringstream small_out;
  PrintJobStatus(*JobViewFromObject(small_object), small_out);
  CHECK_THAT(small_out.str(), Catch::Contains("0     j-m0             node-pool-a-"));
  CHECK_THAT(small_out.str(), !Catch::Contains("machines: 4 ("));
}

}  // namespace
}  // namespace peregrine
