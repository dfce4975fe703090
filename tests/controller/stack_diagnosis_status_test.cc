// status.stackDiagnosis survives the JSON round trip a restarted controller resumes from
// (controller/status_json.h): the progress watch, the MFU baseline and every
// investigation with its rounds, so nothing is captured or evicted twice.
#include <catch2/catch.hpp>

#include "controller/core/job_state.h"
#include "controller/status_json.h"

namespace peregrine {
namespace {

constexpr int64_t kT0 = 1'735'787'045'123'456'000;
constexpr int64_t kSecond = 1'000'000'000;

TEST_CASE("status.stackDiagnosis survives a JSON round trip", "[unit]") {
  JobStatus s;
  s.phase = JobPhase::kRecovering;
  StackDiagnosisStatus& d = s.stack_diagnosis;
  d.progress_attempt = 4;
  d.progress_step = 77;
  d.progress_at = kT0;
  d.healthy_iteration_seconds = 0.25;
  d.degraded_since = kT0 + kSecond;
  d.next_id = 9;
  StackInvestigation inv;
  inv.id = 8;
  inv.kind = InvestigationKind::kMfuDrop;
  inv.state = InvestigationState::kDecided;
  inv.attempt = 4;
  inv.incident_id = 12;
  inv.signal = "iteration time 0.600 s is 2.4 x the healthy 0.250 s";
  inv.started_at = kT0 + 2 * kSecond;
  inv.ended_at = 0;
  inv.rounds_planned = 5;
  inv.next_round_at = kT0 + 12 * kSecond;
  StackRound r;
  r.started_at = kT0 + 2 * kSecond;
  r.finished_at = kT0 + 3 * kSecond;
  r.groups = {"ranks 0,1,4,5,6,7 (healthy): poll", "ranks 2,3: sgemm"};
  r.suspect_ranks = {2, 3};
  r.unanswered_slots = {1};
  r.flagged_kind = "tp";
  r.flagged_index = 1;
  r.explanation = "tp 1";
  inv.rounds = {r, r};
  inv.chosen_group = "tp 1";
  inv.slots = {1};
  inv.machines = {"node-b"};
  inv.explanation = "tp 1 flagged in 5 of 5 rounds";
  d.investigations.push_back(inv);

  const std::string json = JobStatusToJson(s);
  auto back = JobStatusFromJson(json);
  REQUIRE(back.ok());
  CHECK(JobStatusToJson(*back) == json);
  const StackDiagnosisStatus& b = back->stack_diagnosis;
  CHECK(b.progress_attempt == 4);
  CHECK(b.progress_step == 77);
  CHECK(b.progress_at == kT0);
  CHECK(b.healthy_iteration_seconds == 0.25);
  CHECK(b.degraded_since == kT0 + kSecond);
  CHECK(b.next_id == 9);
  REQUIRE(b.investigations.size() == 1);
  const StackInvestigation& i = b.investigations[0];
  CHECK(i.id == 8);
  CHECK(i.kind == InvestigationKind::kMfuDrop);
  CHECK(i.state == InvestigationState::kDecided);
  CHECK(i.incident_id == 12);
  CHECK(i.rounds_planned == 5);
  CHECK(i.next_round_at == kT0 + 12 * kSecond);
  REQUIRE(i.rounds.size() == 2);
  CHECK(i.rounds[1].groups == r.groups);
  CHECK(i.rounds[1].suspect_ranks == std::vector<int>{2, 3});
  CHECK(i.rounds[1].unanswered_slots == std::vector<int>{1});
  CHECK(i.rounds[1].flagged_kind == "tp");
  CHECK(i.rounds[1].flagged_index == 1);
  CHECK(i.slots == std::vector<int>{1});
  CHECK(i.machines == std::vector<std::string>{"node-b"});

  // A status written before stack diagnosis existed loads with the defaults.
  auto old = JobStatusFromJson(R"({"phase": "Running"})");
  REQUIRE(old.ok());
  CHECK(old->stack_diagnosis.next_id == 1);
  CHECK(old->stack_diagnosis.investigations.empty());
}

}  // namespace
}  // namespace peregrine
