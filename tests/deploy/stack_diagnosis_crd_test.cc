// status.stackDiagnosis (hang / MFU-drop investigations, controller/hang_policy.h) as the
// controller really writes it (JobStatusToJson) against the CRD's status schema: every key
// declared, every value within its declared type, bounds and time pattern.
#include <catch2/catch.hpp>

#include <string>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "tests/deploy/openapi_validator.h"
#include "tests/deploy/trainingjob_crd.h"
#include "tests/testing/status_samples.h"

namespace peregrine {
namespace {

TEST_CASE("status.stackDiagnosis as written is declared by the CRD", "[unit]") {
  // A hang investigation that evicted and an MFU-drop one waiting for its next round, whose
  // last round is still capturing (finished_at unset, flaggedIndex -1).
  const JobStatus s = testing::PopulatedStatus();
  YAML::Node object = YAML::Load(JobStatusToJson(s));
  REQUIRE(object["stackDiagnosis"]["investigations"].size() == 2);
  const std::string violations = absl::StrJoin(ValidateAgainstSchema(TrainingJobStatusSchema(), object), "\n");
  CHECK(violations.empty());
  INFO(violations);

  // And the schema is not vacuous: an undeclared key is reported.
  YAML::Node bad = YAML::Load(JobStatusToJson(s));
  bad["stackDiagnosis"]["investigations"][0]["bogus"] = 1;
  CHECK_FALSE(ValidateAgainstSchema(TrainingJobStatusSchema(), bad).empty());
}

}  // namespace
}  // namespace peregrine
