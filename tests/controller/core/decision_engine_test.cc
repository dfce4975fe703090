#include "controller/core/decision_engine.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "controller/core/conditions.h"
#include "controller/core/pod_health.h"
#include "controller/job_parser.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;


// The kit's plan-applying world, with stand-in diagnostics: what each machine's agent
// answers. Unless rigged, every diagnostic passes (alignment and replay with digest "good").
struct World : testing::PlanWorld {
  World() : PlanWorld(testing::DemoJob()) {}
  std::map<std::string, DiagnosticOutcome> rigged;  // "<machine>/<kind>" -> answer
  std::string corrupt_machine;  // replay groups holding it print another digest
  bool same_bad_digest = false;  // ... the same wrong digest in every group holding it
  std::string all_gather_culprit;  // every all_gather pair holding it fails
  std::set<std::string> silent;  // machines whose agents never answer diagnostics
  std::vector<CommandToSend> diagnostics_seen;
  std::map<std::string, std::set<std::string>> replay_groups;  // this plan's: group label -> machines
  std::map<std::string, std::set<std::string>> pairs;          // this plan's: all_gather port -> machines

  void OnPlan(const JobPlan& plan) override {
    replay_groups.clear();
    pairs.clear();
    for (const CommandToSend& c : plan.commands) {
      if (c.kind == CommandKind::kRunDiagnostic && c.diagnostic.kind == DiagnosticKind::kReplay) {
        replay_groups[c.diagnostic.params.at("group")].insert(Agent(c.pod)->machine_id);
      }
      if (c.kind == CommandKind::kRunDiagnostic && c.diagnostic.kind == DiagnosticKind::kAllGather) {
        pairs[c.diagnostic.params.at("master_port")].insert(Agent(c.pod)->machine_id);
      }
    }
  }
  bool OnCommand(const CommandToSend& c, AgentObservation& a) override {
    if (c.kind != CommandKind::kRunDiagnostic) return false;
    diagnostics_seen.push_back(c);
    if (silent.count(a.machine_id)) {
      a.pending_command_ids.push_back(c.id);
      return true;
    }
    DiagnosticOutcome d;
    d.kind = ToString(c.diagnostic.kind);
    d.passed = true;
    d.machine_id = a.machine_id;
    if (d.kind == "alignment") d.digest = "good";
    if (d.kind == "replay") {
      d.digest = replay_groups[c.diagnostic.params.at("group")].count(corrupt_machine)
                     ? (same_bad_digest ? std::string("bad") : "bad-" + c.diagnostic.params.at("group"))
                     : "good";
    }
    if (auto it = rigged.find(a.machine_id + "/" + d.kind); it != rigged.end()) d = it->second;
    if (d.kind == "all_gather" && pairs[c.diagnostic.params.at("master_port")].count(all_gather_culprit)) {
      d.passed = false;  // both members of a pair with the culprit see wrong contributions
      d.detail = "contributions arrived wrong";
    }
    a.command_results[c.id] = CommandResultObservation{c.id, true, 0, "", now, d, false, {}};
    return true;
  }
  // Steps until a running stop-time diagnosis has its verdict; returns the last plan.
  JobPlan Settle() {
    JobPlan plan = Step();
    for (int i = 0; i < 40 && status.diagnosis; ++i) {
      now += kSecond;
      plan = Step();
    }
    REQUIRE_FALSE(status.diagnosis.has_value());
    return plan;
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
  CHECK(inc.kind == IncidentKind::kMachineLost);
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

TEST_CASE("Pods that cannot start: PodsStuck names them, a standby stuck past the timeout is replaced", "[unit]") {
  World w;
  w.Step();
  w.Step();
  const Condition* none = FindCondition(w.status, kPodsStuckCondition);
  REQUIRE(none != nullptr);
  CHECK(none->status == ConditionStatus::kFalse);
  CHECK(none->reason == "NoStuckPods");
  const std::string standby = w.status.standbys.at(0).pod;
  PodObservation* p = w.Pod(standby);
  REQUIRE(p != nullptr);
  p->running = false;
  p->waiting_reason = "ImagePullBackOff (container trainer): back-off pulling image";
  p->created_at = w.now;
  const int64_t stuck_since = w.now + kSecond;
  w.now = stuck_since;
  JobPlan plan = w.Step();
  const Condition* stuck = FindCondition(w.status, kPodsStuckCondition);
  REQUIRE(stuck != nullptr);
  CHECK(stuck->status == ConditionStatus::kTrue);
  CHECK(stuck->reason == "ImagePullBackOff");
  CHECK(stuck->message == standby + ": ImagePullBackOff (container trainer): back-off pulling image");
  CHECK(stuck->last_transition_time == stuck_since);
  CHECK(plan.delete_pods.empty());  // within the timeout: wait
  // Past the timeout (10 minutes by default) the standby counts as failed, without a
  // machine: it is deleted and replaced, and nothing is quarantined.
  w.now = p->created_at + DecisionConfig{}.standby_pending_timeout_ns;
  plan = w.Step();
  bool deleted = false;
  for (const PodToDelete& d : plan.delete_pods) deleted = deleted || d.name == standby;
  CHECK(deleted);
  CHECK(plan.quarantine.empty());
  for (const StandbyStatus& sb : w.status.standbys) CHECK(sb.pod != standby);
  CHECK(FindCondition(w.status, kPodsStuckCondition)->last_transition_time == stuck_since);
}

TEST_CASE("A standby whose pod fails on its machine is replaced and the machine quarantined", "[unit]") {
  for (const bool disappears : {false}) {
    INFO((disappears ? "disappears" : "fails"));
    World w;
    w.Step();
    w.Step();
    const std::string standby = w.status.standbys.at(0).pod;
    PodObservation* p = w.Pod(standby);
    REQUIRE(p != nullptr);
    const std::string machine = p->machine_id;
    REQUIRE_FALSE(machine.empty());
    if (disappears) {
      std::erase_if(w.obs.pods, [&](const PodObservation& o) { return o.name == standby; });
    } else {
      p->running = false;
      p->failed = true;
      p->reason = "pod Failed: container terminated (Error, exit code 1)";
    }
    w.now += kSecond;
    const JobPlan plan = w.Step();
    bool deleted = false;
    for (const PodToDelete& d : plan.delete_pods) deleted = deleted || d.name == standby;
    CHECK(deleted);
    REQUIRE(plan.quarantine.size() == 1);
    CHECK(plan.quarantine[0].machine_id == machine);
    REQUIRE_FALSE(w.status.evicted.empty());
    CHECK(w.status.evicted.back().machine_id == machine);
    CHECK(w.status.evicted.back().pod == standby);
    for (const StandbyStatus& sb : w.status.standbys) CHECK(sb.pod != standby);
  }
}

TEST_CASE("An evicted machine is quarantined until the status says it is, across restarts", "[unit]") {
  World w;
  w.Step();
  w.Step();
  w.Progress(10);
  w.Step();
  const std::string victim = w.status.slots[1].pod;
  const std::string machine = w.status.slots[1].machine_id;
  w.Pod(victim)->running = false;
  w.Pod(victim)->failed = true;
  w.Pod(victim)->reason = "node lost";
  w.now += 2 * kSecond;
  w.Step();
  w.now += 2 * kSecond;
  const JobStatus before_eviction = w.status;
  JobPlan evicting = DecideJob(w.job, before_eviction, w.obs, w.now);
  REQUIRE(evicting.status.evicted.size() == 1);
  CHECK_FALSE(evicting.status.evicted[0].quarantined);
  REQUIRE(evicting.quarantine.size() == 1);
  CHECK(evicting.quarantine[0].machine_id == machine);
  // The quarantine failed (the executor did not mark it): every later round asks again,
  // also a new controller that loads the persisted status.
  auto persisted = JobStatusFromJson(JobStatusToJson(evicting.status));
  REQUIRE(persisted.ok());
  JobPlan again = DecideJob(w.job, *persisted, w.obs, w.now + kSecond);
  REQUIRE(again.quarantine.size() == 1);
  CHECK(again.quarantine[0].machine_id == machine);
  // Once done it is recorded, survives the round trip, and is never asked again.
  again.status.evicted[0].quarantined = true;
  auto done = JobStatusFromJson(JobStatusToJson(again.status));
  REQUIRE(done.ok());
  CHECK(done->evicted[0].quarantined);
  CHECK(DecideJob(w.job, *done, w.obs, w.now + 2 * kSecond).quarantine.empty());
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
  JobPlan plan = w.Settle();
  CHECK(w.status.incidents.back().kind == IncidentKind::kProcessCrash);
  CHECK(w.status.incidents.back().decision.find("reattempt") != std::string::npos);
  CHECK(w.status.evicted.empty());
  CHECK(plan.commands.size() == 4);
  CHECK(w.status.attempt == 2);
}

TEST_CASE("An attempt that never completes a step is one incident, then a reattempt", "[unit]") {
  World w;
  w.job.spec.fault_tolerance.start_timeout_seconds = 120;
  w.Step();
  w.Step();
  REQUIRE(w.status.attempt == 1);
  w.now += 121 * kSecond;  // past the start timeout, still at step 0
  w.Step();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].signal.find("made no step") != std::string::npos);
  w.now += 2 * kSecond;
  JobPlan plan = w.Settle();
  CHECK(w.status.incidents.size() == 1);
  CHECK(w.status.attempt == 2);
  CHECK(plan.commands.size() == 4);
  w.now += kSecond;
  w.Step();
  CHECK(w.status.incidents.size() == 1);  // no incident per round
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
    w.Settle();
  }
  CHECK(w.status.phase == JobPhase::kFailed);
}


