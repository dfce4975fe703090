// The decision engine with the hang policy (controller/hang_policy.h): a hang opens an
// incident, stacks are captured from every pod, the outliers' pipeline group is evicted
// through the engine's eviction path (standby where ready, new pod otherwise, the others
// restarted in place), and neither a repeated round nor a controller restart (the status
// through JSON) captures or evicts twice.
#include <catch2/catch.hpp>
#include <set>

#include "controller/core/decision_engine.h"
#include "controller/core/hang_policy.h"
#include "controller/job_parser.h"
#include "absl/strings/str_cat.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

// The kit's demo job with one standby and a 20 s hang timeout.
TrainingJob HangJob() {
  TrainingJob job = testing::DemoJob();
  job.spec.standby.max = 1;
  job.spec.fault_tolerance.hang_timeout_seconds = 20;
  return job;
}

// The demo job's manifest with faultTolerance.hangTimeoutSeconds set to `seconds`.
absl::StatusOr<TrainingJob> ParseWithHangTimeout(int seconds) {
  return ParseTrainingJob(
      absl::StrCat(testing::DemoManifest(), "  faultTolerance: {hangTimeoutSeconds: ", seconds, "}\n"));
}

ProcessStack Stack(int pid, const std::vector<std::string>& innermost_first) {
  ProcessStack p;
  p.pid = pid;
  p.tool = "eu-stack";
  ThreadStack t;
  t.thread_id = pid;
  for (const std::string& f : innermost_first) t.frames.push_back(StackFrame{f, "", 0, "", 0});
  p.threads.push_back(t);
  return p;
}

// Innermost frame first, by machine slot: slot 2 (stage 1 of dp 0) hung in its compute,
// slot 0 waits for its gradients, slots 1 and 3 in the DP all-reduce.
const std::map<int, std::vector<std::string>> kHungStageStacks = {
    {0, {"poll", "RecvExact", "ncclRecv", "Backward", "TrainStep", "main"}},
    {1, {"poll", "Exchange", "ncclAllReduce", "DpAllReduce", "TrainStep", "main"}},
    {2, {"nanosleep", "AfterCompute", "Forward", "TrainStep", "main"}},
    {3, {"poll", "Exchange", "ncclAllReduce", "DpAllReduce", "TrainStep", "main"}}};

// The kit's plan-applying world; stack captures stay pending until AnswerCaptures.
struct World : testing::PlanWorld {
  World() : PlanWorld(HangJob(), "m") { port_per_attempt = false; }
  std::vector<CommandToSend> captures;  // every capture command sent

  // Training reaches step 10, then completes no step for the 20 s hang timeout: the hang
  // is detected and a stack capture goes to each of the 4 pods.
  void RunIntoHang() {
    Step();
    Step();
    Progress(10);
    now += kSecond;
    Step();
    now += 20 * kSecond;
    Step();
    REQUIRE(captures.size() == 4);
  }

  bool OnCommand(const CommandToSend& c, AgentObservation& a) override {
    if (c.kind != CommandKind::kCaptureStacks) return false;
    captures.push_back(c);
    a.pending_command_ids.push_back(c.id);
    return true;
  }
  // The agents answer every capture sent: both ranks of a slot with that slot's stack.
  void AnswerCaptures(const std::map<int, std::vector<std::string>>& by_slot = kHungStageStacks) {
    for (const CommandToSend& c : captures) {
      AgentObservation* a = Agent(c.pod);
      if (a == nullptr) continue;
      std::erase(a->pending_command_ids, c.id);
      int slot = -1;
      for (const SlotStatus& s : status.slots) {
        if (s.pod == c.pod) slot = s.index;
      }
      REQUIRE(slot >= 0);
      CommandResultObservation r;
      r.command_id = c.id;
      r.ok = true;
      r.has_stacks = true;
      for (int rank = slot * 2; rank < slot * 2 + 2; ++rank) {
        r.stacks[rank].push_back(CapturedProcessStack{Stack(100 + rank, by_slot.at(slot)), ""});
      }
      a->command_results[c.id] = r;
    }
  }
};

TEST_CASE("spec.faultTolerance.hangTimeoutSeconds is parsed, defaults to 60 and must be >= 1", "[unit]") {
  auto parsed = ParseWithHangTimeout(20);
  REQUIRE(parsed.ok());
  CHECK(parsed->spec.fault_tolerance.hang_timeout_seconds == 20);
  CHECK(TrainingJobSpec{}.fault_tolerance.hang_timeout_seconds == 60);
  auto bad = ParseWithHangTimeout(0);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("spec.faultTolerance.hangTimeoutSeconds"));
}

