// The stop-time diagnosis state, the loss reference and the incidents' stage records
// survive the status JSON round trip (a restarted controller resumes from them).
#include <catch2/catch.hpp>

#include "controller/status_json.h"

namespace peregrine {
namespace {

TEST_CASE("Diagnosis state, stage records, loss reference and rollbacks round-trip through the status JSON",
          "[unit]") {
  JobStatus s;
  s.phase = JobPhase::kRecovering;
  s.rollbacks = 1;
  s.loss_reference.losses = {2.5, 2.25, 2.0};
  s.loss_reference.grad_norms = {1.5, 1.25};
  s.loss_reference.step = 33;
  StopTimeDiagnosis d;
  d.incident_id = 7;
  d.numeric = true;
  d.stage = "replay";
  d.round = 1;
  d.stage_started_at = 1'700'000'000'000'000'000;
  d.port_base = 41000;
  d.outcomes = {{"0/0", "abc"}, {"0/1", "failed"}};
  s.diagnosis = d;
  Incident inc;
  inc.id = 7;
  inc.kind = IncidentKind::kNaNLoss;
  inc.detected_at = 1'700'000'000'000'000'000;
  DiagnosisStageRecord r;
  r.stage = "alignment";
  r.started_at = 1'700'000'001'000'000'000;
  r.finished_at = 1'700'000'002'000'000'000;
  r.verdict = StageVerdict::kNoVerdict;
  r.failed_machines = {"local-3"};
  r.results = {"local-0: passed digest abc", "local-3: FAILED: NaN"};
  r.note = "no digest is held by a majority of 2 machines: no verdict";
  inc.diagnosis = {r};
  s.incidents = {inc};
  const std::string text = JobStatusToJson(s);
  auto back = JobStatusFromJson(text);
  REQUIRE(back.ok());
  CHECK(JobStatusToJson(*back) == text);
  REQUIRE(back->diagnosis.has_value());
  CHECK(back->diagnosis->stage == "replay");
  CHECK(back->diagnosis->round == 1);
  CHECK(back->diagnosis->numeric);
  CHECK(back->diagnosis->port_base == 41000);
  CHECK(back->diagnosis->outcomes == d.outcomes);
  CHECK(back->diagnosis->stage_started_at == d.stage_started_at);
  CHECK(back->rollbacks == 1);
  CHECK(back->loss_reference.losses == s.loss_reference.losses);
  CHECK(back->loss_reference.step == 33);
  REQUIRE(back->incidents.size() == 1);
  REQUIRE(back->incidents[0].diagnosis.size() == 1);
  const DiagnosisStageRecord& b = back->incidents[0].diagnosis[0];
  CHECK(b.stage == r.stage);
  CHECK(b.started_at == r.started_at);
  CHECK(b.finished_at == r.finished_at);
  CHECK(b.verdict == r.verdict);
  CHECK(b.failed_machines == r.failed_machines);
  CHECK(b.results == r.results);
  CHECK(b.note == r.note);

  s.diagnosis.reset();
  auto none = JobStatusFromJson(JobStatusToJson(s));
  REQUIRE(none.ok());
  CHECK_FALSE(none->diagnosis.has_value());
}

}  // namespace
}  // namespace peregrine