// ---------------------------------------------------------------------------
// Automated fault tolerance (ByteRobust): inspections, network alarms, rollback, hot update
// ---------------------------------------------------------------------------

World RunningWorld(uint64_t step) {
  World w;
  w.Step();
  w.Step();
  w.Progress(step);
  w.now += kSecond;
  w.Step();
  return w;
}

// Runs the triage window out: the detection round, then the round that decides; returns
// that round's plan.
JobPlan EndTriage(World& w) {
  w.Step();
  w.now += 2 * kSecond;
  return w.Step();
}

// Runs the triage window out: detection round, then the decision round.
JobPlan Triage(World& w) {
  w.Step();
  w.now += 2 * kSecond;
  return w.Settle();
}

InspectionObservation Inspection(std::string kind, InspectionStatus status, bool machine, int64_t at,
                                 std::string summary = "") {
  InspectionObservation o;
  o.kind = std::move(kind);
  o.component = o.kind == "network" ? "sim0" : "PCI:0000:1b:00";
  o.status = status;
  o.machine_attributed = machine;
  o.summary = summary.empty() ? "injected" : std::move(summary);
  o.at = at;
  return o;
}

std::vector<std::string> SlotMachines(const World& w) {
  std::vector<std::string> out;
  for (const SlotStatus& s : w.status.slots) out.push_back(s.machine_id);
  return out;
}

