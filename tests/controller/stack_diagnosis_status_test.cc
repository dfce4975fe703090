// status.stackDiagnosis survives the JSON round trip a restarted controller resumes from
// (controller/status_json.h): the progress watch, the MFU baseline and every
// investigation with its rounds, so nothing is captured or evicted twice.
#include <catch2/catch.hpp>

#include "controller/core/job_state.h"
#include "controller/status_json.h"
#include "tests/testing/status_samples.h"

namespace peregrine {
namespace {

TEST_CASE("status.stackDiagnosis survives a JSON round trip", "[unit]") {
  // A hang investigation that evicted, an MFU-drop one waiting with a finished and a
  // capturing round (tests/testing/status_samples.h).
  const JobStatus s = testing::PopulatedStatus();
  const StackDiagnosisStatus& d = s.stack_diagnosis;

  const std::string json = JobStatusToJson(s);
  auto back = JobStatusFromJson(json);
  REQUIRE(back.ok());
  CHECK(JobStatusToJson(*back) == json);
  const StackDiagnosisStatus& b = back->stack_diagnosis;
  CHECK(b.progress_attempt == d.progress_attempt);
  CHECK(b.progress_step == d.progress_step);
  CHECK(b.progress_at == d.progress_at);
  CHECK(b.healthy_iteration_seconds == d.healthy_iteration_seconds);
  CHECK(b.degraded_since == d.degraded_since);
  CHECK(b.next_id == d.next_id);
  REQUIRE(b.investigations.size() == 2);
  for (size_t k = 0; k < d.investigations.size(); ++k) {
    const StackInvestigation& want = d.investigations[k];
    const StackInvestigation& i = b.investigations[k];
    INFO("investigation " << want.id);
    CHECK(i.id == want.id);
    CHECK(i.kind == want.kind);
    CHECK(i.state == want.state);
    CHECK(i.incident_id == want.incident_id);
    CHECK(i.rounds_planned == want.rounds_planned);
    CHECK(i.next_round_at == want.next_round_at);
    REQUIRE(i.rounds.size() == want.rounds.size());
    for (size_t r = 0; r < want.rounds.size(); ++r) {
      CHECK(i.rounds[r].groups == want.rounds[r].groups);
      CHECK(i.rounds[r].suspect_ranks == want.rounds[r].suspect_ranks);
      CHECK(i.rounds[r].unanswered_slots == want.rounds[r].unanswered_slots);
      CHECK(i.rounds[r].flagged_kind == want.rounds[r].flagged_kind);
      CHECK(i.rounds[r].flagged_index == want.rounds[r].flagged_index);
    }
    CHECK(i.slots == want.slots);
    CHECK(i.machines == want.machines);
  }
  // Not vacuous: the sample holds values other than the defaults.
  CHECK(b.investigations[1].kind == InvestigationKind::kMfuDrop);
  CHECK(b.investigations[1].rounds[0].flagged_kind == "tp");
  CHECK(b.investigations[1].rounds_planned == 5);
  CHECK(b.investigations[0].slots == std::vector<int>{0, 2});

  // A status written before stack diagnosis existed loads with the defaults.
  auto old = JobStatusFromJson(R"({"phase": "Running"})");
  REQUIRE(old.ok());
  CHECK(old->stack_diagnosis.next_id == 1);
  CHECK(old->stack_diagnosis.investigations.empty());
}

}  // namespace
}  // namespace peregrine
