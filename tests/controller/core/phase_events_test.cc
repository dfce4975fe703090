// Every TrainingJob phase transition the decision engine makes is announced by one
// Kubernetes Event with a CamelCase reason: Pending -> Running ("Started"), Running ->
// Recovering (the incident kind, Warning), Recovering -> Running ("Recovered", or
// "SignalNotConfirmed" when the triage found nothing to act on), Running ->
// Succeeded ("Succeeded"), and -> Failed ("Failed", Warning), whether a FailJob exit rule
// or maxRecoveries ends it. A job is walked through them with PlanWorld; each round that
// changes the phase must carry exactly one event with the transition's reason.
#include <catch2/catch.hpp>

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "controller/core/decision_engine.h"
#include "controller/core/job_state.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

struct Transition {
  JobPhase from;
  JobPhase to;
  std::vector<JobEvent> events;
};

// The reason that announces a transition; "" for one that has none.
std::string ExpectedReason(JobPhase from, JobPhase to, const JobStatus& st) {
  if (from == JobPhase::kPending && to == JobPhase::kRunning) return "Started";
  if (from == JobPhase::kRunning && to == JobPhase::kRecovering) {
    return st.incidents.empty() ? "" : ToString(st.incidents.back().kind);
  }
  if (from == JobPhase::kRecovering && to == JobPhase::kRunning) {
    const bool unconfirmed = !st.incidents.empty() && st.incidents.back().decision == "signal not confirmed: no action";
    return unconfirmed ? "SignalNotConfirmed" : "Recovered";
  }
  if (to == JobPhase::kSucceeded) return "Succeeded";
  if (to == JobPhase::kFailed) return "Failed";
  return "";
}

// PlanWorld recording every round that changed the phase, with that round's events.
struct PhaseWorld : testing::PlanWorld {
  explicit PhaseWorld(std::vector<ExitRule> rules, int max_recoveries = 3) : PlanWorld(testing::DemoJob()) {
    job.spec.fault_tolerance.exit_rules = std::move(rules);
    job.spec.fault_tolerance.max_recoveries = max_recoveries;
  }
  JobPlan Round() {
    const JobPhase from = status.phase;
    JobPlan plan = Step();
    if (plan.status.phase != from) {
      transitions.push_back(Transition{from, plan.status.phase, plan.events});
      // Each transition's event is announced once, with its reason and the right type.
      const std::string reason = ExpectedReason(from, plan.status.phase, plan.status);
      INFO(JobPhaseName(from) << " -> " << JobPhaseName(plan.status.phase));
      REQUIRE_FALSE(reason.empty());
      int n = 0;
      for (const JobEvent& e : plan.events) {
        if (e.reason != reason) continue;
        ++n;
        CHECK_FALSE(e.message.empty());
        const bool warning = plan.status.phase == JobPhase::kFailed || plan.status.phase == JobPhase::kRecovering;
        CHECK(e.type == (warning ? JobEventType::kWarning : JobEventType::kNormal));
        CHECK(std::isupper(static_cast<unsigned char>(e.reason[0])));
        CHECK(e.reason.find_first_of(" _-") == std::string::npos);  // CamelCase
      }
      CHECK(n == 1);
    }
    return plan;
  }
  // Rounds until the phase is `want` (at most `rounds`), 1 s apart.
  void RunUntil(JobPhase want, int rounds = 20) {
    for (int i = 0; i < rounds && status.phase != want; ++i) {
      Round();
      now += kSecond;
    }
    REQUIRE(JobPhaseName(status.phase) == JobPhaseName(want));
  }
  // Every rank of slot `slot` exits with `code`.
  void Exits(int slot, int code) {
    AgentObservation* a = Agent(status.slots[slot].pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{2 * slot, code, 0, {"boom"}}, RankExit{2 * slot + 1, 1, 0, {"NCCL error"}}};
  }
  std::vector<std::pair<JobPhase, JobPhase>> Path() const {
    std::vector<std::pair<JobPhase, JobPhase>> path;
    for (const Transition& t : transitions) path.emplace_back(t.from, t.to);
    return path;
  }
  std::vector<Transition> transitions;
};

