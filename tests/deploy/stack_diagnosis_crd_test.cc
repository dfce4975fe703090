// status.stackDiagnosis (hang / MFU-drop investigations, controller/hang_policy.h) as the
// controller really writes it (JobStatusToJson) against the CRD's status schema: every key
// declared, every value within its declared type, bounds and time pattern.
#include <catch2/catch.hpp>

#include <string>

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_join.h"
#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "tests/deploy/deploy_tools.h"
#include "tests/deploy/openapi_validator.h"

namespace peregrine {
namespace {

YAML::Node StackStatusSchema() {
  const YAML::Node crd = YAML::LoadFile((SourceDir() / "crds/peregrine.dev_trainingjobs.yaml").string());
  for (const YAML::Node& v : crd["spec"]["versions"]) {
    if (v["name"].Scalar() == "v1alpha1") return v["schema"]["openAPIV3Schema"]["properties"]["status"];
  }
  FAIL("no v1alpha1 version in the CRD");
  return {};
}

constexpr int64_t kT0 = 1'735'787'045'123'456'000;  // 2025-01-02T03:04:05.123456Z
constexpr int64_t kSecond = 1'000'000'000;

TEST_CASE("status.stackDiagnosis as written is declared by the CRD", "[unit]") {
  JobStatus s;
  s.phase = JobPhase::kRecovering;
  StackDiagnosisStatus& d = s.stack_diagnosis;
  d.progress_attempt = 3;
  d.progress_step = 1200;
  d.progress_at = kT0;
  d.healthy_iteration_seconds = 0.42;
  d.degraded_since = kT0 + kSecond;
  d.next_id = 3;
  StackInvestigation hang;
  hang.id = 1;
  hang.kind = InvestigationKind::kHang;
  hang.state = InvestigationState::kEvicted;
  hang.attempt = 2;
  hang.incident_id = 7;
  hang.signal = "the slowest rank completed no step for 61.0 s";
  hang.started_at = kT0 + 2 * kSecond;
  hang.ended_at = kT0 + 5 * kSecond;
  StackRound r;
  r.started_at = kT0 + 2 * kSecond;
  r.finished_at = kT0 + 3 * kSecond;
  r.groups = {"ranks 2,3,6,7 (healthy): poll <- Exchange", "ranks 0,1: ncclRecv", "ranks 4,5: nanosleep"};
  r.suspect_ranks = {0, 1, 4, 5};
  r.unanswered_slots = {};
  r.explanation = "pp 0 covers every suspect machine";
  hang.rounds.push_back(r);
  hang.chosen_group = "pp 0";
  hang.slots = {0, 2};
  hang.machines = {"node-a", "node-c"};
  hang.explanation = "pp 0";
  d.investigations.push_back(hang);
  StackInvestigation mfu;
  mfu.id = 2;
  mfu.kind = InvestigationKind::kMfuDrop;
  mfu.state = InvestigationState::kWaiting;
  mfu.attempt = 3;
  mfu.rounds_planned = 5;
  mfu.next_round_at = kT0 + 20 * kSecond;
  StackRound m;
  m.started_at = kT0 + 10 * kSecond;
  m.finished_at = kT0 + 11 * kSecond;
  m.suspect_ranks = {2, 3};
  m.unanswered_slots = {3};
  m.flagged_kind = "tp";
  m.flagged_index = 1;
  mfu.rounds.push_back(m);
  mfu.rounds.push_back(StackRound{});  // capturing: finished_at unset, flaggedIndex -1
  mfu.rounds.back().started_at = kT0 + 20 * kSecond;
  d.investigations.push_back(mfu);

  YAML::Node object = YAML::Load(JobStatusToJson(s));
  REQUIRE(object["stackDiagnosis"]["investigations"].size() == 2);
  const std::string violations = absl::StrJoin(ValidateAgainstSchema(StackStatusSchema(), object), "\n");
  CHECK(violations.empty());
  INFO(violations);

  // And the schema is not vacuous: an undeclared key is reported.
  YAML::Node bad = YAML::Load(JobStatusToJson(s));
  bad["stackDiagnosis"]["investigations"][0]["bogus"] = 1;
  CHECK_FALSE(ValidateAgainstSchema(StackStatusSchema(), bad).empty());
}

}  // namespace
}  // namespace peregrine
