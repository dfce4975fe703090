#include "tests/testing/plan_world.h"

#include <catch2/catch.hpp>

#include <algorithm>

namespace peregrine::testing {

PlanWorld::PlanWorld(TrainingJob j, std::string machine_prefix)
    : job(std::move(j)), machine_prefix_(std::move(machine_prefix)) {}

PodObservation* PlanWorld::Pod(const std::string& name) {
  for (auto& p : obs.pods) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

AgentObservation* PlanWorld::Agent(const std::string& pod) {
  for (auto& a : obs.agents) {
    if (a.pod == pod) return &a;
  }
  return nullptr;
}

JobPlan PlanWorld::Step() {
  obs.candidate_master_port = port_base + (port_per_attempt ? static_cast<uint32_t>(status.attempt) : 0);
  JobPlan plan = DecideJob(job, status, obs, now);
  status = plan.status;
  for (const QuarantineRequest& q : plan.quarantine) {  // the cluster quarantines at once
    quarantined.push_back(q.machine_id);
    for (Eviction& e : status.evicted) {
      if (e.machine_id == q.machine_id) e.quarantined = true;
    }
  }
  for (const PodToCreate& c : plan.create_pods) {
    if (Pod(c.name)) continue;
    const std::string machine = machine_prefix_ + std::to_string(next_machine++);
    obs.pods.push_back(PodObservation{c.name, machine, true, false, "", "", 0, false, false, {}, ""});
    obs.pods.back().image = c.image;  // the pod spec's image, as the cluster would show it
    AgentObservation a;
    a.pod = c.name;
    a.machine_id = machine;
    a.connected = true;
    a.registered_as_standby = c.role == PodRole::kStandby;
    a.self_check_passed = true;
    a.phase = AgentTrainingPhase::kIdle;
    a.last_seen = now;  // its registration is its first message
    obs.agents.push_back(a);
  }
  for (const PodToDelete& d : plan.delete_pods) {
    std::erase_if(obs.pods, [&](const PodObservation& p) { return p.name == d.name; });
    std::erase_if(obs.agents, [&](const AgentObservation& a) { return a.pod == d.name; });
  }
  OnPlan(plan);
  for (const CommandToSend& c : plan.commands) {
    AgentObservation* a = Agent(c.pod);
    REQUIRE(a != nullptr);
    if (OnCommand(c, *a)) continue;
    a->last_seen = now;  // its answer is a message
    if (c.kind == CommandKind::kStop) {
      a->phase = AgentTrainingPhase::kIdle;
      a->command_results[c.id] = CommandResultObservation{c.id, true, 0, "", now, std::nullopt, false, {}};
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

void PlanWorld::Progress(uint64_t step) {
  for (const SlotStatus& slot : status.slots) {
    AgentObservation* a = Agent(slot.pod);
    if (!a) continue;
    const int gpus = job.spec.gpus_per_machine;
    for (int r = slot.index * gpus; r < (slot.index + 1) * gpus; ++r) a->rank_steps[r] = step;
    a->mean_iteration_seconds = 0.1;
  }
}

}  // namespace peregrine::testing
