// The demo as a test: a 4-machine x 2-GPU job (TP=2 PP=2 DP=2) with one warm
// standby; a machine is killed mid-training; the controller evicts it, activates the
// standby in its slot, restarts the others in place from the newest complete in-memory
// checkpoint (the standby fetching the lost machine's shards from their backup holder),
// and training finishes.
#include <sstream>

#include "cli/peregrinectl.h"
#include "tests/e2e/e2e_util.h"

namespace peregrine::e2e {
namespace {

TEST_CASE("A killed machine is replaced by the warm standby and training finishes", "[e2e]") {
  TempDir dir;
  ModeGuard mode = StartMode(ShortDemoJob(80), Options(dir.path()));

  // The kill comes once a checkpoint is complete (stored and backed up by every machine),
  // so the restart resumes from it rather than from step 0.
  const JobStatus before = WaitRunning(*mode, 20, [](const JobStatus& s) {
    return s.standby_ready >= 1 && s.checkpoint.last_complete_step >= 10;
  });
  const uint64_t complete_before = before.checkpoint.last_complete_step;
  REQUIRE(before.slots.size() == 4);
  REQUIRE(before.standbys.size() == 1);
  const std::string victim_machine = before.slots[2].machine_id;
  const std::string standby_pod = before.standbys[0].pod;
  std::map<std::string, pid_t> agent_pids;
  for (const SlotStatus& s : before.slots) agent_pids[s.pod] = mode->cluster().AgentPid(s.pod);

  // peregrinectl shows the job and injects the fault through the controller's HTTP API.
  std::ostringstream out, err;
  REQUIRE(RunPeregrinectl({"--state-dir", dir.path(), "status", "default/demo"}, out, err) == 0);
  CHECK_THAT(out.str(), Catch::Contains("phase Running"));
  CHECK_THAT(out.str(), Catch::Contains("demo-m2"));
  out.str("");
  REQUIRE(RunPeregrinectl({"--state-dir", dir.path(), "inject", "kill", "default/demo", "--slot", "2"}, out, err) == 0);
  CHECK_THAT(out.str(), Catch::Contains("killed machine " + victim_machine));

  const JobStatus st = WaitFinished(*mode);
  INFO(TimelineText(*mode, st));
  CHECK(st.phase == JobPhase::kSucceeded);
  CHECK(st.last_completed_step == 80);
  REQUIRE(st.incidents.size() == 1);
  const Incident& inc = st.incidents[0];
  CHECK(inc.kind == IncidentKind::kMachineLost);
  CHECK(inc.machines == std::vector<std::string>{victim_machine});
  CHECK(inc.resumed_at > inc.decided_at);
  // Resumed from a complete checkpoint (every 10 steps), at least the one seen before the
  // kill; the steps redone are counted.
  CHECK(inc.resume_step >= complete_before);
  CHECK(inc.resume_step % 10 == 0);
  CHECK(inc.resume_step <= inc.step_at_failure);
  CHECK(inc.steps_redone == inc.step_at_failure - inc.resume_step);
  CHECK(inc.training_time_lost_seconds > 0);
  REQUIRE(st.evicted.size() == 1);
  CHECK(st.evicted[0].machine_id == victim_machine);
  CHECK(st.attempt == 2);
  // The standby took slot 2; the other machines restarted in place (same agent process).
  CHECK(st.slots[2].pod == standby_pod);
  for (int slot : {0, 1, 3}) {
    CHECK(st.slots[slot].pod == before.slots[slot].pod);
    CHECK(mode->cluster().AgentPid(st.slots[slot].pod) == agent_pids[before.slots[slot].pod]);
  }
  // Timeline: fault, detection, decision, recovery.
  const std::string timeline = TimelineEvents(*mode);
  CHECK_THAT(timeline, Catch::Contains("Fault injected: killed machine"));
  // Detection names what was seen first (the dead pod, or its peers' NCCL errors a round
  // earlier); the triage window then classifies the incident (inc.kind above).
  CHECK_THAT(timeline, Catch::Contains("incident 1 detected"));
  CHECK_THAT(timeline, Catch::Contains("Evicted: evict machine " + victim_machine));
  CHECK_THAT(timeline, Catch::Contains("StandbyActivated"));
  CHECK_THAT(timeline, Catch::Contains("Recovered"));
  CHECK_THAT(timeline, Catch::Contains("CheckpointRestored: pod " + standby_pod));

  // Teardown leaves nothing running.
  std::vector<pid_t> pods;
  for (const SlotStatus& s : st.slots) pods.push_back(mode->cluster().AgentPid(s.pod));
  mode.mode->Shutdown(true);
  for (pid_t pid : pods) CHECK(ProcessesInSession(pid).empty());
}

TEST_CASE("A controller restart neither kills nor restarts running training", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(120);
  std::map<std::string, pid_t> agent_pids;
  {
    ModeGuard mode = StartMode(job, Options(dir.path()));
    REQUIRE(WaitForStatus(*mode, [](const JobStatus& s) { return s.last_completed_step >= 10; }));
    for (const SlotStatus& s : mode->controller().Snapshot().slots) agent_pids[s.pod] = mode->cluster().AgentPid(s.pod);
    mode.teardown = false;  // the controller goes away; training must not
  }
  for (const auto& [pod, pid] : agent_pids) CHECK(ProcessAlive(pid));

  ModeGuard mode = StartMode(job, Options(dir.path()));
  const JobStatus st = WaitFinished(*mode);
  INFO(TimelineText(*mode, st));
  CHECK(st.phase == JobPhase::kSucceeded);
  CHECK(st.last_completed_step == 120);
  CHECK(st.attempt == 1);  // nothing was restarted
  CHECK(st.incidents.empty());
  for (const SlotStatus& s : st.slots) CHECK(mode->cluster().AgentPid(s.pod) == agent_pids[s.pod]);
}

}  // namespace
}  // namespace peregrine::e2e
