// Stop-time diagnosis end to end (ByteRobust's ladder for failures without a culprit): real
// agents and sim-trainer processes in local mode, faults injected through the stand-in
// cluster's fault table. Each test asserts which machine was acted on (none for a one-off
// crash), that no healthy machine was evicted, and that the job completes.
#include <catch2/catch.hpp>
#include <set>

#include "tests/e2e/e2e_util.h"

namespace peregrine::e2e {
namespace {

bool Finished(const JobStatus& s) { return s.phase == JobPhase::kSucceeded || s.phase == JobPhase::kFailed; }

std::set<std::string> EvictedMachines(const JobStatus& s) {
  std::set<std::string> out;
  for (const Eviction& e : s.evicted) {
    if (e.reason.rfind("standby failed", 0) != 0) out.insert(e.machine_id);
  }
  return out;
}

// A crash with no culprit: training stops on every machine, the diagnosis runs stage by
// stage (an agent without a diagnostic kind answers UNIMPLEMENTED, recorded as
// unavailable), every stage passes, the job is reattempted in place and completes.
TEST_CASE("A one-off crash with no culprit is diagnosed, nothing is evicted, a reattempt fixes it", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(120);
  auto started = LocalMode::Start(job, Options(dir.path()));
  REQUIRE(started.ok());
  ModeGuard mode{std::move(*started)};
  REQUIRE(WaitForStatus(*mode.mode, [](const JobStatus& s) {
    return s.phase == JobPhase::kRunning && s.last_completed_step >= 20;
  }));
  const JobStatus before = mode->controller().Snapshot();
  FaultRequest crash;
  crash.kind = "crash";
  crash.slot = 1;
  crash.local_rank = 0;
  REQUIRE(mode->Inject(crash).ok());
  // One-off: the fault is cleared once the incident is open (the restart comes after the
  // triage window and the whole diagnosis).
  REQUIRE(WaitForStatus(*mode.mode, [](const JobStatus& s) { return !s.incidents.empty(); }));
  FaultRequest clear;
  clear.kind = "clear";
  clear.slot = 1;
  REQUIRE(mode->Inject(clear).ok());

  REQUIRE(WaitForStatus(*mode.mode, Finished));
  const JobStatus st = mode->controller().Snapshot();
  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  const Incident& inc = st.incidents[0];
  CHECK(inc.kind == "ProcessCrash");
  CHECK_THAT(inc.signal, Catch::Contains("rank 2"));
  std::vector<std::string> stages;
  for (const DiagnosisStageRecord& r : inc.diagnosis) {
    stages.push_back(r.stage);
    CHECK(r.verdict != "failed");
    CHECK(r.finished_at >= r.started_at);
  }
  CHECK(stages == std::vector<std::string>{"stop", "eud", "all_to_all", "all_gather"});
  CHECK_THAT(inc.decision, Catch::Contains("reattempt"));
  CHECK(inc.machines.empty());
  CHECK(EvictedMachines(st).empty());
  for (int i = 0; i < 4; ++i) CHECK(st.slots[i].machine_id == before.slots[i].machine_id);
  CHECK(st.attempt == 2);
  CHECK(st.last_completed_step >= 120);
}

// A crash after an urgent code update (JobController::UpdateJob): the diagnosis passes, a
// reattempt fails again before passing the failure step, the update is rolled back and
// training continues on the old version to completion.
TEST_CASE("A crash after a code update: diagnosis, reattempt, then rollback restores progress", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(120);
  auto started = LocalMode::Start(job, Options(dir.path()));
  REQUIRE(started.ok());
  ModeGuard mode{std::move(*started)};
  REQUIRE(WaitForStatus(*mode.mode, [](const JobStatus& s) {
    return s.phase == JobPhase::kRunning && s.last_completed_step >= 20 && !s.version_history.empty() &&
           s.version_history.back().outcome == "Healthy";
  }));
  const JobStatus before = mode->controller().Snapshot();
  TrainingJob broken = job;
  broken.spec.code.command.push_back("--no-such-flag");  // every rank exits at start-up
  broken.spec.code.revision = "v2-broken";
  broken.metadata.annotations["peregrine.dev/hot-update"] = "urgent";
  REQUIRE(mode->controller().UpdateJob(broken).ok());

  REQUIRE(WaitForStatus(*mode.mode, Finished));
  const JobStatus st = mode->controller().Snapshot();
  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 2);
  CHECK(st.incidents[0].kind == "ProcessCrash");
  CHECK_THAT(st.incidents[0].decision, Catch::Contains("reattempt"));
  CHECK_THAT(st.incidents[1].decision, Catch::Contains("roll back"));
  for (const Incident& inc : st.incidents) {
    REQUIRE_FALSE(inc.diagnosis.empty());
    CHECK(inc.diagnosis.front().stage == "stop");
    CHECK(inc.machines.empty());
  }
  CHECK(st.code.command == job.spec.code.command);
  CHECK(st.code.revision == job.spec.code.revision);
  bool rolled_back = false;
  for (const VersionRecord& v : st.version_history) {
    rolled_back = rolled_back || (v.code.revision == "v2-broken" && v.outcome == "RolledBack");
  }
  CHECK(rolled_back);
  CHECK(EvictedMachines(st).empty());
  for (int i = 0; i < 4; ++i) CHECK(st.slots[i].machine_id == before.slots[i].machine_id);
  CHECK(st.last_completed_step >= 120);
}

}  // namespace
}  // namespace peregrine::e2e
