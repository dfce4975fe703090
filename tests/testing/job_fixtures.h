// Jobs the controller tests share: DemoJob is 4 machines x 2 GPUs, TP=2 PP=2 DP=2, one or
// two standbys (the decision tests' job); LocalDemoJob is examples/local-demo.yaml as the
// README runs it. A job that does not parse fails the test (Catch2 REQUIRE).
#ifndef PEREGRINE_TESTS_TESTING_JOB_FIXTURES_H_
#define PEREGRINE_TESTS_TESTING_JOB_FIXTURES_H_

#include <string>

#include "controller/core/job_spec.h"

namespace peregrine::testing {

TrainingJob DemoJob();
// DemoJob's manifest; its last lines are the spec's fields, so a test may append more.
std::string DemoManifest();
// The job of the manifest `yaml`; REQUIREs that it parses (the parser's error is shown).
TrainingJob ParsedJob(const std::string& yaml);
TrainingJob LocalDemoJob();
// Job "j" running `train` on `machines` machines of `gpus_per_machine` GPUs, TP=`tensor`,
// PP=1, DP the rest: the small job of the agent-service tests.
TrainingJob TrainJob(int machines, int gpus_per_machine, int tensor);

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_JOB_FIXTURES_H_
