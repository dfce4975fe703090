#include "controller/decision_engine.h"

#include <catch2/catch.hpp>

#include "controller/job_parser.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

TrainingJob DemoJob() {
  auto job = ParseTrainingJob(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: demo}
spec:
  machines: 4
  gpusPerMachine: 2
  parallelism: {tensor: 2, pipeline: 2, data: 2}
  codeVersion: {command: ["sim-trainer"]}
  standby: {dailyFailureRate: 0.02, min: 1, max: 2}
)");
  REQUIRE(job.ok());
  return *job;
}

// A stand-in world that applies plans the way the executor does: pods appear on their own
// machines and their agents register and follow commands.
struct World {
  TrainingJob job = DemoJob();
  JobStatus status;
  JobObservation obs;
  int64_t now = 1000 * kSecond;
  int next_machine = 0;

  PodObservation* Pod(const std::string& name) {
    for (auto& p : obs.pods) if (p.name == name) return &p;
    return nullptr;
  }
  AgentObservation* Agent(const std::string& pod) {
    for (auto& a : obs.agents) if (a.pod == pod) return &a;
    return nullptr;
  }
  JobPlan Step() {
    obs.candidate_master_port = 30000 + static_cast<uint32_t>(status.attempt);
    JobPlan plan = DecideJob(job, status, obs, now);
    status = plan.status;
    for (const PodToCreate& c : plan.create_pods) {
      if (Pod(c.name)) continue;
      const std::string machine = "local-" + std::to_string(next_machine++);
      obs.pods.push_back(PodObservation{c.name, machine, true, false, ""});
      AgentObservation a;
      a.pod = c.name;
      a.machine_id = machine;
      a.connected = true;
      a.registered_as_standby = c.role == PodRole::kStandby;
      a.self_check_passed = true;
      a.phase = AgentTrainingPhase::kIdle;
      obs.agents.push_back(a);
    }
    for (const PodToDelete& d : plan.delete_pods) {
      std::erase_if(obs.pods, [&](const PodObservation& p) { return p.name == d.name; });
      std::erase_if(obs.agents, [&](const AgentObservation& a) { return a.pod == d.name; });
    }
    for (const CommandToSend& c : plan.commands) {
      AgentObservation* a = Agent(c.pod);
      REQUIRE(a != nullptr);
      if (c.kind == CommandKind::kStop) {
        a->phase = AgentTrainingPhase::kIdle;
        continue;
      }
      a->attempt = c.assignment.attempt;
      a->phase = AgentTrainingPhase::kRunning;
      a->registered_as_standby = false;
      a->exits.clear();
      a->rank_steps.clear();
    }
    return plan;
  }
  void Progress(uint64_t step) {
    for (const SlotStatus& slot : status.slots) {
      AgentObservation* a = Agent(slot.pod);
      if (!a) continue;
      for (int r = slot.index * 2; r < slot.index * 2 + 2; ++r) a->rank_steps[r] = step;
      a->mean_iteration_seconds = 0.1;
    }
  }
};

TEST_CASE("A job starts once every slot's agent registered, with the standby pool filled", "[unit]") {
  World w;
  JobPlan plan = w.Step();
  CHECK(plan.create_pods.size() == 4 + static_cast<size_t>(w.status.standby_desired));
  CHECK(w.status.standby_desired >= 1);
  CHECK(w.status.attempt == 0);
  plan = w.Step();  // agents are connected now
  CHECK(w.status.attempt == 1);
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(plan.commands.size() == 4);
  for (const CommandToSend& c : plan.commands) {
    CHECK(c.kind == CommandKind::kRestartInPlace);
    CHECK(c.assignment.attempt == 1);
    CHECK(c.assignment.master_addr == "127.0.0.1");
  }
  // Idempotent: deciding again on the applied result does nothing.
  CHECK(w.Step().Empty());
  CHECK(w.Step().Empty());
}

