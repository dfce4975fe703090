#include "controller/status_json.h"

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

TEST_CASE("JobStatus survives a JSON round trip (what a restarted controller resumes from)", "[unit]") {
  JobStatus s;
  s.phase = JobPhase::kRecovering;
  s.attempt = 3;
  s.resume_step = 120;
  s.attempt_started_at = 1'795'000'000'123'456'000;
  s.master_addr = "demo-m0.demo.default.svc";
  s.master_port = 29500;
  s.code.command = {"python", "train.py"};
  s.code.revision = "r2";
  s.code.env = {{"A", "1"}};
  VersionRecord v;
  v.code = s.code;
  v.applied_at = 1'795'000'000'000'000'000;
  v.reason = "urgent hot update";
  v.outcome = VersionOutcome::kHealthy;
  v.applied_at_step = 100;
  s.version_history = {v};
  s.pending_code = CodeVersionSpec{"img:3", {"python", "train.py", "--fast"}, "r3", {}};
  s.pending_code_since = 1'795'000'001'000'000'000;
  s.network_alarms = {NetworkAlarmRecord{"7", 1'795'000'002'000'000'000, "sim0 carrier flapped"}};
  s.slots = {SlotStatus{0, "demo-m0", "0", true}, SlotStatus{1, "demo-s3", "5", true}};
  s.standbys = {StandbyStatus{"demo-s4", "6", false}};
  s.standby_desired = 1;
  s.last_completed_step = 120;
  s.triage_deadline = 1'795'000'003'000'000'000;
  Incident inc;
  inc.id = 4;
  inc.kind = IncidentKind::kMachineLost;
  inc.detected_at = 1'795'000'002'500'000'000;
  inc.machines = {"2"};
  inc.actions = {"evict machine 2"};
  inc.step_at_failure = 125;
  s.incidents = {inc};
  s.evicted = {Eviction{"2", "demo-m1", "pod disappeared", 1'795'000'002'600'000'000}};
  s.next_incident_id = 5;
  s.next_pod_serial = 5;

  auto back = JobStatusFromJson(JobStatusToJson(s));
  REQUIRE(back.ok());
  CHECK(back->phase == JobPhase::kRecovering);
  CHECK(back->attempt == 3);
  CHECK(back->resume_step == 120);
  CHECK(back->attempt_started_at == s.attempt_started_at);  // microsecond precision kept
  CHECK(back->master_port == 29500);
  CHECK(back->code == s.code);
  REQUIRE(back->version_history.size() == 1);
  CHECK(back->version_history[0].applied_at_step == 100);
  CHECK(back->version_history[0].outcome == VersionOutcome::kHealthy);
  REQUIRE(back->pending_code.has_value());
  CHECK(*back->pending_code == *s.pending_code);
  CHECK(back->pending_code_since == s.pending_code_since);
  REQUIRE(back->network_alarms.size() == 1);
  CHECK(back->network_alarms[0].machine_id == "7");
  CHECK(back->network_alarms[0].at == s.network_alarms[0].at);
  CHECK(back->slots.size() == 2);
  CHECK(back->slots[1].pod == "demo-s3");
  CHECK(back->standbys.size() == 1);
  CHECK(back->triage_deadline == s.triage_deadline);
  REQUIRE(back->incidents.size() == 1);
  CHECK(back->incidents[0].step_at_failure == 125);
  CHECK(back->incidents[0].decided_at == 0);
  CHECK(back->evicted.size() == 1);
  CHECK(back->next_pod_serial == 5);
  // A second round trip is byte-identical.
  CHECK(JobStatusToJson(*back) == JobStatusToJson(s));
}

TEST_CASE("JobStatusFromJson names what is wrong", "[unit]") {
  CHECK(JobStatusFromJson("not json").status().code() == absl::StatusCode::kInvalidArgument);
  auto bad_phase = JobStatusFromJson(R"({"phase":"Exploding"})");
  CHECK_THAT(std::string(bad_phase.status().message()), Catch::Contains("phase"));
  auto bad_time = JobStatusFromJson(R"({"phase":"Running","startedAt":"yesterday"})");
  CHECK_THAT(std::string(bad_time.status().message()), Catch::Contains("startedAt"));
}

TEST_CASE("JobStatusFromJson refuses an integer field that is out of range or not whole (fuzz finding)", "[unit]") {
  struct Case {
    std::string body, field;
  };
  for (const Case& c : {Case{R"({"phase":"Running","recoveries":1e300})", "recoveries"},
                        Case{R"({"phase":"Running","recoveries":2147483648})", "recoveries"},
                        Case{R"({"phase":"Running","attempt":-1})", "attempt"},
                        Case{R"({"phase":"Running","lastCompletedStep":1.5})", "lastCompletedStep"},
                        Case{R"({"phase":"Running","masterPort":4294967296})", "masterPort"},
                        Case{R"({"phase":"Running","machines":[{"index":1e10,"pod":"p"}]})", "index"},
                        Case{R"({"phase":"Running","incidents":[{"id":-3e40,"kind":"Hang"}]})", "id"}}) {
    INFO(c.body);
    auto r = JobStatusFromJson(c.body);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(c.field + ": expected an integer"));
  }
  // Whole numbers written as doubles still read.
  auto whole = JobStatusFromJson(R"({"phase":"Running","recoveries":3.0,"attempt":2e3})");
  REQUIRE(whole.ok());
  CHECK(whole->recoveries == 3);
  CHECK(whole->attempt == 2000);
}

}  // namespace
}  // namespace peregrine
