// Which lost pods blame their machine (and quarantine it) and which do not, and how long a
// pod on an unready node keeps its machine while its agent vouches for it: the decision
// core on simulated time (pod_health.h JudgeNodeUnready, decide_triage.cc, decide_pods.cc).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "controller/core/conditions.h"
#include "controller/core/decision_engine.h"
#include "controller/core/pod_health.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

struct World : testing::PlanWorld {
  World() : PlanWorld(testing::DemoJob()) {
    Step();
    Step();  // every agent registered: attempt 1 runs
    REQUIRE(status.attempt == 1);
  }
  // Every agent heartbeats now.
  void Heartbeat() {
    for (AgentObservation& a : obs.agents) {
      if (a.connected) a.last_seen = now;
    }
  }
  // `seconds` of training in rounds of 10 s: one step per round and a heartbeat from every
  // agent. Returns whether any round planned a pod deletion or a quarantine.
  bool Train(int seconds, uint64_t* step) {
    bool acted = false;
    for (int t = 0; t < seconds; t += 10) {
      now += 10 * kSecond;
      Progress(++*step);
      Heartbeat();
      const JobPlan plan = Step();
      acted = acted || !plan.delete_pods.empty() || !plan.quarantine.empty();
    }
    return acted;
  }
  bool Deleted(const JobPlan& plan, const std::string& pod) const {
    return std::any_of(plan.delete_pods.begin(), plan.delete_pods.end(),
                       [&](const PodToDelete& d) { return d.name == pod; });
  }
};

NodeUnreadyInput Unready(const AgentObservation* agent, int64_t since) {
  NodeUnreadyInput in;
  in.node_unready = true;
  in.node_reason = "node n1 NotReady (Ready=Unknown)";
  in.agent = agent;
  in.training = true;
  in.step = 10;
  in.since = since;
  in.since_step = 10;
  in.progress_at = since;
  in.grace_ns = 300 * kSecond;
  in.heartbeat_timeout_ns = 30 * kSecond;
  in.stall_ns = 60 * kSecond;
  return in;
}

TEST_CASE("JudgeNodeUnready: tolerated while the agent heartbeats and progresses, evicted otherwise", "[unit]") {
  const int64_t t0 = 1000 * kSecond;
  AgentObservation a;
  a.connected = true;
  a.last_seen = t0;
  // Ready: nothing to judge.
  NodeUnreadyInput ready = Unready(&a, 0);
  ready.node_unready = false;
  CHECK(JudgeNodeUnready(ready, t0).verdict == NodeUnreadyVerdict::kReady);
  // First sight: the suspicion starts now and is tolerated.
  NodeUnreadyJudgement j = JudgeNodeUnready(Unready(&a, 0), t0);
  CHECK(j.verdict == NodeUnreadyVerdict::kTolerate);
  CHECK(j.since == t0);
  CHECK_THAT(j.reason, Catch::Contains("kept for up to 5m"));
  // Progress recorded: a newer step moves progress_at.
  NodeUnreadyInput in = Unready(&a, t0);
  in.step = 11;
  a.last_seen = t0 + 50 * kSecond;
  j = JudgeNodeUnready(in, t0 + 50 * kSecond);
  CHECK(j.verdict == NodeUnreadyVerdict::kTolerate);
  CHECK(j.step == 11);
  CHECK(j.progress_at == t0 + 50 * kSecond);
  // No step for longer than the stall bound: the machine is not working.
  in = Unready(&a, t0);
  a.last_seen = t0 + 61 * kSecond;
  j = JudgeNodeUnready(in, t0 + 61 * kSecond);
  CHECK(j.verdict == NodeUnreadyVerdict::kEvict);
  CHECK_THAT(j.reason, Catch::Contains("completed no step for 1m1s"));
  // A standby does not train: its heartbeat alone vouches.
  in.training = false;
  CHECK(JudgeNodeUnready(in, t0 + 61 * kSecond).verdict == NodeUnreadyVerdict::kTolerate);
  // A silent or disconnected agent: evicted at once.
  in = Unready(&a, t0);
  a.last_seen = t0 - 31 * kSecond;
  CHECK(JudgeNodeUnready(in, t0 + kSecond).verdict == NodeUnreadyVerdict::kEvict);
  a.last_seen = t0;
  a.connected = false;
  CHECK_THAT(JudgeNodeUnready(in, t0).reason, Catch::Contains("disconnected"));
  CHECK(JudgeNodeUnready(Unready(nullptr, 0), t0).verdict == NodeUnreadyVerdict::kEvict);
  // Past the grace even with heartbeats and progress.
  a.connected = true;
  a.last_seen = t0 + 301 * kSecond;
  in = Unready(&a, t0);
  in.step = 40;
  CHECK(JudgeNodeUnready(in, t0 + 300 * kSecond).verdict == NodeUnreadyVerdict::kTolerate);
  j = JudgeNodeUnready(in, t0 + 301 * kSecond);
  CHECK(j.verdict == NodeUnreadyVerdict::kEvict);
  CHECK_THAT(j.reason, Catch::Contains("past the grace of 5m"));
}