TEST_CASE("Inspection results: only machine-attributed faults evict, the others are left alone", "[unit]") {
  struct Case {
    const char* name;
    InspectionObservation obs;
    bool as_alarm;
    bool evicts;
  };
  const Case cases[] = {
      {"fatal Xid alarm", Inspection("xid", InspectionStatus::kFault, true, 1, "Xid 79 (GPU has fallen off the bus)"), true, true},
      {"GPU lost in the heartbeat", Inspection("gpu", InspectionStatus::kFault, true, 1, "GPU lost"), false, true},
      {"disk read-only", Inspection("host", InspectionStatus::kFault, true, 1, "read-only"), false, true},
      {"recoverable Xid warning", Inspection("xid", InspectionStatus::kWarning, false, 1, "Xid 13"), true, false},
      {"full volume (not the machine)", Inspection("host", InspectionStatus::kFault, false, 1, "2% free"), false, false},
      {"GPU too hot", Inspection("gpu", InspectionStatus::kWarning, false, 1, "92 C"), false, false},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      World w = RunningWorld(20);
      const std::vector<std::string> before = SlotMachines(w);
      AgentObservation* a = w.Agent(w.status.slots[1].pod);
      if (c.as_alarm) {
        a->alarms.push_back(c.obs);
      } else {
        a->inspections.push_back(c.obs);
      }
      Triage(w);
      if (c.evicts) {
        REQUIRE(w.status.incidents.size() == 1);
        CHECK(w.status.incidents.back().kind == IncidentKind::kMachineFault);
        CHECK(w.status.incidents.back().machines == std::vector<std::string>{before[1]});
        REQUIRE(w.status.evicted.size() == 1);
        CHECK(w.status.evicted[0].machine_id == before[1]);
        CHECK(w.status.slots[1].machine_id != before[1]);
        CHECK(w.status.attempt == 2);
        CHECK(w.status.resume_step == 20);
        for (int i : {0, 2, 3}) CHECK(w.status.slots[i].machine_id == before[i]);
      } else {
        CHECK(w.status.incidents.empty());
        CHECK(w.status.evicted.empty());
        CHECK(w.status.attempt == 1);
      }
    }
  }
}

TEST_CASE("Network alarms are tolerated until the second within the window on one machine", "[unit]") {
  struct Case {
    const char* name;
    std::vector<std::pair<int, int64_t>> alarms;  // (slot, seconds before now)
    int evicted_slot;                             // -1: none
  };
  const Case cases[] = {
      {"one flap", {{2, 1}}, -1},
      {"two flaps on one machine within 300 s", {{2, 200}, {2, 1}}, 2},
      {"two flaps 400 s apart", {{2, 401}, {2, 1}}, -1},
      {"one flap each on two machines", {{1, 1}, {2, 2}}, -1},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      World w = RunningWorld(20);
      const std::vector<std::string> before = SlotMachines(w);
      for (const auto& [slot, ago] : c.alarms) {
        w.Agent(w.status.slots[slot].pod)
            ->alarms.push_back(Inspection("network", InspectionStatus::kWarning, false, w.now - ago * kSecond, "1 link flaps"));
      }
      JobPlan first = w.Step();
      if (c.evicted_slot < 0) {
        bool tolerated = false;
        for (const JobEvent& e : first.events) tolerated |= e.reason == "NetworkAlarmTolerated";
        CHECK(tolerated);
        w.now += 2 * kSecond;
        w.Step();
        CHECK(w.status.incidents.empty());
        CHECK(w.status.evicted.empty());
        CHECK(SlotMachines(w) == before);
        CHECK(w.Step().Empty());  // recording the alarms again changes nothing
      } else {
        w.now += 2 * kSecond;
        w.Step();
        REQUIRE(w.status.incidents.size() == 1);
        CHECK(w.status.incidents[0].kind == IncidentKind::kNetworkAlarms);
        CHECK(w.status.incidents[0].machines == std::vector<std::string>{before[c.evicted_slot]});
        REQUIRE(w.status.evicted.size() == 1);
        CHECK(w.status.evicted[0].machine_id == before[c.evicted_slot]);
      }
    }
  }
}

// Runs version v2 by a hot update after v1 ran healthy.
World UpdatedWorld(bool urgent) {
  World w = RunningWorld(20);
  CHECK(w.status.version_history.back().outcome == VersionOutcome::kHealthy);
  w.job.spec.code = CodeVersionSpec{"", {"sim-trainer", "--v2"}, "v2", {}};
  w.job.metadata.generation = 2;
  if (urgent) w.job.metadata.annotations["peregrine.dev/hot-update"] = "urgent";
  return w;
}

TEST_CASE("An urgent hot update restarts in place now with the new code", "[unit]") {
  World w = UpdatedWorld(/*urgent=*/true);
  JobPlan plan = w.Step();
  CHECK(w.status.attempt == 2);
  CHECK(w.status.code.revision == "v2");
  CHECK(w.status.resume_step == 20);
  REQUIRE(plan.commands.size() == 4);
  for (const CommandToSend& c : plan.commands) CHECK(c.assignment.code.revision == "v2");
  CHECK(w.status.version_history.size() == 2);
  CHECK(w.status.version_history.back().reason == "urgent hot update");
  CHECK(w.status.incidents.empty());
  CHECK(w.Step().Empty());
}

