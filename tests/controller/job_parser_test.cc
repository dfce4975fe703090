#include "controller/job_parser.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

namespace peregrine {
namespace {

const char* kValid = R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: demo, namespace: team-a, generation: 3}
spec:
  machines: 4
  gpusPerMachine: 2
  parallelism: {tensor: 2, pipeline: 2, data: 2}
  codeVersion: {command: ["sim-trainer", "--steps", "10"], revision: v1, env: {A: "1"}}
  standby: {dailyFailureRate: 0.02, min: 1, max: 2}
  template: {spec: {containers: [{name: train, image: "x:1"}]}}
)";

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  auto pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  return text.replace(pos, from.size(), to);
}

TEST_CASE("ParseTrainingJob reads every field of a valid manifest", "[unit]") {
  auto job = ParseTrainingJob(kValid);
  REQUIRE(job.ok());
  CHECK(job->metadata.name == "demo");
  CHECK(job->metadata.namespace_ == "team-a");
  CHECK(job->metadata.generation == 3);
  CHECK(job->spec.machines == 4);
  CHECK(job->spec.parallelism.pipeline == 2);
  CHECK(job->spec.code.command == std::vector<std::string>{"sim-trainer", "--steps", "10"});
  CHECK(job->spec.code.env.at("A") == "1");
  CHECK(job->spec.standby.daily_failure_rate == Approx(0.02));
  CHECK(job->spec.standby.percentile == Approx(0.99));  // default
  CHECK(job->spec.fault_tolerance.network_alarms_to_evict == 2);  // default
  CHECK(job->spec.template_json.find("\"containers\"") != std::string::npos);
}

TEST_CASE("ParseTrainingJob accepts the JSON the API server returns", "[unit]") {
  auto job = ParseTrainingJob(R"({"apiVersion":"peregrine.dev/v1alpha1","kind":"TrainingJob",
    "metadata":{"name":"j","namespace":"default","uid":"abc","resourceVersion":"17","generation":1},
    "spec":{"machines":1,"gpusPerMachine":8,"parallelism":{"tensor":8,"pipeline":1,"data":1},
            "codeVersion":{"command":["python","train.py"]}},
    "status":{"phase":"Running"}})");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  CHECK(job->metadata.resource_version == "17");
  CHECK(job->spec.parallelism.tensor == 8);
}

TEST_CASE("ParseTrainingJob refuses a template that is not UTF-8 instead of throwing (fuzz finding)", "[unit]") {
  auto job = ParseTrainingJob(Replace(kValid, "image: \"x:1\"", "image: \"x\x91\""));
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(job.status().message().find("spec.template") != std::string::npos);
  CHECK(job.status().message().find("UTF-8") != std::string::npos);
}

TEST_CASE("ParseTrainingJob names the field and the reason", "[unit]") {
  struct Case {
    std::string from, to, expected;
  };
  const Case cases[] = {
      {"machines: 4", "machines: four", "spec.machines: expected an integer, got 'four'"},
      {"machines: 4", "machines: 3", "spec.parallelism: tensor*pipeline*data = 8 must equal machines*gpusPerMachine = 6"},
      {"tensor: 2", "tensr: 2", "spec.parallelism.tensr: unknown field"},
      {"gpusPerMachine: 2", "gpusPerMachine: 2\n  foo: 1", "spec.foo: unknown field"},
      {"max: 2", "max: 0", "spec.standby.max: must be >= min (1)"},
      {"dailyFailureRate: 0.02", "dailyFailureRate: 2", "spec.standby.dailyFailureRate: must be within [0, 1]"},
      {"name: demo", "name: Demo_Job", "metadata.name: 'Demo_Job' is not a DNS-1123 label"},
      {"name: demo", "name: " + std::string(49, 'a'), "metadata.name: '" + std::string(49, 'a') +
                                                          "' must start with a letter and have at most 48 characters"},
      {"name: demo", "name: 7b-demo", "metadata.name: '7b-demo' must start with a letter"},
      {"command: [\"sim-trainer\", \"--steps\", \"10\"]", "command: sim-trainer", "spec.codeVersion.command: expected a list"},
      {"kind: TrainingJob", "kind: Job", "kind: 'Job' is not TrainingJob"},
      {"apiVersion: peregrine.dev/v1alpha1", "apiVersion: v1", "apiVersion: 'v1' is not peregrine.dev/v1alpha1"},
  };
  for (const Case& c : cases) {
    auto job = ParseTrainingJob(Replace(kValid, c.from, c.to));
    INFO(c.to);
    REQUIRE_FALSE(job.ok());
    CHECK(job.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(job.status().message()), Catch::Contains(c.expected));
  }
}

TEST_CASE("ParseTrainingJob rejects garbage without throwing", "[unit]") {
  for (const char* text : {"", "{", "- a\n- b", "apiVersion: [", "\x01\x02\x03", "spec: {machines: 1}",
                           "apiVersion: peregrine.dev/v1alpha1\nkind: TrainingJob\nmetadata: 5\nspec: {}"}) {
    auto job = ParseTrainingJob(text);
    CHECK_FALSE(job.ok());
    CHECK(job.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("LoadTrainingJobFile reports a missing file", "[unit]") {
  auto job = LoadTrainingJobFile("/nonexistent/job.yaml");
  CHECK(job.status().code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace peregrine
