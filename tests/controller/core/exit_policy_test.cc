// The exit policy (spec.faultTolerance.exitRules): the pure judgement of an attempt's failed
// exits, and what the decision engine does with it (fail, restart in place counted or not,
// the default triage when no rule covers an exit); and startTimeoutSeconds.
#include "controller/core/exit_policy.h"

#include <catch2/catch.hpp>

#include "controller/core/decision_engine.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

ExitRule Rule(ExitAction action, std::vector<ExitCodeRange> codes, std::vector<int> signals = {}) {
  ExitRule r;
  r.action = action;
  r.exit_codes = std::move(codes);
  r.signals = std::move(signals);
  return r;
}

FailedExit Exit(int rank, int code, int signal = 0) { return FailedExit{"p" + std::to_string(rank / 2), RankExit{rank, code, signal, {}}}; }

TEST_CASE("Signals are read by number, name and short name", "[unit]") {
  CHECK(ParseSignal("9") == 9);
  CHECK(ParseSignal("SIGKILL") == 9);
  CHECK(ParseSignal("term") == 15);
  CHECK(ParseSignal("SIGRTMIN") == 34);
  CHECK(ParseSignal("RTMIN+3") == 37);
  CHECK(ParseSignal("SIGRTMAX-1") == 63);
  CHECK_FALSE(ParseSignal("0").has_value());
  CHECK_FALSE(ParseSignal("65").has_value());
  CHECK_FALSE(ParseSignal("SIGNOPE").has_value());
  CHECK_FALSE(ParseSignal("RTMIN+40").has_value());
  CHECK_FALSE(ParseSignal("RTMIN-1").has_value());
  CHECK(SignalName(15) == "SIGTERM");
  CHECK(SignalName(36) == "SIGRTMIN+2");
}

TEST_CASE("An exit is covered by the rule naming its code or its signal", "[unit]") {
  const std::vector<ExitRule> rules = {Rule(ExitAction::kFailJob, {{42, 42}}),
                                       Rule(ExitAction::kIgnore, {{3, 5}}, {15})};
  CHECK(RuleCovering(rules, RankExit{0, 42, 0, {}}) == 0);
  CHECK(RuleCovering(rules, RankExit{0, 4, 0, {}}) == 1);
  CHECK(RuleCovering(rules, RankExit{0, 0, 15, {}}) == 1);
  CHECK_FALSE(RuleCovering(rules, RankExit{0, 6, 0, {}}).has_value());
  CHECK_FALSE(RuleCovering(rules, RankExit{0, 0, 9, {}}).has_value());
  // A code rule never covers a signal death, whatever exit code accompanies it.
  CHECK_FALSE(RuleCovering(rules, RankExit{0, 42, 9, {}}).has_value());
}

TEST_CASE("FailJob outranks RestartInPlace, which outranks Ignore, and the rest are counted", "[unit]") {
  const std::vector<ExitRule> rules = {Rule(ExitAction::kIgnore, {{143, 143}}, {15}),
                                       Rule(ExitAction::kRestartInPlace, {{75, 75}}),
                                       Rule(ExitAction::kFailJob, {{42, 42}})};
  CHECK_FALSE(JudgeExits({}, {Exit(0, 42)}).has_value());
  CHECK_FALSE(JudgeExits(rules, {Exit(0, 1), Exit(1, 0, 6)}).has_value());
  std::optional<ExitJudgement> j = JudgeExits(rules, {Exit(0, 0, 15), Exit(1, 75), Exit(2, 42), Exit(3, 1)});
  REQUIRE(j.has_value());
  CHECK(j->action == ExitAction::kFailJob);
  CHECK(j->rule == 2);
  CHECK(j->exit == "pod p1: rank 2 exited with code 42");
  CHECK(j->covered == 1);
  CHECK(j->other == 3);
  j = JudgeExits(rules, {Exit(0, 0, 15), Exit(5, 75), Exit(6, 75)});
  REQUIRE(j.has_value());
  CHECK(j->action == ExitAction::kRestartInPlace);
  CHECK(j->exit == "pod p2: rank 5 exited with code 75");
  CHECK(j->covered == 2);
  j = JudgeExits(rules, {Exit(3, 1), Exit(4, 0, 15)});
  REQUIRE(j.has_value());
  CHECK(j->action == ExitAction::kIgnore);
  CHECK(j->exit == "pod p2: rank 4 killed by SIGTERM");
}

