// The simulated cluster: pods on machines, agents converging, faults seen after detection,
// quarantine and return.
#include "fleetsim/sim_cluster.h"

#include <catch2/catch.hpp>

#include <vector>

#include "absl/strings/str_format.h"

#include "controller/core/decision_engine.h"

namespace peregrine::fleetsim {
namespace {

constexpr int64_t kS = kSimNanosPerSecond;

struct World {
  explicit World(std::vector<FaultEvent> f = {}, int fleet = 3) : faults(std::move(f)) {
    options.job_machines = 2;
    options.fleet_machines = fleet;
    options.gpus_per_machine = 8;
    options.checkpoint_interval_steps = 6;
    cluster = std::make_unique<SimCluster>(options, faults, &queue);
  }
  // Runs every event up to `until`.
  void RunUntil(int64_t until) {
    while (!queue.Empty() && queue.NextAt() <= until) {
      const SimEvent e = queue.Pop();
      cluster->OnEvent(e, e.at);
    }
  }
  const PodObservation* Pod(const std::string& name) {
    for (const PodObservation& p : cluster->Observe(0, 0, 0, 0).pods) {
      if (p.name == name) return &p;
    }
    return nullptr;
  }
  std::vector<FaultEvent> faults;
  SimClusterOptions options;
  EventQueue queue;
  std::unique_ptr<SimCluster> cluster;
};

JobPlan CreatePods(const std::vector<std::string>& names, bool standby_last) {
  JobPlan plan;
  for (size_t i = 0; i < names.size(); ++i) {
    const bool standby = standby_last && i + 1 == names.size();
    PodToCreate create;
    create.name = names[i];
    create.role = standby ? PodRole::kStandby : PodRole::kActive;
    create.slot = standby ? -1 : static_cast<int>(i);
    plan.create_pods.push_back(create);
    plan.desired_agents[names[i]] = DesiredAgent{standby, {}};
  }
  return plan;
}

TEST_CASE("pods take the lowest free machines, run after pod_start_s, and wait when none is free", "[unit]") {
  World w;
  JobPlan plan = CreatePods({"a", "b", "s", "extra"}, false);
  w.cluster->Apply(&plan, 0);
  CHECK(w.Pod("a")->machine_id == "m0");
  CHECK(w.Pod("s")->machine_id == "m2");
  CHECK(w.Pod("extra")->machine_id.empty());
  CHECK(w.Pod("extra")->waiting_reason.find("Unschedulable") != std::string::npos);
  CHECK(w.cluster->MachinesHeld() == 3);
  w.RunUntil(299 * kS);
  CHECK_FALSE(w.Pod("a")->running);
  w.RunUntil(300 * kS);
  CHECK(w.Pod("a")->running);
  CHECK(w.cluster->Observe(300 * kS, 0, 0, 0).agents.size() == 3);
  // Deleting a pod frees its machine for the waiting one.
  JobPlan del;
  del.delete_pods.push_back(PodToDelete{"s", "test"});
  w.cluster->Apply(&del, 400 * kS);
  CHECK(w.Pod("extra")->machine_id == "m2");
  CHECK(w.cluster->MachinesHeld() == 3);
}

TEST_CASE("a fail-stop fails the pod and disconnects its agent only after the detection latency", "[unit]") {
  World w({FaultEvent{1, 1000 * kS, 5000 * kS, FaultKind::kHost, 0}});
  JobPlan plan = CreatePods({"a", "b", "s"}, true);
  w.cluster->Apply(&plan, 0);
  w.RunUntil(1000 * kS);
  CHECK(w.cluster->MachineFaulty("m1", 1000 * kS));
  CHECK_FALSE(w.Pod("b")->failed);  // not seen yet
  w.RunUntil(1030 * kS);
  CHECK(w.Pod("b")->failed);
  CHECK(w.Pod("b")->reason.find("host fault") != std::string::npos);
  CHECK(w.cluster->fail_stops_hitting_job() == 1);
  // Evicted and quarantined: the machine is back only after the repair.
  JobPlan evict;
  evict.delete_pods.push_back(PodToDelete{"b", "evicted"});
  evict.quarantine.push_back(QuarantineRequest{"m1", "host fault", 1});
  evict.status.evicted.push_back(Eviction{"m1", "b", "host fault", 0});
  w.cluster->Apply(&evict, 1031 * kS);
  CHECK(evict.status.evicted[0].quarantined);
  CHECK(w.cluster->FreeMachines() == 0);
  w.RunUntil(4999 * kS);
  CHECK(w.cluster->FreeMachines() == 0);
  w.RunUntil(5000 * kS);
  CHECK(w.cluster->FreeMachines() == 1);
  CHECK_FALSE(w.cluster->MachineFaulty("m1", 5000 * kS));
}

TEST_CASE("agents converge to their attempt after restart_s plus the restore, standbys after standby_swap_s", "[unit]") {
  World w;
  JobPlan plan = CreatePods({"a", "b", "s"}, true);
  w.cluster->Apply(&plan, 0);
  w.RunUntil(300 * kS);
  JobPlan restart;
  restart.status.attempt = 2;
  restart.status.resume_step = 60;
  restart.status.slots = {SlotStatus{0, "a", "m0", true}, SlotStatus{1, "s", "m2", true}};
  for (const auto& [pod, slot, kind] : {std::tuple{"a", 0, CommandKind::kRestartInPlace},
                                        std::tuple{"s", 1, CommandKind::kActivate}}) {
    CommandToSend c;
    c.pod = pod;
    c.id = std::string(pod) + "/attempt-2";
    c.kind = kind;
    c.assignment.slot = slot;
    c.assignment.attempt = 2;
    c.assignment.resume_step = 60;
    restart.commands.push_back(c);
  }
  w.cluster->Apply(&restart, 300 * kS);
  const CostModel costs;
  w.RunUntil(300 * kS + SecondsToNs(costs.standby_swap_s + costs.memory_restore_s));
  CHECK_FALSE(w.cluster->SlotsReady(restart.status, 350 * kS));
  const JobObservation& mid = w.cluster->Observe(350 * kS, 2, 60, 10);
  for (const AgentObservation& a : mid.agents) {
    if (a.pod == "s") {
      CHECK(a.attempt == 2);
      CHECK_FALSE(a.registered_as_standby);
      CHECK(a.pending_command_ids.empty());
    }
    if (a.pod == "a") CHECK(a.pending_command_ids.size() == 1);
  }
  w.RunUntil(300 * kS + SecondsToNs(costs.restart_s + costs.memory_restore_s));
  CHECK(w.cluster->SlotsReady(restart.status, 420 * kS));
  // Steps and checkpoints are reported for the running attempt.
  const JobObservation& obs = w.cluster->Observe(420 * kS, 2, 75, 10);
  for (const AgentObservation& a : obs.agents) {
    if (a.pod != "a") continue;
    CHECK(a.rank_steps.at(0) == 75);
    REQUIRE(a.checkpoint.has_value());
    CHECK(a.checkpoint->stored_steps == std::vector<uint64_t>{72});
    CHECK(a.command_results.at("a/attempt-2").ok);
  }
}

TEST_CASE("an agent keeps its 64 newest command results: the oldest go first, whatever their ids", "[unit]") {
  World w;
  JobPlan plan = CreatePods({"a", "b", "s"}, true);
  w.cluster->Apply(&plan, 0);
  w.RunUntil(300 * kS);
  auto pause = [](const std::string& id) {
    CommandToSend c;
    c.pod = "a";
    c.id = id;
    c.kind = CommandKind::kPause;
    return c;
  };
  JobPlan many;
  for (int i = 0; i < 70; ++i) many.commands.push_back(pause(absl::StrFormat("z-%02d", i)));
  w.cluster->Apply(&many, 300 * kS);
  w.RunUntil(400 * kS);
  // The newest result, with an id that sorts before every other one (as a fail-slow
  // re-confirmation's "c<start>-" ids do).
  JobPlan last;
  last.commands.push_back(pause("a-newest"));
  w.cluster->Apply(&last, 400 * kS);
  w.RunUntil(500 * kS);
  const JobObservation& obs = w.cluster->Observe(500 * kS, 0, 0, 0);
  const AgentObservation* a = nullptr;
  for (const AgentObservation& agent : obs.agents) {
    if (agent.pod == "a") a = &agent;
  }
  REQUIRE(a != nullptr);
  CHECK(a->command_results.size() == 64);
  CHECK(a->command_results.count("a-newest") == 1);
  for (int i = 0; i < 7; ++i) CHECK(a->command_results.count(absl::StrFormat("z-%02d", i)) == 0);
  for (int i = 7; i < 70; ++i) CHECK(a->command_results.count(absl::StrFormat("z-%02d", i)) == 1);
}

}  // namespace
}  // namespace peregrine::fleetsim
