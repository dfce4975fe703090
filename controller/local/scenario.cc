#include "controller/local/scenario.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/code_update.h"
#include "controller/core/recovery_policy.h"

namespace peregrine {

namespace {

constexpr const char* kScenarioNames[] = {
    "kill-machine",        "crash",
    "crash-once",          "code-update-rollback",
    "nan",                 "sdc",
    "xid",                 "nic-flap",
    "nic-flap-twice",      "failslow-slow-rank",
    "failslow-congested-link", "failslow-rank-and-link",
    "failslow-two-slow-ranks", "failslow-jitter",
    "hang-pp-stage"};

ScenarioStep AtStep(std::vector<FaultRequest> faults) {
  ScenarioStep step;
  step.faults = std::move(faults);
  return step;
}

// A step of `faults` that waits for `trigger` instead of the scenario's step.
ScenarioStep When(ScenarioStep::Trigger trigger, std::vector<FaultRequest> faults) {
  ScenarioStep step = AtStep(std::move(faults));
  step.trigger = trigger;
  return step;
}

// A fault of `kind` on the machine in `slot`, GPU `local_rank` (-1: every GPU, or none).
FaultRequest Fault(const char* kind, int slot, int local_rank = -1) {
  FaultRequest fault;
  fault.kind = kind;
  fault.slot = slot;
  fault.local_rank = local_rank;
  return fault;
}

// A GPU that computes 3x slower.
FaultRequest SlowGpu(int slot, int local_rank) {
  FaultRequest slow = Fault("slow", slot, local_rank);
  slow.factor = 3;
  return slow;
}

// 20 ms per message between the machines in slot 0 and slot 1 (the machines of DP groups 0
// and 1 in the demo layout).
FaultRequest CongestedLink(int machines) {
  FaultRequest link = Fault("link", 0);
  link.peer_slot = machines > 1 ? 1 : 0;
  link.delay_us = 20000;
  return link;
}

// "scenario <name> step <n>: <what>: <why>", with the status' code.
absl::Status StepError(const Scenario& scenario, size_t step_index, const std::string& what,
                       const absl::Status& status) {
  return absl::Status(status.code(), absl::StrFormat("scenario %s step %d: %s: %s", scenario.name, step_index + 1,
                                                     what, status.message()));
}

}  // namespace

std::string ScenarioNames() { return absl::StrJoin(kScenarioNames, ", "); }

absl::StatusOr<Scenario> ScenarioByName(const std::string& name, const TrainingJob& job) {
  const int machines = job.spec.machines;
  Scenario s;
  s.name = name;
  if (name == "kill-machine") {
    s.steps.push_back(AtStep({Fault("kill", machines > 2 ? 2 : machines - 1)}));
    return s;
  }
  if (name == "failslow-slow-rank") {  // one GPU computes 3x slower: detected, localized, then mitigated (Auto)
    s.steps.push_back(AtStep({SlowGpu(machines > 1 ? 1 : 0, 0)}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-congested-link") {  // 20 ms per message between the machines of DP groups 0 and 1
    s.steps.push_back(AtStep({CongestedLink(machines)}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-rank-and-link") {  // a 3x slower GPU and a congested link at once: both named
    s.steps.push_back(AtStep({SlowGpu(machines > 2 ? 2 : 0, 1), CongestedLink(machines)}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-two-slow-ranks") {  // two GPUs on different machines, sharing no group, 3x slower
    s.steps.push_back(AtStep({SlowGpu(machines > 1 ? 1 : 0, 1), SlowGpu(machines > 2 ? 2 : 0, 0)}));
    s.at_step = 60;
    return s;
  }
  if (name == "failslow-jitter") {  // every GPU's compute +-5% per iteration: no fail-slow may be reported
    std::vector<FaultRequest> all;
    for (int m = 0; m < machines; ++m) {
      FaultRequest jitter = Fault("jitter", m);
      jitter.fraction = 0.05;
      all.push_back(jitter);
    }
    s.steps.push_back(AtStep(all));
    s.at_step = 10;
    return s;
  }
  if (name == "xid") {  // a fatal Xid (79, GPU fallen off the bus) on one machine's GPU 0
    FaultRequest xid = Fault("xid", machines > 1 ? 1 : 0, 0);
    xid.xid = 79;
    s.steps.push_back(AtStep({xid}));
    return s;
  }
  if (name == "nic-flap" || name == "nic-flap-twice") {
    // One NIC flap is tolerated; a second flap episode of the same NIC within
    // networkAlarmWindowSeconds evicts the machine.
    const FaultRequest flap = Fault("nic-flap", machines > 2 ? 2 : machines - 1);
    s.steps.push_back(AtStep({flap}));
    if (name == "nic-flap-twice") s.steps.push_back(When(ScenarioStep::Trigger::kNetworkAlarmEnded, {flap}));
    return s;
  }
  // One machine of the last pipeline stage hangs in its compute (demo layout: slot 2 holds
  // stage 1 of dp 0): its stage-0 peers wait for gradients in recv, the other pipeline waits
  // in the DP all-reduce, whatever compute the hang hits; stack aggregation evicts the pipeline group.
  if (name == "hang-pp-stage") {
    s.steps.push_back(AtStep({Fault("hang", machines > 2 ? 2 : machines - 1)}));
    return s;
  }
  if (name == "crash" || name == "crash-once") {
    const FaultRequest crash = Fault("crash", machines > 1 ? 1 : 0, 0);
    s.steps.push_back(AtStep({crash}));
    if (name == "crash-once") {  // one-off: cleared once the incident opened
      FaultRequest clear = crash;
      clear.kind = "clear";
      s.steps.push_back(When(ScenarioStep::Trigger::kIncidentOpened, {clear}));
    }
    return s;
  }
  // An urgent update to a broken revision: the job's own command with a flag it does not
  // know, so every rank exits at start-up (sim-trainer and argparse programs alike).
  if (name == "code-update-rollback") {
    CodeUpdateRequest broken;
    broken.revision = absl::StrCat(job.spec.code.revision.empty() ? "v1" : job.spec.code.revision, "-broken");
    broken.command = job.spec.code.command;
    broken.command->push_back("--no-such-flag");
    broken.urgent = true;
    ScenarioStep step;
    step.code_update = broken;
    s.steps.push_back(step);
    return s;
  }
  if (name == "nan") {  // one machine's GPUs contribute NaN to every collective
    s.steps.push_back(AtStep({Fault("nan", machines > 1 ? 1 : 0)}));
    return s;
  }
  if (name == "sdc") {  // one machine's backward kernel silently corrupts gradients: replay finds it
    s.steps.push_back(AtStep({Fault("sdc", machines > 1 ? 1 : 0)}));
    return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--scenario: unknown scenario '", name, "' (known: ", ScenarioNames(), ")"));
}

absl::StatusOr<ScenarioRun> RunScenario(LocalMode& mode, const std::optional<Scenario>& scenario,
                                        const ScenarioRunOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  JobController& controller = mode.controller();
  ScenarioRun run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  size_t next = 0;
  uint64_t printed_step = 0;
  // Trigger state: incidents opened so far at the previous step; the previous step's
  // machine and whether its agent was seen reporting a network alarm since.
  uint64_t incident_id_at_step = 0;
  std::string step_machine;
  bool alarm_seen = false;
  auto network_alarm_active = [&]() {
    for (const AgentObservation& a : mode.ObserveAgents()) {
      if (a.machine_id != step_machine || !a.connected) continue;
      for (const InspectionObservation& o : a.inspections) {
        if (IsNetworkAlarm(o)) return true;
      }
    }
    return false;
  };
  auto trigger_holds = [&](const ScenarioStep& step, const JobStatus& st) {
    switch (step.trigger) {
      case ScenarioStep::Trigger::kAtStep:
        return st.phase == JobPhase::kRunning && st.last_completed_step >= scenario->at_step &&
               (!step.code_update ||
                (!st.version_history.empty() && st.version_history.back().outcome == VersionOutcome::kHealthy));
      case ScenarioStep::Trigger::kIncidentOpened:
        return st.next_incident_id > incident_id_at_step;
      case ScenarioStep::Trigger::kNetworkAlarmEnded: {
        const bool recorded = std::any_of(st.network_alarms.begin(), st.network_alarms.end(),
                                          [&](const NetworkAlarmRecord& r) { return r.machine_id == step_machine; });
        const bool active = network_alarm_active();
        alarm_seen = alarm_seen || active;
        return recorded && alarm_seen && !active && st.phase == JobPhase::kRunning;
      }
    }
    return false;
  };
  while (true) {
    run.status = controller.Snapshot();
    const JobStatus& st = run.status;
    if (st.last_completed_step >= printed_step + 20 || (st.last_completed_step > 0 && printed_step == 0)) {
      printed_step = st.last_completed_step;
      say(absl::StrFormat("step %d  phase %s  attempt %d  standby %d/%d  ETTR %.3f", st.last_completed_step,
                          JobPhaseName(st.phase), st.attempt, st.standby_ready, st.standby_desired, st.ettr));
    }
    if (scenario && next < scenario->steps.size() && trigger_holds(scenario->steps[next], st)) {
      const ScenarioStep& step = scenario->steps[next];
      std::vector<std::string> done;
      std::string machine;
      for (const FaultRequest& f : step.faults) {
        if (machine.empty()) {
          machine = f.slot >= 0 && f.slot < static_cast<int>(st.slots.size()) ? st.slots[f.slot].machine_id : f.machine;
        }
        auto result = mode.Inject(f);
        if (!result.ok()) return StepError(*scenario, next, absl::StrCat("inject ", f.kind), result.status());
        done.push_back(*result);
      }
      if (step.code_update) {
        auto accepted = controller.UpdateJob(ApplyCodeUpdate(controller.job(), *step.code_update));
        if (!accepted.ok()) return StepError(*scenario, next, "code update", accepted.status());
        done.push_back(absl::StrFormat("urgent code update to revision %s (generation %d)",
                                       step.code_update->revision, *accepted));
        controller.Note(absl::StrCat("Scenario: ", done.back()));
      }
      const std::string description = absl::StrJoin(done, "; ");
      say(absl::StrFormat("scenario %s step %d at step %d: %s", scenario->name, next + 1, st.last_completed_step,
                          description));
      run.steps.push_back(ScenarioStepRecord{st, description});
      incident_id_at_step = st.next_incident_id;
      step_machine = machine;
      alarm_seen = false;
      ++next;
      continue;
    }
    if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) {
      run.finished = true;
      return run;
    }
    if (options.stop_requested && options.stop_requested()) return run;
    if (std::chrono::steady_clock::now() > deadline) return run;
    // A network-alarm trigger watches the agents, not the status: look again soon.
    const bool watching_agents = scenario && next < scenario->steps.size() &&
                                 scenario->steps[next].trigger == ScenarioStep::Trigger::kNetworkAlarmEnded;
    const uint64_t step_now = st.last_completed_step;
    const JobPhase phase_now = st.phase;
    const uint64_t incidents_now = st.next_incident_id;
    controller.WaitFor(
        [&](const JobStatus& s) {
          return s.last_completed_step != step_now || s.phase != phase_now || s.next_incident_id != incidents_now;
        },
        watching_agents ? 100 : 250);
  }
}

}  // namespace peregrine
