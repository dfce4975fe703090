// PlanWorld: a stand-in for the executor and the cluster in decision tests. Step() calls
// DecideJob on the world's job, status and observations at the world's time and applies
// the plan the way the executor does: the new status is kept, evicted machines are
// quarantined at once, every created pod appears running (with the image it was created
// with) on a machine of its own with a
// connected, self-checked agent, deleted pods and their agents disappear, and agents
// follow their commands (a stop leaves the agent idle with a result; an assignment makes it
// run that attempt). An agent's last_seen is the time of its registration or of the last
// command it followed; tests that model heartbeats set it themselves. Suites extend it by overriding OnPlan / OnCommand for the commands
// they model (diagnostics, stack captures, ...). Single-threaded; owned by one test.
#ifndef PEREGRINE_TESTS_TESTING_PLAN_WORLD_H_
#define PEREGRINE_TESTS_TESTING_PLAN_WORLD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "controller/core/decision_engine.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine::testing {

class PlanWorld {
 public:
  explicit PlanWorld(TrainingJob job, std::string machine_prefix = "local-");
  virtual ~PlanWorld() = default;

  // Decides once and applies the plan; returns it.
  JobPlan Step();
  // Every active rank reports `step` completed (iteration time 0.1 s).
  void Progress(uint64_t step);
  PodObservation* Pod(const std::string& name);
  AgentObservation* Agent(const std::string& pod);

  TrainingJob job;
  JobStatus status;
  JobObservation obs;
  int64_t now = 1000 * 1'000'000'000LL;
  // The rendezvous port a round offers: port_base, plus the attempt when port_per_attempt.
  uint32_t port_base = 30000;
  bool port_per_attempt = true;
  int next_machine = 0;
  std::vector<std::string> quarantined;  // machines quarantined, in order

 protected:
  // Called with each plan before its commands are applied.
  virtual void OnPlan(const JobPlan& plan) { (void)plan; }
  // Applies one command to its agent; false leaves it to the default behaviour.
  virtual bool OnCommand(const CommandToSend& command, AgentObservation& agent) {
    (void)command;
    (void)agent;
    return false;
  }

 private:
  const std::string machine_prefix_;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_PLAN_WORLD_H_
