// The status the controller really writes (peregrine::JobStatusToJson, the body
// KubeCluster::PersistStatus PUTs to the status subresource) against the CRD's status
// schema. A real API server prunes every field the structural schema does not declare
// and rejects a write that violates it (wedging the job's status); the validator here
// reports undeclared fields as errors instead, so a key status_json.cc writes without a
// CRD declaration fails this suite rather than silently losing resume state.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "tests/deploy/deploy_tools.h"
#include "tests/deploy/openapi_validator.h"
#include "tests/deploy/trainingjob_crd.h"
#include "tests/testing/status_samples.h"

namespace peregrine {
namespace {

using testing::kSampleT0;
using testing::PopulatedStatus;
using testing::SampleCode;

// JSON is YAML: numbers stay plain (typed int/float), strings stay quoted.
std::string Violations(const JobStatus& status) {
  YAML::Node object = YAML::Load(JobStatusToJson(status));
  return absl::StrJoin(ValidateAgainstSchema(TrainingJobStatusSchema(), object), "\n");
}

// A job mid-recovery with every field JobStatus has set to a value other than its default
// (tests/testing/status_samples.h).
TEST_CASE("the status the controller writes is fully declared by the CRD", "[unit]") {
  const JobStatus s = PopulatedStatus();
  INFO(JobStatusToJson(s, 2));
  CHECK(Violations(s) == "");
}

TEST_CASE("the in-memory checkpoint status is declared by the CRD", "[unit]") {
  JobStatus s = PopulatedStatus();
  s.incidents.front().steps_redone = 7;
  CheckpointStatus& c = s.checkpoint;
  c.last_complete_step = 40;
  c.last_persisted_step = 20;
  c.placement = {{0, {1}}, {1, {0}}};
  c.degraded_reason = "placement degraded: pure data parallelism";
  c.failed_steps = {50};
  c.events = {{kSampleT0, "llm-m0", CheckpointEventKind::kRestoreFailed, 50, 3, "no holder has it"}};
  c.events_seen = {{"llm-m0", kSampleT0}};
  INFO(JobStatusToJson(s, 2));
  CHECK(Violations(s) == "");
}

TEST_CASE("a fresh job's status (every time unset, written as \"\") is valid", "[unit]") {
  JobStatus s;  // what the controller writes on its first round: Pending, nothing observed
  s.slots = {{0, "llm-p0", "", false}};
  s.standbys = {{"llm-p1", "", false}};
  s.standby_desired = 1;
  Incident triaging;  // an incident still triaging: decidedAt and resumedAt unset
  triaging.id = 1;
  triaging.kind = IncidentKind::kMachineLost;
  triaging.detected_at = kSampleT0;
  s.incidents = {triaging};
  s.evicted = {{"node-7", "", "NotReady", 0}};
  FailSlowFinding profiling;  // still profiling: nothing localized or ended
  profiling.id = 1;
  profiling.state = FailSlowState::kProfiling;
  s.fail_slows = {profiling};
  s.version_history = {{SampleCode("v1"), 0, "Created", VersionOutcome::kRunning, 0}};
  INFO(JobStatusToJson(s, 2));
  CHECK(Violations(s) == "");
}

TEST_CASE("the status schema still rejects what the API server would", "[unit]") {
  JobStatus s = PopulatedStatus();
  SECTION("a time that is neither RFC 3339 nor empty") {
    YAML::Node object = YAML::Load(JobStatusToJson(s));
    object["startedAt"] = "yesterday";
    object["incidents"][0]["detectedAt"] = "2025-01-02 03:04:05";
    const std::string errors = absl::StrJoin(ValidateAgainstSchema(TrainingJobStatusSchema(), object), "\n");
    CHECK_THAT(errors, Catch::Contains("startedAt: \"yesterday\" does not match the pattern"));
    CHECK_THAT(errors, Catch::Contains("incidents[0].detectedAt: \"2025-01-02 03:04:05\" does not match"));
  }
  SECTION("a key the schema does not declare (the API server would prune it)") {
    YAML::Node object = YAML::Load(JobStatusToJson(s));
    object["machines"][0]["lastSeen"] = "node-1";
    object["standby"]["pods"][0]["state"] = "Ready";
    object["resumeFrom"] = 3;
    const std::string errors = absl::StrJoin(ValidateAgainstSchema(TrainingJobStatusSchema(), object), "\n");
    CHECK_THAT(errors, Catch::Contains("machines[0].lastSeen: unknown field"));
    CHECK_THAT(errors, Catch::Contains("standby.pods[0].state: unknown field"));
    CHECK_THAT(errors, Catch::Contains("resumeFrom: unknown field"));
  }
  SECTION("a condition without a reason, ETTR and masterPort out of range") {
    s.conditions[0].reason = "";
    s.ettr = 1.5;
    s.master_port = 70000;
    const std::string errors = Violations(s);
    CHECK_THAT(errors, Catch::Contains("conditions[0].reason: must be at least 1 characters"));
    CHECK_THAT(errors, Catch::Contains("ettr: must be <= 1"));
    CHECK_THAT(errors, Catch::Contains("masterPort: must be <= 65535"));
  }
}

TEST_CASE("every status key the schema declares has a type and a description", "[unit]") {
  CHECK(absl::StrJoin(CheckStructuralSchema(TrainingJobStatusSchema()), "\n") == "");
}

}  // namespace
}  // namespace peregrine
