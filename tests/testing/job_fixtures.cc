#include "tests/testing/job_fixtures.h"

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "controller/job_parser.h"

namespace peregrine::testing {

TrainingJob ParsedJob(const std::string& yaml) {
  auto job = ParseTrainingJob(yaml);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  return *job;
}

std::string DemoManifest() {
  return R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: demo}
spec:
  machines: 4
  gpusPerMachine: 2
  parallelism: {tensor: 2, pipeline: 2, data: 2}
  codeVersion: {command: ["sim-trainer"]}
  standby: {dailyFailureRate: 0.02, min: 1, max: 2}
)";
}

TrainingJob DemoJob() { return ParsedJob(DemoManifest()); }

TrainingJob TrainJob(int machines, int gpus_per_machine, int tensor) {
  return ParsedJob(absl::StrCat(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec: {machines: )", machines, ", gpusPerMachine: ", gpus_per_machine, ", parallelism: {tensor: ", tensor,
                                ", pipeline: 1, data: ", machines * gpus_per_machine / tensor,
                                "}, codeVersion: {command: [train]}}\n"));
}

TrainingJob LocalDemoJob() {
  auto job = LoadTrainingJobFile(PEREGRINE_SOURCE_DIR "/examples/local-demo.yaml");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  return *job;
}

}  // namespace peregrine::testing