TEST_CASE("A lazy hot update waits for the next failure-triggered restart", "[unit]") {
  World w = UpdatedWorld(/*urgent=*/false);
  w.Step();
  CHECK(w.status.attempt == 1);
  CHECK(w.status.code.revision == "");
  REQUIRE(w.status.pending_code.has_value());
  CHECK(w.Step().Empty());
  AgentObservation* a = w.Agent(w.status.slots[0].pod);
  a->phase = AgentTrainingPhase::kExited;
  a->exits = {RankExit{0, 1, 0, {"RuntimeError: NCCL timeout"}}};
  JobPlan plan = Triage(w);
  CHECK(w.status.attempt == 2);
  CHECK(w.status.code.revision == "v2");
  CHECK_FALSE(w.status.pending_code.has_value());
  for (const CommandToSend& c : plan.commands) CHECK(c.assignment.code.revision == "v2");
  // The change is an event like any hot update, and recorded in the version history.
  bool event = false;
  for (const JobEvent& e : plan.events) {
    event = event || (e.reason == "HotUpdate" && e.message.find("-> v2") != std::string::npos &&
                      e.message.find("failure-triggered restart") != std::string::npos);
  }
  CHECK(event);
  CHECK(w.status.version_history.back().reason == "lazy hot update at the failure-triggered restart");
}

TEST_CASE("A lazy hot update is applied when its window expires", "[unit]") {
  World w = UpdatedWorld(/*urgent=*/false);
  w.job.spec.fault_tolerance.hot_update_window_hours = 1;
  w.Step();
  CHECK(w.status.attempt == 1);
  w.now += 3599 * kSecond;
  w.Progress(21);  // training goes on meanwhile (an hour without a step would be a hang)
  w.Step();
  CHECK(w.status.attempt == 1);
  w.now += 2 * kSecond;
  w.Step();
  CHECK(w.status.attempt == 2);
  CHECK(w.status.code.revision == "v2");
  CHECK(w.status.version_history.back().reason == "hot update window expired");
}

TEST_CASE("Crashes after a code update: reattempt, then roll back to the last healthy version", "[unit]") {
  World w = UpdatedWorld(/*urgent=*/true);
  w.Step();  // v2 runs (attempt 2)
  REQUIRE(w.status.code.revision == "v2");
  auto crash = [&w] {
    AgentObservation* a = w.Agent(w.status.slots[3].pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{6, 1, 0, {"Segmentation fault (core dumped)"}}};
    return Triage(w);
  };
  crash();
  CHECK(w.status.incidents.back().decision.find("reattempt") != std::string::npos);
  CHECK(w.status.code.revision == "v2");
  JobPlan plan = crash();  // fails again before passing the failure step
  CHECK(w.status.incidents.back().decision.find("roll back") != std::string::npos);
  CHECK(w.status.code.revision == "");
  CHECK(w.status.code.command == std::vector<std::string>{"sim-trainer"});
  for (const CommandToSend& c : plan.commands) CHECK(c.assignment.code.command == std::vector<std::string>{"sim-trainer"});
  REQUIRE(w.status.version_history.size() == 3);
  CHECK(w.status.version_history[1].outcome == VersionOutcome::kRolledBack);
  CHECK(w.status.resume_step == 20);
  CHECK(w.status.evicted.empty());
  // The rolled-back version stays the desired spec, but it is not applied again.
  CHECK(w.Step().Empty());
  CHECK(w.status.code.revision == "");
}

TEST_CASE("A user-code error rolls back at once when an earlier version exists", "[unit]") {
  World w = UpdatedWorld(/*urgent=*/true);
  w.Step();
  AgentObservation* a = w.Agent(w.status.slots[2].pod);
  a->phase = AgentTrainingPhase::kExited;
  a->exits = {RankExit{4, 1, 0,
                       {"Traceback (most recent call last):", "  File \"train.py\", line 3, in <module>",
                        "    model(x, y, z)", "TypeError: forward() takes 2 positional arguments but 4 were given"}}};
  Triage(w);
  CHECK(w.status.incidents.back().kind == IncidentKind::kUserCodeError);
  CHECK(w.status.code.revision == "");
  CHECK(w.status.evicted.empty());
}

TEST_CASE("A user-code error with no earlier version is reattempted", "[unit]") {
  World w = RunningWorld(20);
  AgentObservation* a = w.Agent(w.status.slots[2].pod);
  a->phase = AgentTrainingPhase::kExited;
  a->exits = {RankExit{4, 1, 0, {"Traceback (most recent call last):", "KeyError: 'lr'"}}};
  Triage(w);
  CHECK(w.status.incidents.back().decision.find("reattempt") != std::string::npos);
  CHECK(w.status.attempt == 2);
}