// A running demo job (4 machines x 2 GPUs) with `rules`, at step 10.
struct ExitWorld : testing::PlanWorld {
  explicit ExitWorld(std::vector<ExitRule> rules) : PlanWorld(testing::DemoJob()) {
    job.spec.fault_tolerance.exit_rules = std::move(rules);
    Step();
    Step();
    Progress(10);
    Step();
  }
  // Every rank of slot `slot` exits: the first with `code`/`signal`, the other with code 1.
  void Exits(int slot, int code, int signal = 0) {
    AgentObservation* a = Agent(status.slots[slot].pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{2 * slot, code, signal, {"boom"}}, RankExit{2 * slot + 1, 1, 0, {"NCCL error"}}};
  }
  // Past the triage window; the plan of the decision.
  JobPlan Decide() {
    Step();
    now += 2 * kSecond;
    return Step();
  }
};

bool HasDiagnostic(const JobPlan& plan) {
  for (const CommandToSend& c : plan.commands) {
    if (c.kind == CommandKind::kRunDiagnostic) return true;
  }
  return false;
}

TEST_CASE("An exit a FailJob rule covers fails the job, naming the rule and the exit", "[unit]") {
  ExitWorld w({Rule(ExitAction::kFailJob, {{42, 42}})});
  w.Exits(1, 42);
  w.Decide();
  CHECK(w.status.phase == JobPhase::kFailed);
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].decision.find("rank 2 exited with code 42, which exitRules[0] (FailJob) covers") !=
        std::string::npos);
  CHECK(w.status.attempt == 1);
}

TEST_CASE("An exit a RestartInPlace rule covers restarts in place at once without diagnosis", "[unit]") {
  ExitWorld w({Rule(ExitAction::kRestartInPlace, {{70, 80}})});
  w.Exits(2, 75);
  const JobPlan plan = w.Decide();
  CHECK_FALSE(HasDiagnostic(plan));
  CHECK_FALSE(w.status.diagnosis.has_value());
  CHECK(w.status.phase != JobPhase::kFailed);
  CHECK(w.status.attempt == 2);
  CHECK(w.status.evicted.empty());
  CHECK(w.status.recoveries == 1);
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].decision.find("exitRules[0] (RestartInPlace)") != std::string::npos);
}

TEST_CASE("An exit an Ignore rule covers restarts in place and is not counted against maxRecoveries", "[unit]") {
  ExitWorld w({Rule(ExitAction::kIgnore, {}, {15})});
  w.job.spec.fault_tolerance.max_recoveries = 0;
  w.Exits(0, 0, 15);
  w.Decide();
  CHECK(w.status.phase != JobPhase::kFailed);
  CHECK(w.status.attempt == 2);
  CHECK(w.status.recoveries == 0);
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].decision.find("not counted against maxRecoveries") != std::string::npos);
}

TEST_CASE("Exits no rule covers get the default triage", "[unit]") {
  // The same crash as without rules: no culprit and no recognised user-code error, so
  // training stops for the stop-time diagnosis.
  for (const std::vector<ExitRule>& rules : {std::vector<ExitRule>{}, std::vector<ExitRule>{Rule(ExitAction::kFailJob, {{42, 42}})}}) {
    ExitWorld w(rules);
    w.Exits(1, 1);
    w.Decide();
    CHECK(w.status.phase != JobPhase::kFailed);
    REQUIRE(w.status.incidents.size() == 1);
    REQUIRE_FALSE(w.status.incidents[0].actions.empty());
    CHECK(w.status.incidents[0].actions[0].find("stop-time diagnosis") != std::string::npos);
    CHECK(w.status.diagnosis.has_value());
  }
}

TEST_CASE("An attempt that makes no step within startTimeoutSeconds fails like a crash", "[unit]") {
  testing::PlanWorld w(testing::DemoJob());
  w.job.spec.fault_tolerance.start_timeout_seconds = 600;
  w.Step();
  w.Step();
  REQUIRE(w.status.attempt == 1);
  w.now += 599 * kSecond;
  w.Step();
  CHECK(w.status.incidents.empty());
  w.now += 2 * kSecond;
  w.Step();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].signal.find("made no step in 600 s (startTimeoutSeconds)") != std::string::npos);
}

}  // namespace
}  // namespace peregrine
