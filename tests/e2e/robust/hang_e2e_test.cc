// Hang on one pipeline stage, end to end (ByteRobust section 5.1; docs/hang.md): the
// demo scenario hang-pp-stage makes both ranks of one machine of the last pipeline stage
// block in their compute (sim/fault); their stage-0 peers then wait in the pipeline
// receive and the other pipeline in the DP all-reduce. The controller sees no step for
// hangTimeoutSeconds while every process is alive, the agents capture the real stacks of
// every sim-trainer process (eu-stack or gdb), the controller groups them and over-evicts
// the pipeline group holding the outliers. The test asserts exactly that group's machines
// were evicted, nothing else, and that the job completes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "tests/e2e/e2e_util.h"

namespace peregrine::e2e {
namespace {

bool HaveStackTool() {
  return std::filesystem::exists("/usr/bin/eu-stack") || std::filesystem::exists("/usr/bin/gdb");
}

TEST_CASE("A hang on one pipeline stage over-evicts that pipeline group and the job completes", "[e2e]") {
  if (!HaveStackTool()) {
    WARN("neither eu-stack nor gdb is installed: stacks cannot be captured here");
    return;
  }
  TempDir dir;
  TrainingJob job = ShortDemoJob(150);
  job.spec.fault_tolerance.hang_timeout_seconds = 5;
  ModeGuard mode = StartMode(job, Options(dir.path()));
  const JobStatus before = WaitRunning(*mode, 20, [](const JobStatus& s) { return s.standby_ready >= 1; });
  auto scenario = ScenarioByName("hang-pp-stage", job);
  REQUIRE(scenario.ok());
  REQUIRE(scenario->steps.size() == 1);
  REQUIRE(scenario->steps[0].faults.size() == 1);
  REQUIRE(scenario->steps[0].faults[0].slot == 2);
  auto injected = mode->Inject(scenario->steps[0].faults[0]);
  REQUIRE(injected.ok());

  // Pipeline group pp 0 = ranks {0, 4}: machine slots 0 and 2 (TP=2 PP=2 DP=2, 2 GPUs each).
  const std::set<std::string> group = {before.slots[0].machine_id, before.slots[2].machine_id};
  const JobStatus st = WaitFinished(*mode);
  INFO(TimelineText(*mode, st));
  CHECK(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  const Incident& inc = st.incidents[0];
  CHECK(inc.kind == IncidentKind::kHang);
  CHECK_THAT(inc.signal, Catch::Contains("completed no step"));
  CHECK(std::set<std::string>(inc.machines.begin(), inc.machines.end()) == group);
  CHECK(inc.machines.size() == 2);
  CHECK_THAT(inc.decision, Catch::Contains("pp 0 over-evicted"));
  CheckOnlyEvicted(before, st, {0, 2});

  REQUIRE(!st.stack_diagnosis.investigations.empty());
  const StackInvestigation& inv = st.stack_diagnosis.investigations.back();
  CHECK(inv.kind == InvestigationKind::kHang);
  CHECK(inv.state == InvestigationState::kEvicted);
  CHECK(inv.incident_id == inc.id);
  CHECK(inv.chosen_group == "pp 0");
  REQUIRE(inv.rounds.size() == 1);
  CHECK(inv.rounds[0].unanswered_slots.empty());       // every agent captured real stacks
  // The hung stage's ranks 0 and 4 are suspects; their TP peers 1 and 5 usually are too
  // (blocked in their TP collectives with them), but a capture on a loaded host can find a
  // peer in the same wait as the healthy ranks (seen in CI: rank 5 in ppoll): the verdict,
  // pp 0, is the same either way.
  const std::vector<int>& suspects = inv.rounds[0].suspect_ranks;
  CHECK(std::find(suspects.begin(), suspects.end(), 0) != suspects.end());
  CHECK(std::find(suspects.begin(), suspects.end(), 4) != suspects.end());
  for (int r : suspects) CHECK((r == 0 || r == 1 || r == 4 || r == 5));
  REQUIRE(!inv.rounds[0].groups.empty());
  CHECK_THAT(inv.rounds[0].groups[0], Catch::StartsWith("ranks 2,3,"));
  CHECK_THAT(inv.rounds[0].groups[0], Catch::Contains("6,7 (healthy)"));
}

}  // namespace
}  // namespace peregrine::e2e