// A user-code error is deterministic: rolled back when an earlier version exists,
// otherwise reattempted at most once and then the job fails; never diagnosed or replayed.
TEST_CASE("User-code errors: roll back, else one reattempt, then Failed, never a diagnosis or replay", "[unit]") {
  struct Failure {
    bool user_error;
    uint64_t progress_before = 0;  // > 0: every rank completes this step before the failure
  };
  struct Row {
    const char* name;
    bool earlier_version;
    std::vector<Failure> failures;
    std::vector<const char*> decisions;  // per incident, a substring of its decision
    bool failed;
  };
  const Row rows[] = {
      {"no earlier version: one reattempt, then the job fails",
       false,
       {{true}, {true}},
       {"reattempt in place once", "the job fails"},
       true},
      {"no earlier version: a reattempt that passes the failure step earns another",
       false,
       {{true}, {true, 40}, {true}},
       {"reattempt in place once", "reattempt in place once", "the job fails"},
       true},
      {"an earlier version: rolled back at once", true, {{true}}, {"roll back"}, false},
      {"after the rollback nothing older is left: one reattempt, then the job fails",
       true,
       {{true}, {true}, {true}},
       {"roll back", "reattempt in place once", "the job fails"},
       true},
      {"a native crash after the user-code reattempt takes the no-culprit ladder (diagnosis), not Failed",
       false,
       {{true}, {false}},
       {"reattempt in place once", "stop-time diagnosis"},
       false},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    World w = row.earlier_version ? UpdatedWorld(/*urgent=*/true) : RunningWorld(20);
    if (row.earlier_version) w.Step();  // v2 runs
    for (const Failure& f : row.failures) {
      if (f.progress_before > 0) {
        w.Progress(f.progress_before);
        w.now += kSecond;
        w.Step();
      }
      AgentObservation* a = w.Agent(w.status.slots[2].pod);
      a->phase = AgentTrainingPhase::kExited;
      a->exits = {RankExit{4, 1, 0,
                           f.user_error ? std::vector<std::string>{"  File \"train.py\", line 3, in <module>",
                                                                   "    model(x, y, z)",
                                                                   "TypeError: forward() takes 2 positional arguments"}
                                        : std::vector<std::string>{"Segmentation fault (core dumped)"}}};
      Triage(w);
    }
    REQUIRE(w.status.incidents.size() == row.decisions.size());
    for (size_t i = 0; i < row.decisions.size(); ++i) {
      const Incident& inc = w.status.incidents[i];
      INFO("incident " << i << ": " << inc.decision);
      CHECK_THAT(inc.decision, Catch::Contains(row.decisions[i]));
      if (inc.kind == IncidentKind::kUserCodeError) CHECK(inc.diagnosis.empty());
    }
    const bool all_user_errors =
        std::all_of(row.failures.begin(), row.failures.end(), [](const Failure& f) { return f.user_error; });
    if (all_user_errors) {
      for (const CommandToSend& c : w.diagnostics_seen) CHECK(c.diagnostic.kind != DiagnosticKind::kReplay);
      CHECK(w.diagnostics_seen.empty());
    }
    CHECK(w.status.evicted.empty());
    CHECK((w.status.phase == JobPhase::kFailed) == row.failed);
    const Condition* failed = nullptr;
    for (const Condition& c : w.status.conditions) {
      if (c.type == "Failed") failed = &c;
    }
    if (row.failed) {
      REQUIRE(failed != nullptr);
      CHECK(failed->status == ConditionStatus::kTrue);
      CHECK(failed->reason == "UserCodeError");
      CHECK_THAT(failed->message, Catch::Contains("TypeError: forward()"));
      CHECK(w.status.version_history.back().outcome == VersionOutcome::kFailed);
      CHECK(w.status.incidents.back().kind == IncidentKind::kUserCodeError);
      CHECK(w.status.finished_at == w.now);
      // Deciding again changes nothing: no restart, no new incident.
      const uint64_t attempt = w.status.attempt;
      w.now += kSecond;
      w.Step();
      CHECK(w.status.attempt == attempt);
      CHECK(w.status.incidents.size() == row.decisions.size());
    } else {
      CHECK(failed == nullptr);
    }
  }
}

// ---------------------------------------------------------------------------
// Stop-time diagnosis (stop_time_diagnosis.h) and the escalation ladder
// ---------------------------------------------------------------------------

void Crash(World& w, int slot) {
  AgentObservation* a = w.Agent(w.status.slots[static_cast<size_t>(slot)].pod);
  a->phase = AgentTrainingPhase::kExited;
  a->exits = {RankExit{slot * 2, 1, 0, {"Segmentation fault (core dumped)"}}};
}

std::vector<std::string> StageNames(const Incident& inc) {
  std::vector<std::string> out;
  for (const DiagnosisStageRecord& r : inc.diagnosis) out.push_back(ToString(r.stage));
  return out;
}

DiagnosticOutcome Failing(const std::string& kind, const std::string& machine, std::string detail) {
  DiagnosticOutcome d;
  d.kind = kind;
  d.passed = false;
  d.detail = std::move(detail);
  d.machine_id = machine;
  return d;
}

