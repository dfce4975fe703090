// Automated fault tolerance end to end (ByteRobust sections 4-6): faults injected into the
// stand-in machines' kernel logs and sysfs trees reach the controller through the agents'
// inspections, and scenarios run by name through the demo's driver (RunScenario, controller/local/scenario.h);
// each test asserts which machine was acted on, that no healthy machine was evicted, and
// that the job completes.
#include <catch2/catch.hpp>

#include "tests/e2e/e2e_util.h"

namespace peregrine::e2e {
namespace {

TEST_CASE("A fatal Xid on one machine evicts exactly that machine and the job completes", "[e2e]") {
  TempDir dir;
  ModeGuard mode = StartMode(ShortDemoJob(120), Options(dir.path()));
  const JobStatus before = WaitRunning(*mode, 20, [](const JobStatus& s) { return s.standby_ready >= 1; });
  const std::string victim = before.slots[1].machine_id;

  FaultRequest xid = Fault("xid", 1, 1);
  xid.xid = 79;
  auto injected = mode->Inject(xid);
  REQUIRE(injected.ok());
  CHECK_THAT(*injected, Catch::Contains("NVRM: Xid (PCI:0000:2b:00): 79"));

  const JobStatus st = WaitFinished(*mode);
  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  CHECK(st.incidents[0].kind == IncidentKind::kMachineFault);
  CHECK_THAT(st.incidents[0].signal, Catch::Contains("Xid 79"));
  CHECK(st.incidents[0].machines == std::vector<std::string>{victim});
  CheckOnlyEvicted(before, st, {1});
}

// The demo driver's scenario `name` for `job`, its first step at step `at_step`.
Scenario DemoScenario(const std::string& name, const TrainingJob& job, uint64_t at_step) {
  auto scenario = ScenarioByName(name, job);
  REQUIRE(scenario.ok());
  scenario->at_step = at_step;
  return *scenario;
}

// Runs `scenario` on `mode` until the job finishes (the timeline is shown when it does not).
ScenarioRun RunToEnd(LocalMode& mode, const Scenario& scenario) {
  ScenarioRunOptions options;
  options.timeout_ms = 300'000;  // generous: only a broken run gets there
  auto run = RunScenario(mode, scenario, options);
  REQUIRE(run.ok());
  INFO(TimelineText(mode, run->status));
  REQUIRE(run->finished);
  return *std::move(run);
}

// The nic-flap-twice scenario through the demo's driver: one flap is tolerated; once the
// controller's observation shows that episode over, a second flap of the same NIC (a
// separate episode, within networkAlarmWindowSeconds) evicts the machine.
TEST_CASE("Scenario nic-flap-twice: one flap is tolerated, a second within the window evicts the machine", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(600);  // still running when the second flap comes
  ModeGuard mode = StartMode(job, Options(dir.path()));
  const Scenario scenario = DemoScenario("nic-flap-twice", job, 10);
  REQUIRE(scenario.steps.size() == 2);

  const ScenarioRun run = RunToEnd(*mode, scenario);
  const JobStatus& st = run.status;
  INFO(TimelineText(*mode, st));
  REQUIRE(run.steps.size() == 2);
  const JobStatus& before = run.steps[0].before;
  const std::string victim = before.slots[2].machine_id;
  CHECK_THAT(run.steps[0].description, Catch::Contains(victim));
  // Between the flaps: the first was recorded against the victim and tolerated.
  const JobStatus& tolerated = run.steps[1].before;
  REQUIRE(tolerated.network_alarms.size() == 1);
  CHECK(tolerated.network_alarms[0].machine_id == victim);
  CHECK(tolerated.incidents.empty());
  CHECK(EvictedMachines(tolerated).empty());
  CHECK(tolerated.phase == JobPhase::kRunning);
  CHECK(tolerated.slots[2].machine_id == victim);

  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  CHECK(st.incidents[0].kind == IncidentKind::kNetworkAlarms);
  CHECK(st.incidents[0].machines == std::vector<std::string>{victim});
  CheckOnlyEvicted(before, st, {2});
  CHECK(st.last_completed_step >= 600);
}

// The code-update-rollback scenario through the demo's driver: an urgent update to a
// broken revision (every rank exits at start-up); the diagnosis finds no machine, the
// reattempt fails again before passing the failure step, the update is rolled back to
// the last healthy version, training resumes from its newest complete checkpoint and
// completes. No machine is acted on.
TEST_CASE("Scenario code-update-rollback: the broken update is rolled back, progress kept, the job completes",
          "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(120);
  ModeGuard mode = StartMode(job, Options(dir.path()));

  const ScenarioRun run = RunToEnd(*mode, DemoScenario("code-update-rollback", job, 20));
  const JobStatus& st = run.status;
  INFO(TimelineText(*mode, st));
  REQUIRE(run.steps.size() == 1);
  const JobStatus& before = run.steps[0].before;
  CHECK_THAT(run.steps[0].description, Catch::Contains("urgent code update to revision v1-broken"));
  REQUIRE_FALSE(before.version_history.empty());
  CHECK(before.version_history.back().outcome == VersionOutcome::kHealthy);

  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 2);
  for (const Incident& inc : st.incidents) {
    // Every rank of the broken version fails at start-up the same way: user code.
    CHECK(inc.kind == IncidentKind::kUserCodeError);
    CHECK(inc.machines.empty());
    // Progress kept through both restarts: from the newest complete checkpoint (every 10
    // steps) known before the update, never from scratch.
    CHECK(inc.resume_step >= before.checkpoint.last_complete_step);
    CHECK(inc.resume_step > 0);
    CHECK(inc.resume_step % 10 == 0);
  }
  // The rollback restored the version that ran healthy, and the broken one is marked.
  CheckRolledBack(st, job, "v1-broken");
  CHECK(st.version_history.back().code.revision == job.spec.code.revision);
  CheckOnlyEvicted(before, st, {});
  CHECK(st.last_completed_step >= 120);
}

}  // namespace
}  // namespace peregrine::e2e
