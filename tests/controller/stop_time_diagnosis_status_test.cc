// The stop-time diagnosis state, the loss reference and the incidents' stage records
// survive the status JSON round trip (a restarted controller resumes from them).
#include <catch2/catch.hpp>

#include "controller/status_json.h"
#include "tests/testing/status_samples.h"

namespace peregrine {
namespace {

TEST_CASE("Diagnosis state, stage records, loss reference and rollbacks round-trip through the status JSON",
          "[unit]") {
  // A stop-time diagnosis in its replay stage, the loss reference, a rollback and an open
  // incident with a failed stage record (tests/testing/status_samples.h).
  JobStatus s = testing::PopulatedStatus();
  REQUIRE(s.diagnosis.has_value());
  const StopTimeDiagnosis d = *s.diagnosis;
  REQUIRE(s.incidents.back().diagnosis.size() == 1);
  const DiagnosisStageRecord r = s.incidents.back().diagnosis[0];
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
  CHECK(back->loss_reference.grad_norms == s.loss_reference.grad_norms);
  CHECK(back->loss_reference.step == s.loss_reference.step);
  REQUIRE(back->incidents.size() == s.incidents.size());
  REQUIRE(back->incidents.back().diagnosis.size() == 1);
  const DiagnosisStageRecord& b = back->incidents.back().diagnosis[0];
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
