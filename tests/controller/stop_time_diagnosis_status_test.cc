// The stop-time diagnosis state, the loss reference and the incidents' stage records
// survive the status JSON round trip (a restarted controller resumes from them).
#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  CHECK(back->diagnosis->stage == StopTimeStage::kReplay);
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

TEST_CASE("Stop-time stages are named in the status JSON, an unknown name is refused naming the field", "[unit]") {
  const std::pair<StopTimeStage, const char*> stages[] = {
      {StopTimeStage::kStop, "stop"},           {StopTimeStage::kAlignment, "alignment"},
      {StopTimeStage::kEud, "eud"},             {StopTimeStage::kAllToAll, "all_to_all"},
      {StopTimeStage::kAllGather, "all_gather"}, {StopTimeStage::kReplay, "replay"}};
  for (const auto& [stage, name] : stages) {
    INFO(name);
    CHECK(std::string(ToString(stage)) == name);
    CHECK(ParseStopTimeStage(name) == stage);
    CHECK(absl::StrFormat("%s", stage) == name);
    JobStatus s = testing::PopulatedStatus();
    s.diagnosis->stage = stage;
    s.incidents.back().diagnosis[0].stage = stage;
    const std::string text = JobStatusToJson(s);
    // Both the state and the record carry the name.
    const std::string field = absl::StrCat("\"stage\":\"", name, "\"");
    const size_t first = text.find(field);
    REQUIRE(first != std::string::npos);
    CHECK(text.find(field, first + 1) != std::string::npos);
    auto back = JobStatusFromJson(text);
    REQUIRE(back.ok());
    CHECK(back->diagnosis->stage == stage);
    CHECK(back->incidents.back().diagnosis[0].stage == stage);
  }
  CHECK_FALSE(ParseStopTimeStage("").has_value());
  CHECK_FALSE(ParseStopTimeStage("Replay").has_value());

  // A persisted status with a stage this controller does not know: the field is named.
  JobStatus s = testing::PopulatedStatus();
  s.incidents.back().diagnosis[0].stage = StopTimeStage::kEud;  // the state stays in replay
  const std::string text = JobStatusToJson(s);
  std::string bad_state = text;
  bad_state.replace(bad_state.find("\"stage\":\"replay\""), 16, "\"stage\":\"warp\"");
  absl::StatusOr<JobStatus> bad = JobStatusFromJson(bad_state);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("diagnosis.stage: unknown value 'warp'"));
  std::string bad_record = text;
  bad_record.replace(bad_record.find("\"stage\":\"eud\""), 13, "\"stage\":\"gpu-burn\"");
  bad = JobStatusFromJson(bad_record);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()),
             Catch::Contains("incidents[].diagnosis[].stage: unknown value 'gpu-burn'"));
}

}  // namespace
}  // namespace peregrine
