// peregrine-sim's command line: flags, --set fields and the errors naming them.
#include "fleetsim/sim_flags.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

namespace peregrine::fleetsim {
namespace {

TEST_CASE("peregrine-sim flags set the job, the models and the output", "[unit]") {
  absl::StatusOr<SimCommandLine> line = ParseSimCommandLine(
      {"--gpus", "2048", "--gpus-per-machine=4", "--days", "3.5", "--step-time=2", "--seed", "7", "--trace", "f.csv",
       "--json", "--skip-variants", "--events", "--set=restart_s=45", "--set", "slow_link.severity_median=0.3",
       "--set=grey_fraction=0.1", "--set=spare_machines=3", "--set=resync_s=0"});
  REQUIRE(line.ok());
  CHECK(line->shape.gpus == 2048);
  CHECK(line->shape.gpus_per_machine == 4);
  CHECK(line->shape.days == 3.5);
  CHECK(line->shape.step_time_s == 2);
  CHECK(line->shape.seed == 7);
  CHECK(line->trace_path == "f.csv");
  CHECK(line->json);
  CHECK(line->skip_variants);
  CHECK(line->events);
  CHECK(line->costs.restart_s == 45);
  CHECK(line->faults.slow_link.severity_median == 0.3);
  CHECK(line->faults.grey_fraction == 0.1);
  CHECK(line->options.spare_machines == 3);
  CHECK(line->options.resync_s == 0);
}

TEST_CASE("peregrine-sim prints no events unless asked, and --events takes no value", "[unit]") {
  absl::StatusOr<SimCommandLine> line = ParseSimCommandLine({"--gpus", "64"});
  REQUIRE(line.ok());
  CHECK_FALSE(line->events);
  absl::StatusOr<SimCommandLine> bad = ParseSimCommandLine({"--events=yes"});
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()) == "--events: takes no value");
}

TEST_CASE("every --set field the usage names is accepted", "[unit]") {
  for (const std::string& name : SimFieldNames()) {
    SimCommandLine line;
    INFO(name);
    CHECK(SetSimField(name, "1", &line).ok());
  }
}

TEST_CASE("bad peregrine-sim flags are refused with the flag named", "[unit]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--gpu", "8"}, "unknown flag --gpu"},
      {{"--gpus"}, "--gpus: needs a value"},
      {{"--gpus", "many"}, "--gpus: \"many\" is not an integer"},
      {{"--days=1e999"}, "--days"},
      {{"--seed", "-1"}, "--seed"},
      {{"--set=restart=5"}, "--set: unknown field \"restart\""},
      {{"--set=restart_s"}, "is not NAME=VALUE"},
      {{"--set=restart_s=fast"}, "--set=restart_s: \"fast\" is not a finite number"},
      {{"--json=yes"}, "--json: takes no value"},
      {{"stray"}, "unexpected argument \"stray\""},
  };
  for (const auto& [args, message] : cases) {
    absl::StatusOr<SimCommandLine> line = ParseSimCommandLine(args);
    INFO(message);
    REQUIRE_FALSE(line.ok());
    CHECK(line.status().message().find(message) != std::string::npos);
  }
}

TEST_CASE("out-of-range job shapes and costs are named by their validation", "[unit]") {
  JobShape shape;
  shape.days = 0;
  CHECK(ValidateJobShape(shape).message().find("days") != std::string::npos);
  shape = JobShape{};
  shape.step_time_s = 0;
  CHECK(ValidateJobShape(shape).message().find("step_time_s") != std::string::npos);
  shape = JobShape{};
  shape.gpus_per_machine = 0;
  CHECK(ValidateJobShape(shape).message().find("gpus_per_machine") != std::string::npos);
  CostModel costs;
  costs.pod_start_s = std::numeric_limits<double>::infinity();
  CHECK(ValidateCostModel(costs).message().find("pod_start_s") != std::string::npos);
  costs = CostModel{};
  costs.disk_checkpoint_save_s = costs.disk_checkpoint_interval_s;
  CHECK(ValidateCostModel(costs).message().find("disk_checkpoint_save_s") != std::string::npos);
  CHECK(ValidateCostModel(CostModel{}).ok());
  CHECK(ValidateJobShape(JobShape{}).ok());
}

}  // namespace
}  // namespace peregrine::fleetsim