TEST_CASE("A lost machine is evicted, a standby takes its slot and the others restart in place", "[unit]") {
  World w;
  w.Step();
  w.Step();
  w.Progress(30);
  w.now += kSecond;
  w.Step();
  CHECK(w.status.last_completed_step == 30);
  const std::string victim = w.status.slots[2].pod;
  const std::string victim_machine = w.status.slots[2].machine_id;
  const std::string standby = w.status.standbys.at(0).pod;
  // The machine dies: its pod fails; its peers' processes exit with NCCL errors a moment later.
  w.Pod(victim)->running = false;
  w.Pod(victim)->failed = true;
  w.Pod(victim)->reason = "pod process group killed by signal 9";
  w.now += kSecond / 10;
  JobPlan plan = w.Step();
  CHECK(w.status.phase == JobPhase::kRecovering);
  CHECK(plan.commands.empty());  // triage: wait for corroboration before acting
  REQUIRE(w.status.incidents.size() == 1);
  for (const SlotStatus& s : w.status.slots) {
    if (s.pod == victim) continue;
    AgentObservation* a = w.Agent(s.pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{s.index * 2, 3, 0, {"NCCL error: remote process exited"}}};
  }
  w.now += 2 * kSecond;
  plan = w.Step();
  REQUIRE(w.status.incidents.size() == 1);  // one incident, not one per exit
  const Incident& inc = w.status.incidents.back();
  CHECK(inc.kind == "MachineLost");
  CHECK(inc.machines == std::vector<std::string>{victim_machine});
  CHECK(w.status.slots[2].pod == standby);
  CHECK(w.status.attempt == 2);
  CHECK(w.status.resume_step == 30);
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == victim_machine);
  int activations = 0, restarts = 0;
  for (const CommandToSend& c : plan.commands) {
    CHECK(c.assignment.attempt == 2);
    CHECK(c.assignment.resume_step == 30);
    if (c.kind == CommandKind::kActivate) {
      ++activations;
      CHECK(c.pod == standby);
      CHECK(c.assignment.slot == 2);
    } else {
      ++restarts;
    }
  }
  CHECK(activations == 1);
  CHECK(restarts == 3);
  bool victim_deleted = false;
  for (const PodToDelete& d : plan.delete_pods) victim_deleted |= d.name == victim;
  CHECK(victim_deleted);
  // The pool is replenished with a new standby pod.
  CHECK(static_cast<int>(w.status.standbys.size()) == w.status.standby_desired);
  // Training resumes: the incident closes with the time lost.
  w.now += 3 * kSecond;
  w.Progress(31);
  w.Step();
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(w.status.incidents.back().resumed_at == w.now);
  CHECK(w.status.incidents.back().training_time_lost_seconds == Approx(5.0));
  CHECK(w.Step().Empty());
}

TEST_CASE("A crash with no machine at fault is reattempted in place", "[unit]") {
  World w;
  w.Step();
  w.Step();
  w.Progress(10);
  w.Step();
  AgentObservation* a = w.Agent(w.status.slots[1].pod);
  a->phase = AgentTrainingPhase::kExited;
  a->exits = {RankExit{2, 1, 0, {"RuntimeError: boom"}}};
  w.Step();
  w.now += 2 * kSecond;
  JobPlan plan = w.Step();
  CHECK(w.status.incidents.back().kind == "ProcessCrash");
  CHECK(w.status.incidents.back().decision.find("reattempt") != std::string::npos);
  CHECK(w.status.evicted.empty());
  CHECK(plan.commands.size() == 4);
  CHECK(w.status.attempt == 2);
}

TEST_CASE("A lost agent stream alone is not acted on", "[unit]") {
  World w;
  w.Step();
  w.Step();
  w.Agent(w.status.slots[0].pod)->connected = false;
  w.now += 60 * kSecond;
  w.Progress(5);
  JobPlan plan = w.Step();
  CHECK(w.status.incidents.empty());
  CHECK(plan.commands.empty());
  CHECK(w.status.attempt == 1);
}

TEST_CASE("The job succeeds when every slot's training succeeded, and the standbys go", "[unit]") {
  World w;
  w.Step();
  w.Step();
  w.Progress(100);
  for (const SlotStatus& s : w.status.slots) w.Agent(s.pod)->phase = AgentTrainingPhase::kSucceeded;
  JobPlan plan = w.Step();
  CHECK(w.status.phase == JobPhase::kSucceeded);
  CHECK(w.status.standbys.empty());
  CHECK(plan.delete_pods.size() >= 1);
  CHECK(w.status.last_completed_step == 100);
  CHECK(w.Step().Empty());
}

TEST_CASE("A job gives up after maxRecoveries", "[unit]") {
  World w;
  w.job.spec.fault_tolerance.max_recoveries = 1;
  w.Step();
  w.Step();
  for (int round = 0; round < 2; ++round) {
    AgentObservation* a = w.Agent(w.status.slots[0].pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{0, 1, 0, {}}};
    w.Step();
    w.now += 2 * kSecond;
    w.Step();
  }
  CHECK(w.status.phase == JobPhase::kFailed);
}

}  // namespace
}  // namespace peregrine