TEST_CASE("A crash with no culprit stops training and runs EUD, all-to-all and neighbour all-gather, then reattempts",
          "[unit]") {
  World w = RunningWorld(20);
  Crash(w, 1);
  JobPlan first = EndTriage(w);  // triage over: stop every machine
  REQUIRE(w.status.diagnosis.has_value());
  CHECK(w.status.diagnosis->stage == StopTimeStage::kStop);
  int stops = 0;
  for (const CommandToSend& c : first.commands) {
    CHECK(c.kind == CommandKind::kStop);
    CHECK(c.id.find("/incident-1/stop/") != std::string::npos);
    ++stops;
  }
  CHECK(stops == 4);
  CHECK(w.status.incidents.back().decided_at == 0);
  JobPlan plan = w.Settle();
  const Incident& inc = w.status.incidents.back();
  CHECK(StageNames(inc) == std::vector<std::string>{"stop", "eud", "all_to_all", "all_gather"});
  for (const DiagnosisStageRecord& r : inc.diagnosis) CHECK(r.verdict == StageVerdict::kPassed);
  CHECK(inc.diagnosis[3].results.size() == 8);  // 2 rounds x 2 pairs x 2 machines
  CHECK_THAT(inc.decision, Catch::Contains("reattempt"));
  CHECK(w.status.evicted.empty());
  CHECK(w.status.attempt == 2);
  CHECK(plan.commands.size() == 4);
  // Deterministic ids, each diagnostic once per machine, all-gather in neighbour pairs.
  std::set<std::string> ids;
  for (const CommandToSend& c : w.diagnostics_seen) CHECK(ids.insert(c.id).second);
  CHECK(w.diagnostics_seen.size() == 4 + 4 + 8);
  CHECK(w.Step().Empty());
}

TEST_CASE("The machine failing EUD is evicted, a standby takes its slot, nothing else is evicted", "[unit]") {
  World w = RunningWorld(20);
  const std::string bad = w.status.slots[2].machine_id;
  const std::vector<std::string> before = {w.status.slots[0].machine_id, w.status.slots[1].machine_id,
                                           w.status.slots[3].machine_id};
  w.rigged[bad + "/eud"] = Failing("eud", bad, "gpu1: self-test digest differs");
  Crash(w, 0);
  Triage(w);
  const Incident& inc = w.status.incidents.back();
  CHECK(StageNames(inc) == std::vector<std::string>{"stop", "eud"});
  CHECK(inc.diagnosis.back().verdict == StageVerdict::kFailed);
  CHECK(inc.diagnosis.back().failed_machines == std::vector<std::string>{bad});
  CHECK(inc.machines == std::vector<std::string>{bad});
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == bad);
  CHECK(w.status.slots[2].machine_id != bad);
  CHECK(w.status.slots[0].machine_id == before[0]);
  CHECK(w.status.slots[1].machine_id == before[1]);
  CHECK(w.status.slots[3].machine_id == before[2]);
}

TEST_CASE("Neighbour all-gather: the machine failing both its pairs is evicted, its neighbours are not", "[unit]") {
  World w = RunningWorld(20);
  w.all_gather_culprit = w.status.slots[1].machine_id;
  Crash(w, 3);
  Triage(w);
  const Incident& inc = w.status.incidents.back();
  CHECK(StageNames(inc) == std::vector<std::string>{"stop", "eud", "all_to_all", "all_gather"});
  CHECK(inc.diagnosis.back().failed_machines == std::vector<std::string>{w.all_gather_culprit});
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == w.all_gather_culprit);
}

TEST_CASE("A NaN loss runs the alignment test first and isolates the machine with the minority digest", "[unit]") {
  World w = RunningWorld(20);
  for (const SlotStatus& slot : w.status.slots) {
    AgentObservation* a = w.Agent(slot.pod);
    for (int r = slot.index * 2; r < slot.index * 2 + 2; ++r) {
      a->rank_losses[r] = RankLossObservation{21, std::numeric_limits<double>::quiet_NaN(), 1.0};
    }
  }
  const std::string bad = w.status.slots[3].machine_id;
  DiagnosticOutcome odd;
  odd.kind = "alignment";
  odd.passed = true;
  odd.digest = "other";
  w.rigged[bad + "/alignment"] = odd;
  w.Step();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kNaNLoss);
  CHECK_THAT(w.status.incidents[0].signal, Catch::Contains("non-finite loss"));
  w.now += 2 * kSecond;
  w.Settle();
  const Incident& inc = w.status.incidents.back();
  CHECK(StageNames(inc) == std::vector<std::string>{"stop", "alignment"});
  CHECK_THAT(inc.diagnosis.back().note, Catch::Contains("majority digest good (3 of 4 machines)"));
  CHECK(inc.machines == std::vector<std::string>{bad});
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == bad);
}

TEST_CASE("Alignment digests without a majority give no verdict, the other stages still run", "[unit]") {
  World w = RunningWorld(20);
  for (int i = 0; i < 4; ++i) {
    DiagnosticOutcome d;
    d.kind = "alignment";
    d.passed = true;
    d.digest = i < 2 ? "a" : "b";
    w.rigged[w.status.slots[static_cast<size_t>(i)].machine_id + "/alignment"] = d;
  }
  AgentObservation* a = w.Agent(w.status.slots[0].pod);
  a->rank_losses[0] = RankLossObservation{21, 1.0, std::numeric_limits<double>::infinity()};
  Triage(w);
  const Incident& inc = w.status.incidents.back();
  CHECK(StageNames(inc) == std::vector<std::string>{"stop", "alignment", "eud", "all_to_all", "all_gather"});
  CHECK(inc.diagnosis[1].verdict == StageVerdict::kNoVerdict);
  CHECK(w.status.evicted.empty());
  CHECK_THAT(inc.decision, Catch::Contains("reattempt"));
}