TEST_CASE("A hang: stacks from every pod, the outliers' pipeline group evicted once, the job restarted", "[unit]") {
  World w;
  w.Step();
  w.Step();
  REQUIRE(w.status.attempt == 1);
  w.Progress(30);
  w.now += kSecond;
  w.Step();
  REQUIRE(w.status.last_completed_step == 30);
  const std::vector<std::string> machines = {w.status.slots[0].machine_id, w.status.slots[1].machine_id,
                                             w.status.slots[2].machine_id, w.status.slots[3].machine_id};

  w.now += 19 * kSecond;
  CHECK(w.Step().commands.empty());
  CHECK(w.status.incidents.empty());

  w.now += kSecond;  // 20 s without a step while every process runs
  JobPlan plan = w.Step();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kHang);
  CHECK(w.status.phase == JobPhase::kRecovering);
  CHECK(w.captures.size() == 4);
  for (const CommandToSend& c : w.captures) CHECK(c.kind == CommandKind::kCaptureStacks);
  CHECK(w.status.triage_deadline > w.now);
  // The time without a step before detection is lost: counted for the incident and the job.
  const double silent = w.status.incidents[0].training_time_lost_seconds;
  CHECK(silent >= 19.0);
  CHECK(w.status.training_time_lost_seconds == silent);

  w.now += kSecond;  // captures outstanding: nothing new
  plan = w.Step();
  CHECK(plan.commands.empty());
  CHECK(w.captures.size() == 4);
  CHECK(w.status.attempt == 1);

  w.AnswerCaptures();
  w.now += kSecond;
  plan = w.Step();
  const Incident inc = w.status.incidents[0];
  CHECK(inc.kind == IncidentKind::kHang);
  CHECK(inc.decided_at == w.now);
  CHECK(std::set<std::string>(inc.machines.begin(), inc.machines.end()) ==
        std::set<std::string>{machines[0], machines[2]});
  CHECK_THAT(inc.decision, Catch::Contains("pp 0 over-evicted"));
  CHECK_THAT(inc.signal, Catch::Contains("completed no step"));
  bool listed = false;
  for (const std::string& a : inc.actions) listed |= a.find("suspect ranks 0,1,4,5") != std::string::npos;
  CHECK(listed);
  CHECK(w.status.attempt == 2);
  std::set<std::string> evicted;
  for (const Eviction& e : w.status.evicted) evicted.insert(e.machine_id);
  CHECK(evicted == std::set<std::string>{machines[0], machines[2]});
  // One ready standby took one slot; the other slot got a new pod.
  int activated = 0;
  int created_active = 0;
  for (const std::string& a : inc.actions) activated += a.find("activate standby") != std::string::npos;
  for (const PodToCreate& c : plan.create_pods) created_active += c.role == PodRole::kActive;
  CHECK(activated == 1);
  CHECK(created_active == 1);
  CHECK(w.status.slots[1].machine_id == machines[1]);
  CHECK(w.status.slots[3].machine_id == machines[3]);

  // Deciding again, and deciding after a controller restart, evicts nothing more.
  const size_t evictions = w.status.evicted.size();
  w.now += kSecond;
  w.Step();
  auto restored = JobStatusFromJson(JobStatusToJson(w.status));
  REQUIRE(restored.ok());
  w.status = *restored;
  w.now += kSecond;
  plan = w.Step();
  CHECK(plan.delete_pods.empty());
  CHECK(w.status.evicted.size() == evictions);
  CHECK(w.captures.size() == 4);
  CHECK(w.status.attempt == 2);
  REQUIRE(w.status.stack_diagnosis.investigations.size() == 1);
  CHECK(w.status.stack_diagnosis.investigations[0].state == InvestigationState::kEvicted);
  CHECK(w.status.stack_diagnosis.investigations[0].incident_id == inc.id);

  // The new attempt trains: the incident closes.
  w.Progress(31);
  w.now += kSecond;
  w.Step();
  CHECK(w.status.incidents[0].resumed_at == w.now);
  CHECK(w.status.phase == JobPhase::kRunning);
  // The incident's figure is the silent time plus the downtime since detection; the job's
  // total (one incident) is the same figure.
  const double downtime = static_cast<double>(w.now - w.status.incidents[0].detected_at) / kSecond;
  CHECK(w.status.incidents[0].training_time_lost_seconds == Approx(silent + downtime));
  CHECK(w.status.training_time_lost_seconds == Approx(w.status.incidents[0].training_time_lost_seconds));
}

TEST_CASE("A controller restart during the capture re-sends the same capture ids and evicts once", "[unit]") {
  World w;
  w.RunIntoHang();
  std::set<std::string> first_ids;
  for (const CommandToSend& c : w.captures) first_ids.insert(c.id);

  // Restart: status through JSON; the new registry forgot what was pending.
  auto restored = JobStatusFromJson(JobStatusToJson(w.status));
  REQUIRE(restored.ok());
  w.status = *restored;
  for (AgentObservation& a : w.obs.agents) a.pending_command_ids.clear();
  w.now += kSecond;
  w.Step();
  REQUIRE(w.captures.size() == 8);
  std::set<std::string> second_ids;
  for (size_t i = 4; i < 8; ++i) second_ids.insert(w.captures[i].id);
  CHECK(second_ids == first_ids);
  CHECK(w.status.incidents.size() == 1);
  CHECK(w.status.stack_diagnosis.investigations.size() == 1);

  w.AnswerCaptures();
  w.now += kSecond;
  w.Step();
  CHECK(w.status.attempt == 2);
  CHECK(w.status.evicted.size() == 2);
}

TEST_CASE("A hang with identical stacks everywhere evicts nothing and goes to stop-time diagnosis", "[unit]") {
  World w;
  w.RunIntoHang();
  const std::vector<std::string> same = {"poll", "ncclAllReduce", "main"};
  w.AnswerCaptures({{0, same}, {1, same}, {2, same}, {3, same}});
  w.now += kSecond;
  w.Step();
  CHECK(w.status.evicted.empty());
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.diagnosis.has_value());  // the no-culprit ladder: stop-time diagnosis first
  bool diagnosing = false;
  for (const std::string& a : w.status.incidents[0].actions) diagnosing |= a.find("stop-time diagnosis") != std::string::npos;
  CHECK(diagnosing);
  CHECK_THAT(w.status.incidents[0].signal, Catch::Contains("no outlier"));
  CHECK(w.status.stack_diagnosis.investigations[0].state == InvestigationState::kDecided);
}

}  // namespace
}  // namespace peregrine
