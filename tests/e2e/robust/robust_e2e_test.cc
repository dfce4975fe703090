// Automated fault tolerance end to end (ByteRobust sections 4-6): faults injected into the
// stand-in machines' kernel logs and sysfs trees reach the controller through the agents'
// inspections, and scenarios run by name through the demo's driver (RunScenario, controller/local/scenario.h);
// each test asserts which machine was acted on, that no healthy machine was evicted, and
// that the job completes.
#include <catch2/catch.hpp>
#include <set>

#include "tests/e2e/e2e_util.h"

namespace peregrine::e2e {
namespace {

std::set<std::string> EvictedMachines(const JobStatus& s) {
  std::set<std::string> out;
  for (const Eviction& e : s.evicted) {
    if (e.reason.rfind("standby failed", 0) != 0) out.insert(e.machine_id);
  }
  return out;
}

bool Finished(const JobStatus& s) { return s.phase == JobPhase::kSucceeded || s.phase == JobPhase::kFailed; }

TEST_CASE("A fatal Xid on one machine evicts exactly that machine and the job completes", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(120);
  auto started = LocalMode::Start(job, Options(dir.path()));
  REQUIRE(started.ok());
  ModeGuard mode{std::move(*started)};
  REQUIRE(WaitForStatus(*mode.mode, [](const JobStatus& s) {
    return s.phase == JobPhase::kRunning && s.last_completed_step >= 20 && s.standby_ready >= 1;
  }));
  const JobStatus before = mode->controller().Snapshot();
  const std::string victim = before.slots[1].machine_id;

  FaultRequest xid;
  xid.kind = "xid";
  xid.slot = 1;
  xid.local_rank = 1;
  xid.xid = 79;
  auto injected = mode->Inject(xid);
  REQUIRE(injected.ok());
  CHECK_THAT(*injected, Catch::Contains("NVRM: Xid (PCI:0000:2b:00): 79"));

  REQUIRE(WaitForStatus(*mode.mode, Finished));
  const JobStatus st = mode->controller().Snapshot();
  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  CHECK(st.incidents[0].kind == "MachineFault");
  CHECK_THAT(st.incidents[0].signal, Catch::Contains("Xid 79"));
  CHECK(st.incidents[0].machines == std::vector<std::string>{victim});
  CHECK(EvictedMachines(st) == std::set<std::string>{victim});
  for (int i : {0, 2, 3}) CHECK(st.slots[i].machine_id == before.slots[i].machine_id);
  CHECK(st.slots[1].machine_id != victim);
}

ScenarioRunOptions RunOptions() {
  ScenarioRunOptions o;
  o.timeout_ms = 300'000;  // generous: only a broken run gets there
  return o;
}

// The nic-flap-twice scenario through the demo's driver: one flap is tolerated; once the
// controller's observation shows that episode over, a second flap of the same NIC (a
// separate episode, within networkAlarmWindowSeconds) evicts the machine.
TEST_CASE("Scenario nic-flap-twice: one flap is tolerated, a second within the window evicts the machine", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(600);  // still running when the second flap comes
  auto started = LocalMode::Start(job, Options(dir.path()));
  REQUIRE(started.ok());
  ModeGuard mode{std::move(*started)};
  auto scenario = ScenarioByName("nic-flap-twice", job);
  REQUIRE(scenario.ok());
  scenario->at_step = 10;
  REQUIRE(scenario->steps.size() == 2);

  auto run = RunScenario(*mode, *scenario, RunOptions());
  REQUIRE(run.ok());
  const JobStatus& st = run->status;
  INFO(FormatTimeline(mode->controller().Timeline(), st, st.started_at));
  REQUIRE(run->finished);
  REQUIRE(run->steps.size() == 2);
  const JobStatus& before = run->steps[0].before;
  const std::string victim = before.slots[2].machine_id;
  CHECK_THAT(run->steps[0].description, Catch::Contains(victim));
  // Between the flaps: the first was recorded against the victim and tolerated.
  const JobStatus& tolerated = run->steps[1].before;
  REQUIRE(tolerated.network_alarms.size() == 1);
  CHECK(tolerated.network_alarms[0].machine_id == victim);
  CHECK(tolerated.incidents.empty());
  CHECK(EvictedMachines(tolerated).empty());
  CHECK(tolerated.phase == JobPhase::kRunning);
  CHECK(tolerated.slots[2].machine_id == victim);

  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  CHECK(st.incidents[0].kind == "NetworkAlarms");
  CHECK(st.incidents[0].machines == std::vector<std::string>{victim});
  CHECK(EvictedMachines(st) == std::set<std::string>{victim});
  for (int i : {0, 1, 3}) CHECK(st.slots[i].machine_id == before.slots[i].machine_id);
  CHECK(st.slots[2].machine_id != victim);
  CHECK(st.last_completed_step >= 600);
}

// The code-update-rollback scenario through the demo's driver: an urgent update to a
// broken revision (every rank exits at start-up); the diagnosis finds no machine, the
// reattempt fails again before passing the failure step, the update is rolled back to
// the last healthy version, training resumes from where it was and completes. No
// machine is acted on.
TEST_CASE("Scenario code-update-rollback: the broken update is rolled back, progress kept, the job completes",
          "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(120);
  auto started = LocalMode::Start(job, Options(dir.path()));
  REQUIRE(started.ok());
  ModeGuard mode{std::move(*started)};
  auto scenario = ScenarioByName("code-update-rollback", job);
  REQUIRE(scenario.ok());
  scenario->at_step = 20;

  auto run = RunScenario(*mode, *scenario, RunOptions());
  REQUIRE(run.ok());
  const JobStatus& st = run->status;
  INFO(FormatTimeline(mode->controller().Timeline(), st, st.started_at));
  REQUIRE(run->finished);
  REQUIRE(run->steps.size() == 1);
  const JobStatus& before = run->steps[0].before;
  CHECK_THAT(run->steps[0].description, Catch::Contains("urgent code update to revision v1-broken"));
  REQUIRE_FALSE(before.version_history.empty());
  CHECK(before.version_history.back().outcome == VersionOutcome::kHealthy);

  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 2);
  CHECK(st.incidents[0].kind == "ProcessCrash");
  CHECK_THAT(st.incidents[0].decision, Catch::Contains("reattempt"));
  CHECK_THAT(st.incidents[1].decision, Catch::Contains("roll back"));
  for (const Incident& inc : st.incidents) {
    CHECK(inc.machines.empty());
    CHECK(inc.resume_step >= before.last_completed_step);  // progress kept through both restarts
  }
  // The rollback restored the version that ran healthy, and the broken one is marked.
  CHECK(st.code.revision == job.spec.code.revision);
  CHECK(st.code.command == job.spec.code.command);
  bool rolled_back = false;
  for (const VersionRecord& v : st.version_history) {
    rolled_back = rolled_back || (v.code.revision == "v1-broken" && v.outcome == VersionOutcome::kRolledBack);
  }
  CHECK(rolled_back);
  CHECK(st.version_history.back().code.revision == job.spec.code.revision);
  CHECK(EvictedMachines(st).empty());
  for (int i = 0; i < 4; ++i) CHECK(st.slots[i].machine_id == before.slots[i].machine_id);
  CHECK(st.last_completed_step >= 120);
}

}  // namespace
}  // namespace peregrine::e2e