TEST_CASE("Escalation: reattempt, then roll back the update, then dual-phase replay locates the corrupt machine",
          "[unit]") {
  World w = UpdatedWorld(/*urgent=*/true);
  w.Step();  // v2 runs
  REQUIRE(w.status.code.revision == "v2");
  const std::string corrupt = w.status.slots[2].machine_id;
  w.corrupt_machine = corrupt;
  Crash(w, 0);
  Triage(w);
  CHECK_THAT(w.status.incidents.back().decision, Catch::Contains("reattempt"));
  Crash(w, 0);  // again, before passing the failure step
  Triage(w);
  CHECK_THAT(w.status.incidents.back().decision, Catch::Contains("roll back"));
  CHECK(w.status.code.revision == "");
  CHECK(w.status.rollbacks == 1);
  Crash(w, 0);  // and again on the old version
  Triage(w);
  const Incident& inc = w.status.incidents.back();
  CHECK(inc.kind == IncidentKind::kSilentDataCorruption);
  CHECK(StageNames(inc) == std::vector<std::string>{"stop", "eud", "all_to_all", "all_gather", "replay"});
  CHECK_THAT(inc.diagnosis.back().note, Catch::Contains("intersect in slot 2"));
  CHECK(inc.machines == std::vector<std::string>{corrupt});
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == corrupt);
  // Replay commands: one rendezvous per group at its first machine, a distinct port per group.
  std::set<std::string> ports;
  for (const CommandToSend& c : w.diagnostics_seen) {
    if (c.diagnostic.kind != DiagnosticKind::kReplay) continue;
    CHECK(c.diagnostic.params.at("tp") == "2");
    CHECK(c.diagnostic.params.at("pp") == "2");
    ports.insert(c.diagnostic.params.at("master_port"));
  }
  CHECK(ports.size() == 4);
}

// The demo layout (4 machines x 2 GPUs, TP2 PP2 DP2) has two horizontal and two vertical
// replay groups, all of one shape (2 machines, replay DP 1), so the four group digests are
// compared together. With no earlier code version, a second crash goes straight to replay.
TEST_CASE("Dual-phase replay in the 4-machine demo layout: two matching groups name the healthy digest",
          "[unit]") {
  for (const bool same_bad : {false, true}) {
    for (int slot = 0; slot < 4; ++slot) {
      DYNAMIC_SECTION("corrupt slot " << slot << (same_bad ? ", one wrong digest" : ", two wrong digests")) {
        World w = RunningWorld(20);
        const std::string corrupt = w.status.slots[static_cast<size_t>(slot)].machine_id;
        w.corrupt_machine = corrupt;
        w.same_bad_digest = same_bad;
        Crash(w, (slot + 1) % 4);
        Triage(w);
        CHECK_THAT(w.status.incidents.back().decision, Catch::Contains("reattempt"));
        Crash(w, (slot + 1) % 4);  // again, before passing the failure step; nothing to roll back to
        Triage(w);
        const Incident& inc = w.status.incidents.back();
        CHECK(StageNames(inc) == std::vector<std::string>{"stop", "eud", "all_to_all", "all_gather", "replay"});
        if (!same_bad) {
          // Healthy groups share "good" (2 of 4); the two failing groups intersect in the machine.
          CHECK(inc.kind == IncidentKind::kSilentDataCorruption);
          CHECK_THAT(inc.diagnosis.back().note, Catch::Contains(absl::StrCat("intersect in slot ", slot)));
          CHECK(inc.machines == std::vector<std::string>{corrupt});
          REQUIRE(w.status.evicted.size() == 1);
          CHECK(w.status.evicted[0].machine_id == corrupt);
        } else {
          // Two groups say "good", two say "bad": either pair could be the healthy one (each
          // intersection is a consistent single culprit), so no machine is evicted.
          CHECK(inc.diagnosis.back().verdict == StageVerdict::kNoVerdict);
          CHECK(inc.machines.empty());
          CHECK(w.status.evicted.empty());
          CHECK_THAT(inc.decision, Catch::Contains("found no machine"));
        }
      }
    }
  }
}

TEST_CASE("After a loss spike, steps that spike again do not end the escalation (replay follows)",
          "[unit]") {
  World w = RunningWorld(20);
  auto report = [&w](uint64_t step, double grad_norm) {
    w.Progress(step);
    for (const SlotStatus& slot : w.status.slots) {
      AgentObservation* a = w.Agent(slot.pod);
      for (int r = slot.index * 2; r < slot.index * 2 + 2; ++r) a->rank_losses[r] = RankLossObservation{step, 2.0, grad_norm};
    }
  };
  for (uint64_t step = 21; step <= 30; ++step) {
    report(step, 1.0);
    w.Step();
  }
  report(31, 40.0);
  Triage(w);
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kLossSpike);
  CHECK_THAT(w.status.incidents[0].decision, Catch::Contains("reattempt"));
  CHECK(w.status.reattempts == 1);
  // The reattempt completes steps past the failure step, but their grad-norm spikes again.
  CHECK(w.status.incidents[0].step_at_failure == 31);
  report(34, 40.0);
  Triage(w);
  REQUIRE(w.status.incidents.size() == 2);
  // Not a second reattempt: the escalation goes on to replay (which finds no machine here).
  CHECK(StageNames(w.status.incidents[1]).back() == "replay");
  CHECK_THAT(w.status.incidents[1].decision, Catch::Contains("replay found no machine"));
}