TEST_CASE("Node Ready=Unknown with live heartbeats and progress: kept for 4m59s, evicted and quarantined at 5m1s", "[unit]") {
  World w;
  uint64_t step = 10;
  w.Progress(step);
  w.Heartbeat();
  w.Step();
  const std::string victim = w.status.slots[1].pod;
  const std::string machine = w.status.slots[1].machine_id;
  PodObservation* p = w.Pod(victim);
  p->node_unready = true;
  p->reason = "node " + machine + " NotReady (Ready=Unknown)";
  const int64_t start = w.now;
  JobPlan plan = w.Step();
  REQUIRE(w.status.slots[1].node_unready_since == start);
  const bool announced = std::any_of(plan.events.begin(), plan.events.end(),
                                     [](const JobEvent& e) { return e.reason == "NodeUnreachableTolerated"; });
  CHECK(announced);
  const Condition* c = FindCondition(w.status, kNodeUnreachableCondition);
  REQUIRE(c != nullptr);
  CHECK(c->status == ConditionStatus::kTrue);
  CHECK_THAT(c->message, Catch::Contains(machine));

  CHECK_FALSE(w.Train(290, &step));  // t = 4m50s
  w.now = start + 299 * kSecond;     // 4m59s
  w.Progress(++step);
  w.Heartbeat();
  plan = w.Step();
  CHECK(plan.delete_pods.empty());
  CHECK(w.status.incidents.empty());
  CHECK(w.status.evicted.empty());
  CHECK(w.status.slots[1].pod == victim);

  w.now = start + 301 * kSecond;  // 5m1s: past the grace
  w.Progress(++step);
  w.Heartbeat();
  w.Step();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK_THAT(w.status.incidents[0].signal, Catch::Contains("past the grace"));
  w.now += 2 * kSecond;  // the triage window
  w.Heartbeat();
  plan = w.Step();
  CHECK(w.Deleted(plan, victim));
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == machine);
  CHECK(w.status.evicted[0].machine_fault);
  CHECK(w.status.evicted[0].incident_id == w.status.incidents[0].id);
  REQUIRE(plan.quarantine.size() == 1);
  CHECK(plan.quarantine[0].machine_id == machine);
  CHECK(plan.quarantine[0].incident_id == w.status.incidents[0].id);
  CHECK(w.status.slots[1].pod != victim);
  CHECK(w.status.slots[1].node_unready_since == 0);
}

TEST_CASE("Node NotReady and the agent silent too: evicted without waiting for the grace", "[unit]") {
  World w;
  uint64_t step = 10;
  w.Progress(step);
  w.Heartbeat();
  w.Step();
  const std::string victim = w.status.slots[2].pod;
  PodObservation* p = w.Pod(victim);
  p->node_unready = true;
  p->reason = "node " + p->machine_id + " NotReady (Ready=False)";
  w.Agent(victim)->connected = false;
  w.now += kSecond;
  w.Step();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK_THAT(w.status.incidents[0].signal, Catch::Contains("agent is disconnected"));
  w.now += 2 * kSecond;
  const JobPlan plan = w.Step();
  CHECK(w.Deleted(plan, victim));
  CHECK(plan.quarantine.size() == 1);
}

TEST_CASE("A pod lost for a cause not its machine's is replaced and its node never quarantined", "[unit]") {
  for (const char* cause : {"OOMKilled", "deleted by a user"}) {
    INFO(cause);
    World w;
    uint64_t step = 10;
    w.Progress(step);
    w.Heartbeat();
    w.Step();
    const std::string victim = w.status.slots[1].pod;
    const std::string machine = w.status.slots[1].machine_id;
    const std::string standby = w.status.standbys.at(0).pod;
    if (std::string(cause) == "OOMKilled") {
      PodObservation* p = w.Pod(victim);
      p->running = false;
      p->failed = true;
      p->not_machine_fault = true;
      p->reason = "container trainer OOMKilled (exit code 137)";
    } else {
      // Deleted by someone else: the cluster no longer lists it.
      std::erase_if(w.obs.pods, [&](const PodObservation& o) { return o.name == victim; });
    }
    w.now += kSecond / 10;
    w.Step();
    REQUIRE(w.status.incidents.size() == 1);
    w.now += 2 * kSecond;
    JobPlan plan = w.Step();
    CHECK(plan.quarantine.empty());
    CHECK(w.status.slots[1].pod == standby);  // replaced, as for a lost machine
    REQUIRE(w.status.evicted.size() == 1);
    CHECK(w.status.evicted[0].machine_id == machine);
    CHECK_FALSE(w.status.evicted[0].machine_fault);
    CHECK_THAT(w.status.incidents[0].signal, Catch::Contains("not the machine's fault"));
    // Never, in any later round either.
    w.Train(30, &step);
    CHECK(w.quarantined.empty());
  }
}

TEST_CASE("A standby OOMKilled or deleted is replaced without quarantine: one whose node is unready is kept while its agent heartbeats", "[unit]") {
  for (const bool deleted : {false, true}) {
    World w;
    const std::string standby = w.status.standbys.at(0).pod;
    if (deleted) {
      std::erase_if(w.obs.pods, [&](const PodObservation& o) { return o.name == standby; });
    } else {
      PodObservation* p = w.Pod(standby);
      p->running = false;
      p->failed = true;
      p->not_machine_fault = true;
      p->reason = "pod Evicted: The node was low on resource: memory.";
    }
    w.now += kSecond;
    const JobPlan plan = w.Step();
    CHECK(w.Deleted(plan, standby));
    CHECK(plan.quarantine.empty());
    REQUIRE(w.status.evicted.size() == 1);
    CHECK_FALSE(w.status.evicted[0].machine_fault);
  }
  World w;
  const std::string standby = w.status.standbys.at(0).pod;
  PodObservation* p = w.Pod(standby);
  p->node_unready = true;
  p->reason = "node " + p->machine_id + " NotReady (Ready=Unknown)";
  const int64_t start = w.now;
  for (int t = 0; t < 290; t += 10) {
    w.now = start + t * kSecond;
    w.Heartbeat();
    CHECK_FALSE(w.Deleted(w.Step(), standby));
  }
  w.now = start + 301 * kSecond;
  w.Heartbeat();
  const JobPlan plan = w.Step();
  CHECK(w.Deleted(plan, standby));
  CHECK(plan.quarantine.size() == 1);
}

}  // namespace
}  // namespace peregrine