ExitRule Rule(ExitAction action, int code) {
  ExitRule r;
  r.action = action;
  r.exit_codes = {{code, code}};
  return r;
}

using P = JobPhase;

TEST_CASE("Pending -> Running -> Recovering -> Running -> Succeeded: one event per transition", "[unit]") {
  PhaseWorld w({Rule(ExitAction::kRestartInPlace, 75)});
  CHECK(w.status.phase == P::kPending);
  w.RunUntil(P::kRunning);
  w.Progress(10);
  w.Round();
  w.Exits(1, 75);  // a crash the exit rules restart in place
  w.RunUntil(P::kRecovering);
  CHECK(w.status.incidents.back().kind == IncidentKind::kProcessCrash);
  // The restart is decided past the triage window; training resumes past the resume step.
  for (int i = 0; i < 10 && w.status.attempt < 2; ++i) {
    w.now += 2 * kSecond;
    w.Round();
  }
  REQUIRE(w.status.attempt == 2);
  w.Progress(w.status.resume_step + 5);
  w.RunUntil(P::kRunning);
  // Every rank of the attempt finishes.
  for (const SlotStatus& s : w.status.slots) w.Agent(s.pod)->phase = AgentTrainingPhase::kSucceeded;
  w.RunUntil(P::kSucceeded);
  CHECK(w.Path() == std::vector<std::pair<JobPhase, JobPhase>>{{P::kPending, P::kRunning},
                                                               {P::kRunning, P::kRecovering},
                                                               {P::kRecovering, P::kRunning},
                                                               {P::kRunning, P::kSucceeded}});
  // Rounds after the end change nothing and announce nothing more.
  w.Round();
  CHECK(w.transitions.size() == 4);
}

TEST_CASE("A FailJob exit rule: Running -> Recovering -> Failed, each announced once", "[unit]") {
  PhaseWorld w({Rule(ExitAction::kFailJob, 42)});
  w.RunUntil(P::kRunning);
  w.Progress(10);
  w.Round();
  w.Exits(0, 42);
  w.RunUntil(P::kRecovering);
  w.now += 2 * kSecond;
  w.RunUntil(P::kFailed);
  CHECK(w.Path() == std::vector<std::pair<JobPhase, JobPhase>>{
                        {P::kPending, P::kRunning}, {P::kRunning, P::kRecovering}, {P::kRecovering, P::kFailed}});
}

TEST_CASE("Past maxRecoveries: Recovering -> Failed is announced once", "[unit]") {
  PhaseWorld w({Rule(ExitAction::kRestartInPlace, 75)}, /*max_recoveries=*/0);
  w.RunUntil(P::kRunning);
  w.Progress(10);
  w.Round();
  w.Exits(2, 75);
  w.RunUntil(P::kRecovering);
  w.now += 2 * kSecond;
  w.RunUntil(P::kFailed);
  CHECK(w.status.recoveries == 1);
  CHECK(w.Path() == std::vector<std::pair<JobPhase, JobPhase>>{
                        {P::kPending, P::kRunning}, {P::kRunning, P::kRecovering}, {P::kRecovering, P::kFailed}});
}

TEST_CASE("A signal gone by the end of the triage window: Recovering -> Running is announced once", "[unit]") {
  PhaseWorld w({});
  w.RunUntil(P::kRunning);
  w.Progress(10);
  w.Round();
  w.Exits(1, 1);
  w.RunUntil(P::kRecovering);
  // Within the window the agent reports its training running again (the exit was stale).
  AgentObservation* a = w.Agent(w.status.slots[1].pod);
  a->phase = AgentTrainingPhase::kRunning;
  a->exits.clear();
  w.now += 2 * kSecond;
  w.RunUntil(P::kRunning);
  CHECK(w.status.incidents.back().decision == "signal not confirmed: no action");
  CHECK(w.Path() == std::vector<std::pair<JobPhase, JobPhase>>{
                        {P::kPending, P::kRunning}, {P::kRunning, P::kRecovering}, {P::kRecovering, P::kRunning}});
}

}  // namespace
}  // namespace peregrine