TEST_CASE("A controller restart mid-diagnosis resumes the same stage with the same command ids", "[unit]") {
  World w = RunningWorld(20);
  w.silent.insert(w.status.slots[1].machine_id);  // its EUD never answers: the stage waits
  Crash(w, 0);
  EndTriage(w);  // stop
  w.now += kSecond;
  w.Step();  // eud goes out
  REQUIRE(w.status.diagnosis.has_value());
  REQUIRE(w.status.diagnosis->stage == StopTimeStage::kEud);
  const size_t sent = w.diagnostics_seen.size();
  // Persist and reload the status; the new controller's registry has no pending commands.
  auto reloaded = JobStatusFromJson(JobStatusToJson(w.status));
  REQUIRE(reloaded.ok());
  CHECK(JobStatusToJson(*reloaded) == JobStatusToJson(w.status));
  w.status = *reloaded;
  for (auto& a : w.obs.agents) a.pending_command_ids.clear();
  w.now += kSecond;
  JobPlan plan = w.Step();
  CHECK(w.status.diagnosis->stage == StopTimeStage::kEud);
  REQUIRE(plan.commands.size() == 1);  // only the unanswered one goes out again, same id
  CHECK(plan.commands[0].pod == w.status.slots[1].pod);
  bool same = false;
  for (size_t i = 0; i < sent; ++i) same = same || w.diagnostics_seen[i].id == plan.commands[0].id;
  CHECK(same);
  CHECK(w.status.incidents.back().diagnosis.size() == 2);  // stop recorded once, eud running
}

TEST_CASE("A live agent that never answers fails the stage at the deadline, a disconnected one gets no verdict",
          "[unit]") {
  World w = RunningWorld(20);
  const std::string mute = w.status.slots[1].machine_id;
  const std::string gone = w.status.slots[3].machine_id;
  w.silent.insert(mute);
  w.silent.insert(gone);
  w.Agent(w.status.slots[3].pod)->connected = false;
  Crash(w, 0);
  EndTriage(w);
  w.now += kSecond;
  w.Step();
  REQUIRE(w.status.diagnosis->stage == StopTimeStage::kEud);
  w.now += 119 * kSecond;
  w.Step();
  CHECK(w.status.diagnosis.has_value());  // deadline = timeout + margin not reached
  w.now += 60 * kSecond;
  // The mute agent's link works: it heartbeats (an agent silent past the heartbeat timeout
  // would be a lost link, no verdict: diagnosis_link_test.cc).
  for (AgentObservation& a : w.obs.agents) {
    if (a.connected) a.last_seen = w.now;
  }
  w.Settle();
  const Incident& inc = w.status.incidents.back();
  CHECK(inc.diagnosis.back().stage == StopTimeStage::kEud);
  CHECK(inc.diagnosis.back().failed_machines == std::vector<std::string>{mute});
  bool excluded = false;
  for (const std::string& line : inc.diagnosis.back().results) excluded = excluded || line.find(gone + ": agent disconnected") == 0;
  CHECK(excluded);
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == mute);
}

TEST_CASE("Agents without the diagnostic (UNIMPLEMENTED) give no evidence: the diagnosis passes and reattempts",
          "[unit]") {
  World w = RunningWorld(20);
  Crash(w, 2);
  JobPlan plan = EndTriage(w);
  for (int i = 0; i < 10 && w.status.diagnosis; ++i) {
    // Answer every diagnostic with an error status, as an agent without the kind does.
    for (const CommandToSend& c : plan.commands) {
      AgentObservation* a = w.Agent(c.pod);
      if (c.kind == CommandKind::kRunDiagnostic) {
        a->command_results[c.id] = CommandResultObservation{c.id, false, 12, "diagnostic not available", w.now,
                                                            std::nullopt, false, {}};
      }
    }
    w.now += kSecond;
    plan = DecideJob(w.job, w.status, w.obs, w.now);
    w.status = plan.status;
    for (const CommandToSend& c : plan.commands) {
      if (c.kind == CommandKind::kStop) {
        w.Agent(c.pod)->command_results[c.id] = CommandResultObservation{c.id, true, 0, "", w.now, std::nullopt, false, {}};
      }
    }
  }
  REQUIRE_FALSE(w.status.diagnosis.has_value());
  CHECK(w.status.evicted.empty());
  CHECK_THAT(w.status.incidents.back().diagnosis[1].results[0], Catch::Contains("unavailable"));
  CHECK_THAT(w.status.incidents.back().decision, Catch::Contains("reattempt"));
}

TEST_CASE("A loss spike against the running reference opens a LossSpike incident", "[unit]") {
  World w = RunningWorld(20);
  for (uint64_t step = 21; step <= 30; ++step) {
    for (const SlotStatus& slot : w.status.slots) {
      AgentObservation* a = w.Agent(slot.pod);
      for (int r = slot.index * 2; r < slot.index * 2 + 2; ++r) a->rank_losses[r] = RankLossObservation{step, 2.0, 1.0};
    }
    w.now += kSecond;
    w.Step();
  }
  CHECK(w.status.incidents.empty());
  CHECK(w.status.loss_reference.step == 30);
  w.Agent(w.status.slots[1].pod)->rank_losses[2] = RankLossObservation{31, 11.0, 1.0};
  w.now += kSecond;
  w.Step();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kLossSpike);
  CHECK_THAT(w.status.incidents[0].signal, Catch::Contains("rank 2 step 31 loss 11"));
}

}  // namespace
}  // namespace peregrine
