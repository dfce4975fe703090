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

TEST_CASE("exitRules and startTimeoutSeconds are read from faultTolerance", "[unit]") {
  auto job = ParseTrainingJob(std::string(kValid) + R"(
  faultTolerance:
    startTimeoutSeconds: 900
    exitRules:
      - {action: FailJob, exitCodes: [42, "100-110"]}
      - {action: Ignore, signals: [SIGTERM, 10, USR2]}
)");
  REQUIRE(job.ok());
  CHECK(job->spec.fault_tolerance.start_timeout_seconds == 900);
  const std::vector<ExitRule>& rules = job->spec.fault_tolerance.exit_rules;
  REQUIRE(rules.size() == 2);
  CHECK(rules[0].action == ExitAction::kFailJob);
  REQUIRE(rules[0].exit_codes.size() == 2);
  CHECK(rules[0].exit_codes[1].first == 100);
  CHECK(rules[0].exit_codes[1].last == 110);
  CHECK(rules[1].action == ExitAction::kIgnore);
  CHECK(rules[1].signals == std::vector<int>{15, 10, 12});
  auto defaults = ParseTrainingJob(kValid);
  REQUIRE(defaults.ok());
  CHECK(defaults->spec.fault_tolerance.start_timeout_seconds == 1800);
  CHECK(defaults->spec.fault_tolerance.exit_rules.empty());
}

TEST_CASE("Bad exitRules are refused with the field path and the reason", "[unit]") {
  auto error = [](const std::string& rules) {
    auto job = ParseTrainingJob(std::string(kValid) + "  faultTolerance:\n    exitRules: " + rules + "\n");
    REQUIRE_FALSE(job.ok());
    return std::string(job.status().message());
  };
  CHECK(error("[{action: Retry, exitCodes: [1]}]") ==
        "spec.faultTolerance.exitRules[0].action: unknown action 'Retry' (expected RestartInPlace, FailJob or Ignore)");
  CHECK(error("[{exitCodes: [1]}]") == "spec.faultTolerance.exitRules[0].action: required (RestartInPlace, FailJob or Ignore)");
  CHECK(error("[{action: FailJob}]") == "spec.faultTolerance.exitRules[0]: needs at least one of exitCodes and signals");
  CHECK(error("[{action: FailJob, exitCodes: [42]}, {action: Ignore, exitCodes: [\"40-45\"]}]") ==
        "spec.faultTolerance.exitRules[1].exitCodes[0]: exit code 42 is already covered by "
        "spec.faultTolerance.exitRules[0].exitCodes[0]; each exit code may be in one rule only");
  CHECK(error("[{action: FailJob, signals: [9, KILL]}]") ==
        "spec.faultTolerance.exitRules[0].signals[1]: SIGKILL is already covered by "
        "spec.faultTolerance.exitRules[0].signals[0]; each signal may be in one rule only");
  CHECK(error("[{action: FailJob, exitCodes: [0]}]").find("exitCodes[0]: '0' is not an exit code in 1..255") !=
        std::string::npos);
  CHECK(error("[{action: FailJob, exitCodes: [\"9-3\"]}]") ==
        "spec.faultTolerance.exitRules[0].exitCodes[0]: range '9-3' ends before it starts");
  CHECK(error("[{action: FailJob, exitCodes: [256]}]").find("exitRules[0].exitCodes[0]") != std::string::npos);
  CHECK(error("[{action: FailJob, signals: [SIGNOPE]}]") ==
        "spec.faultTolerance.exitRules[0].signals[0]: 'SIGNOPE' is not a signal number in 1..64 or a signal name");
  CHECK(error("[{action: FailJob, exitCodes: [1], when: x}]") ==
        "spec.faultTolerance.exitRules[0].when: unknown field (known: action, exitCodes, signals)");
  CHECK(error("{action: FailJob}") == "spec.faultTolerance.exitRules: expected a list of rules");
  auto job = ParseTrainingJob(std::string(kValid) + "  faultTolerance: {startTimeoutSeconds: 0}\n");
  REQUIRE_FALSE(job.ok());
  CHECK(job.status().message() == "spec.faultTolerance.startTimeoutSeconds: must be >= 1");
}

}  // namespace
}  // namespace peregrine
