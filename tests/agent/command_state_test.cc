// CommandState: convergence, each command's transitions, idempotency by id,
// hot-update deferral, pause/resume, the trap and shutdown, driven through its
// public interface by a loop that obeys its actions at once.
#include "agent/command_state.h"

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

using Kind = AgentCommand::Kind;
const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TrainingAssignment Assignment(uint64_t attempt, uint32_t machine_index = 0, uint32_t gpus = 2) {
  TrainingAssignment a;
  a.machine_index = machine_index;
  a.attempt = attempt;
  a.world_size = 4;
  a.layout = AssignedLayout{2, 1, 2, gpus};
  for (uint32_t i = 0; i < gpus; ++i) a.ranks.push_back(AssignedRank{machine_index * gpus + i, i, i, 0, machine_index});
  a.code.command = {"train", "--steps=10"};
  a.code.env = {{"A", "1"}};
  return a;
}

// The event loop's side, reduced to what the state machine sees: a supervisor whose
// stops finish as soon as the loop looks again, and a record of every action.
struct Harness {
  explicit Harness(CommandStateOptions options = {}) : state(options) {}

  void Apply(std::vector<AgentAction> actions) {
    for (AgentAction& action : actions) {
      if (auto* stop = std::get_if<StopAction>(&action)) {
        stops.push_back(stop->grace);
        view = SupervisorView{false, true, view.any_running, false};
      } else if (auto* start = std::get_if<StartAction>(&action)) {
        starts.push_back(*start);
        absl::Status status = start_status;
        if (status.ok()) view = SupervisorView{false, false, true, false};
        Apply(state.OnStartResult(*start, status));
      } else if (auto* signal = std::get_if<SignalAction>(&action)) {
        signals.push_back(signal->pause);
      } else if (auto* finish = std::get_if<FinishAction>(&action)) {
        finishes.push_back(*finish);
        state.RecordResult(finish->id, "result of " + finish->id);
      } else if (auto* resend = std::get_if<ResendAction>(&action)) {
        resends.push_back(*resend);
      } else if (auto* capture = std::get_if<CaptureStacksAction>(&action)) {
        captures.push_back(*capture);
      } else if (auto* diagnostic = std::get_if<DiagnosticAction>(&action)) {
        diagnostics.push_back(*diagnostic);
      } else if (auto* mode = std::get_if<NcclModeAction>(&action)) {
        modes.push_back(*mode);
      } else if (auto* log = std::get_if<LogAction>(&action)) {
        logs.push_back(log->text);
      }
    }
  }

  // What the loop does after every input: run queued work until it waits.
  void Settle() {
    for (int i = 0; i < 100; ++i) {
      std::vector<AgentAction> actions = state.Advance(view);
      if (actions.empty()) {
        if (!view.stopping) return;
        view = SupervisorView{};  // the stop completes
        continue;
      }
      Apply(std::move(actions));
    }
    FAIL("Advance did not settle");
  }

  void Ack(std::optional<AgentRole> role, TrainingAssignment assignment) {
    Apply(state.OnRegisterAck(DesiredState{role, std::move(assignment)}));
    Settle();
  }

  void Command(AgentCommand command, absl::Time now = kT0) {
    Apply(state.OnCommand(command, view, now));
    Settle();
  }

  std::vector<uint64_t> StartedAttempts() const {
    std::vector<uint64_t> out;
    for (const StartAction& s : starts) out.push_back(s.assignment.attempt);
    return out;
  }

  void ClearRecord() {
    stops.clear();
    starts.clear();
    signals.clear();
    finishes.clear();
    resends.clear();
    logs.clear();
  }

  CommandState state;
  SupervisorView view;
  absl::Status start_status;
  std::vector<absl::Duration> stops;
  std::vector<StartAction> starts;
  std::vector<bool> signals;
  std::vector<FinishAction> finishes;
  std::vector<ResendAction> resends;
  std::vector<CaptureStacksAction> captures;
  std::vector<DiagnosticAction> diagnostics;
  std::vector<NcclModeAction> modes;
  std::vector<std::string> logs;
};

// A command `id` of `kind`; with `attempt`, it carries Assignment(attempt).
AgentCommand Cmd(std::string id, Kind kind, std::optional<uint64_t> attempt = std::nullopt) {
  AgentCommand c;
  c.id = std::move(id);
  c.kind = kind;
  if (attempt.has_value()) c.assignment = Assignment(*attempt);
  return c;
}

TEST_CASE("a RegisterAck converges training toward the controller's desired state", "[unit]") {
  struct Case {
    const char* name;
    AgentRole initial_role;
    uint64_t running_attempt;  // 0: nothing runs
    std::optional<AgentRole> ack_role;
    uint64_t ack_attempt;
    size_t stops;
    std::vector<uint64_t> starts;
    AgentRole role_after;
    AgentPhase phase_after;
  };
  const std::vector<Case> cases = {
      {"idle active agent starts the attempt", AgentRole::kActive, 0, AgentRole::kActive, 3, 0, {3},
       AgentRole::kActive, AgentPhase::kRunning},
      {"the attempt that runs is left alone", AgentRole::kActive, 3, AgentRole::kActive, 3, 0, {},
       AgentRole::kActive, AgentPhase::kRunning},
      {"another attempt: stop, then start it", AgentRole::kActive, 3, AgentRole::kActive, 4, 1, {4},
       AgentRole::kActive, AgentPhase::kRunning},
      {"attempt 0: stop, nothing runs", AgentRole::kActive, 3, AgentRole::kActive, 0, 1, {}, AgentRole::kActive,
       AgentPhase::kIdle},
      {"demoted to standby: stop", AgentRole::kActive, 3, AgentRole::kStandby, 3, 1, {}, AgentRole::kStandby,
       AgentPhase::kIdle},
      {"standby stays idle", AgentRole::kStandby, 0, AgentRole::kStandby, 0, 0, {}, AgentRole::kStandby,
       AgentPhase::kIdle},
      {"standby made active starts", AgentRole::kStandby, 0, AgentRole::kActive, 2, 0, {2}, AgentRole::kActive,
       AgentPhase::kRunning},
      {"no role in the ack keeps the role", AgentRole::kStandby, 0, std::nullopt, 2, 0, {}, AgentRole::kStandby,
       AgentPhase::kIdle},
      {"idle agent with attempt 0 stays idle", AgentRole::kActive, 0, AgentRole::kActive, 0, 0, {},
       AgentRole::kActive, AgentPhase::kIdle},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      CommandStateOptions options;
      options.role = c.initial_role;
      Harness h(options);
      if (c.running_attempt > 0) {
        h.Ack(c.initial_role, Assignment(c.running_attempt));
        REQUIRE(h.StartedAttempts() == std::vector<uint64_t>{c.running_attempt});
        h.ClearRecord();
      }
      h.Ack(c.ack_role, Assignment(c.ack_attempt));
      CHECK(h.stops.size() == c.stops);
      CHECK(h.StartedAttempts() == c.starts);
      CHECK(h.state.role() == c.role_after);
      CHECK(h.state.Phase(h.view) == c.phase_after);
      CHECK(h.finishes.empty());
      // Level-based: the same ack again changes nothing.
      h.ClearRecord();
      h.Ack(c.ack_role, Assignment(c.ack_attempt));
      CHECK(h.stops.empty());
      CHECK(h.starts.empty());
    }
  }
}

TEST_CASE("each command's transition and result", "[unit]") {
  struct Case {
    const char* name;
    bool running;  // attempt 1 runs before the command
    AgentCommand command;
    absl::StatusCode code;
    size_t stops;
    std::vector<uint64_t> starts;
    AgentPhase phase_after;
  };
  AgentCommand restart = Cmd("restart", Kind::kRestartInPlace, 2);
  restart.grace_ms = 1500;
  AgentCommand activate = Cmd("activate", Kind::kActivate, 2);
  AgentCommand stop = Cmd("stop", Kind::kStop);
  stop.grace_ms = 100;
  const std::vector<Case> cases = {
      {"restart_in_place while running", true, restart, absl::StatusCode::kOk, 1, {2}, AgentPhase::kRunning},
      {"restart_in_place while idle", false, restart, absl::StatusCode::kOk, 0, {2}, AgentPhase::kRunning},
      {"activate", false, activate, absl::StatusCode::kOk, 0, {2}, AgentPhase::kRunning},
      {"stop while running", true, stop, absl::StatusCode::kOk, 1, {}, AgentPhase::kIdle},
      {"stop while idle", false, stop, absl::StatusCode::kOk, 0, {}, AgentPhase::kIdle},
      {"pause while running", true, Cmd("pause", Kind::kPause), absl::StatusCode::kOk, 0, {}, AgentPhase::kPaused},
      {"pause while idle", false, Cmd("pause", Kind::kPause), absl::StatusCode::kFailedPrecondition, 0, {},
       AgentPhase::kIdle},
      {"resume while idle", false, Cmd("resume", Kind::kResume), absl::StatusCode::kFailedPrecondition, 0, {},
       AgentPhase::kIdle},
      {"nccl_mode without the hook", true, Cmd("mode", Kind::kNcclMode), absl::StatusCode::kFailedPrecondition, 0,
       {}, AgentPhase::kRunning},
      {"unknown kind", true, Cmd("what", Kind::kUnknown), absl::StatusCode::kInvalidArgument, 0, {},
       AgentPhase::kRunning},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      Harness h;
      if (c.running) {
        h.Ack(AgentRole::kActive, Assignment(1));
        h.ClearRecord();
      }
      h.Command(c.command);
      REQUIRE(h.finishes.size() == 1);
      CHECK(h.finishes[0].id == c.command.id);
      CHECK(h.finishes[0].outcome.code == c.code);
      CHECK(h.stops.size() == c.stops);
      CHECK(h.StartedAttempts() == c.starts);
      CHECK(h.state.Phase(h.view) == c.phase_after);
    }
  }
}

TEST_CASE("stops use the command's grace, convergence and activation the default", "[unit]") {
  CommandStateOptions options;
  options.default_grace = absl::Seconds(7);
  Harness h(options);
  h.Ack(AgentRole::kActive, Assignment(1));
  AgentCommand restart = Cmd("r", Kind::kRestartInPlace, 2);
  restart.grace_ms = 250;
  h.Command(restart);
  AgentCommand activate = Cmd("a", Kind::kActivate, 3);
  h.Command(activate);
  h.Ack(AgentRole::kActive, Assignment(4));
  CHECK(h.stops == std::vector<absl::Duration>{absl::Milliseconds(250), absl::Seconds(7), absl::Seconds(7)});
  CHECK(h.StartedAttempts() == std::vector<uint64_t>{1, 2, 3, 4});
}

TEST_CASE("a repeated command id executes once and is answered from the record", "[unit]") {
  Harness h;
  AgentCommand restart = Cmd("ns/job/pod/attempt-2", Kind::kRestartInPlace, 2);
  // In progress: the first delivery has queued its start, nothing has run yet.
  h.Apply(h.state.OnCommand(restart, h.view, kT0));
  CHECK(h.state.OnCommand(restart, h.view, kT0).empty());
  h.Settle();
  REQUIRE(h.finishes.size() == 1);
  // Answered: the stored record is sent again, nothing executes.
  std::vector<AgentAction> again = h.state.OnCommand(restart, h.view, kT0);
  REQUIRE(again.size() == 1);
  const auto* resend = std::get_if<ResendAction>(&again[0]);
  REQUIRE(resend != nullptr);
  CHECK(resend->id == restart.id);
  CHECK(resend->record == "result of " + restart.id);
  h.Apply(std::move(again));
  h.Settle();
  CHECK(h.StartedAttempts() == std::vector<uint64_t>{2});
  CHECK(h.finishes.size() == 1);
  CHECK(h.state.executed_ids() == std::deque<std::string>{restart.id});
}

TEST_CASE("only the last result_memory results are kept", "[unit]") {
  CommandStateOptions options;
  options.result_memory = 2;
  Harness h(options);
  for (const char* id : {"a", "b", "c"}) h.Command(Cmd(id, Kind::kUnknown));
  CHECK(h.state.executed_ids() == std::deque<std::string>{"b", "c"});
  h.Command(Cmd("a", Kind::kUnknown));  // forgotten: executed again
  CHECK(h.finishes.size() == 4);
  h.Command(Cmd("c", Kind::kUnknown));  // remembered: resent
  CHECK(h.finishes.size() == 4);
  CHECK(h.resends.size() == 1);
}

TEST_CASE("a non-urgent hot update is deferred to the next start, an urgent one restarts now", "[unit]") {
  TrainingCode v2;
  v2.command = {"train-v2"};
  v2.revision = "v2";
  SECTION("deferred") {
    Harness h;
    h.Ack(AgentRole::kActive, Assignment(1));
    h.ClearRecord();
    AgentCommand update = Cmd("update", Kind::kHotUpdate);
    update.code = v2;
    h.Command(update);
    REQUIRE(h.finishes.size() == 1);
    CHECK(h.finishes[0].outcome ==
          CommandOutcome{absl::StatusCode::kOk, "deferred: the code is applied at the next restart or activation"});
    CHECK(h.starts.empty());
    CHECK(h.stops.empty());
    CHECK(h.state.running_code() == Assignment(1).code);
    AgentCommand restart = Cmd("restart", Kind::kRestartInPlace, 2);
    h.Command(restart);
    REQUIRE(h.starts.size() == 1);
    CHECK(h.starts[0].assignment.code == v2);
    CHECK(h.state.running_code() == v2);
    // Applied once: the next start runs the code it is given.
    AgentCommand next = Cmd("restart-3", Kind::kRestartInPlace, 3);
    h.Command(next);
    REQUIRE(h.starts.size() == 2);
    CHECK(h.starts[1].assignment.code == Assignment(3).code);
  }
  SECTION("urgent, no assignment: the running one restarts with the new code") {
    Harness h;
    h.Ack(AgentRole::kActive, Assignment(1));
    h.ClearRecord();
    AgentCommand update = Cmd("update", Kind::kHotUpdate);
    update.code = v2;
    update.urgent = true;
    h.Command(update);
    REQUIRE(h.starts.size() == 1);
    CHECK(h.stops.size() == 1);
    TrainingAssignment expected = Assignment(1);
    expected.code = v2;
    CHECK(h.starts[0].assignment == expected);
    REQUIRE(h.finishes.size() == 1);
    CHECK(h.finishes[0].outcome.code == absl::StatusCode::kOk);
  }
  SECTION("urgent with an assignment: that one starts with the new code") {
    Harness h;
    AgentCommand update = Cmd("update", Kind::kHotUpdate);
    update.code = v2;
    update.urgent = true;
    update.assignment = Assignment(5);
    h.Command(update);
    REQUIRE(h.starts.size() == 1);
    CHECK(h.starts[0].assignment.attempt == 5);
    CHECK(h.starts[0].assignment.code == v2);
  }
}

TEST_CASE("pause and resume signal training and track the paused phase", "[unit]") {
  Harness h;
  h.Ack(AgentRole::kActive, Assignment(1));
  h.Command(Cmd("pause", Kind::kPause));
  CHECK(h.state.Phase(h.view) == AgentPhase::kPaused);
  h.Command(Cmd("resume", Kind::kResume));
  CHECK(h.state.Phase(h.view) == AgentPhase::kRunning);
  CHECK(h.signals == std::vector<bool>{true, false});
  // A restart while paused stops the paused processes and is no longer paused.
  h.Command(Cmd("pause-2", Kind::kPause));
  AgentCommand restart = Cmd("restart", Kind::kRestartInPlace, 2);
  h.Command(restart);
  CHECK(h.state.Phase(h.view) == AgentPhase::kRunning);
  for (const FinishAction& f : h.finishes) CHECK(f.outcome.code == absl::StatusCode::kOk);
}

TEST_CASE("a trap is answered once training is paused, or fails at its deadline", "[unit]") {
  CommandStateOptions options;
  options.has_nccl_hook = true;
  AgentCommand trap = Cmd("trap", Kind::kNcclMode);
  trap.profiling = true;
  trap.trap = true;
  SECTION("paused") {
    Harness h(options);
    h.Command(trap);
    REQUIRE(h.modes.size() == 1);
    CHECK(h.modes[0].trap);
    CHECK(h.finishes.empty());
    CHECK(h.state.trap_pending());
    h.Apply(h.state.OnPauseCheck(false, "rank 0", kT0 + absl::Seconds(1)));
    CHECK(h.finishes.empty());
    h.Apply(h.state.OnPauseCheck(true, "", kT0 + absl::Seconds(2)));
    REQUIRE(h.finishes.size() == 1);
    CHECK(h.finishes[0].outcome.code == absl::StatusCode::kOk);
    CHECK_FALSE(h.state.trap_pending());
  }
  SECTION("deadline") {
    Harness h(options);
    h.Command(trap);
    h.Apply(h.state.OnPauseCheck(false, "rank 3 (running)", kT0 + CommandState::kTrapPauseDeadline));
    REQUIRE(h.finishes.size() == 1);
    CHECK(h.finishes[0].outcome ==
          CommandOutcome{absl::StatusCode::kDeadlineExceeded,
                         "nccl_mode trap: training did not pause within 20s; waiting for rank 3 (running)"});
  }
  SECTION("a new launch clears the trap: new processes never start trapped") {
    Harness h(options);
    h.Ack(AgentRole::kActive, Assignment(1));
    h.Command(trap);
    REQUIRE(h.modes.size() == 1);
    CHECK(h.state.trap_pending());
    // The controller restarts the job (a new attempt) while the validation's trap is on.
    h.Command(Cmd("restart", Kind::kRestartInPlace, 2));
    REQUIRE(h.modes.size() == 2);
    CHECK_FALSE(h.modes[1].trap);
    CHECK(h.modes[1].profiling);  // profiling is kept
    CHECK_FALSE(h.state.trap_pending());
    bool trap_aborted = false;
    for (const FinishAction& f : h.finishes) trap_aborted |= f.id == "trap" && f.outcome.code == absl::StatusCode::kAborted;
    CHECK(trap_aborted);
    REQUIRE(h.starts.size() == 2);
    CHECK(h.starts[1].assignment.attempt == 2);
  }
  SECTION("superseded by a newer nccl_mode") {
    Harness h(options);
    h.Command(trap);
    h.Command(Cmd("clear", Kind::kNcclMode));
    REQUIRE(h.finishes.size() == 2);
    CHECK(h.finishes[0].id == "trap");
    CHECK(h.finishes[0].outcome.code == absl::StatusCode::kAborted);
    CHECK(h.finishes[1].id == "clear");
    CHECK(h.finishes[1].outcome.code == absl::StatusCode::kOk);
    REQUIRE(h.modes.size() == 2);
    CHECK_FALSE(h.modes[1].trap);
  }
}

TEST_CASE("diagnostics resolve the machine's ranks or refuse bad params", "[unit]") {
  struct Case {
    const char* name;
    bool holds_assignment;  // slot 1 of 2-GPU machines
    int gpus_option;
    std::map<std::string, std::string> params;
    std::optional<absl::StatusCode> refused;
    int gpus;
    int rank_base;
  };
  const std::vector<Case> cases = {
      {"from the assignment held", true, 0, {}, std::nullopt, 2, 2},
      {"standby: the option", false, 4, {}, std::nullopt, 4, 0},
      {"standby: params", false, 0, {{"gpus", "8"}, {"rank_base", "16"}}, std::nullopt, 8, 16},
      {"param gpus overrides the assignment", true, 0, {{"gpus", "1"}}, std::nullopt, 1, 2},
      {"bad rank_base", false, 0, {{"rank_base", "-1"}}, absl::StatusCode::kInvalidArgument, 0, 0},
      {"bad gpus", false, 0, {{"gpus", "2000"}}, absl::StatusCode::kInvalidArgument, 0, 0},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      CommandStateOptions options;
      options.gpus_per_machine = c.gpus_option;
      options.role = c.holds_assignment ? AgentRole::kActive : AgentRole::kStandby;
      Harness h(options);
      if (c.holds_assignment) h.Ack(AgentRole::kActive, Assignment(1, 1, 2));
      AgentCommand command = Cmd("diag", Kind::kRunDiagnostic);
      command.diagnostic_kind = "eud";
      command.diagnostic_params = c.params;
      command.diagnostic_timeout_ms = 5000;
      h.Command(command);
      if (c.refused) {
        CHECK(h.diagnostics.empty());
        REQUIRE(h.finishes.size() == 1);
        CHECK(h.finishes[0].outcome.code == *c.refused);
        continue;
      }
      CHECK(h.finishes.empty());  // the result comes when the diagnostic has run
      REQUIRE(h.diagnostics.size() == 1);
      const DiagnosticTask& task = h.diagnostics[0].task;
      CHECK(task.kind == "eud");
      CHECK(task.timeout_ms == 5000);
      CHECK(task.gpus == c.gpus);
      CHECK(task.rank_base == c.rank_base);
      CHECK(task.command == (c.holds_assignment ? Assignment(1).code.command : std::vector<std::string>{}));
    }
  }
}

TEST_CASE("a failed start fails its command, or is logged when convergence started it", "[unit]") {
  Harness h;
  h.start_status = absl::InvalidArgumentError("assignment: no ranks");
  h.Ack(AgentRole::kActive, Assignment(1));
  REQUIRE(h.logs.size() == 1);
  CHECK(h.logs[0] == "cannot start attempt 1: INVALID_ARGUMENT: assignment: no ranks");
  AgentCommand restart = Cmd("restart", Kind::kRestartInPlace, 2);
  h.Command(restart);
  REQUIRE(h.finishes.size() == 1);
  CHECK(h.finishes[0].outcome == CommandOutcome{absl::StatusCode::kInvalidArgument, "assignment: no ranks"});
  CHECK(h.state.Phase(h.view) == AgentPhase::kIdle);
  // The target was given up: the same attempt from the controller is tried again.
  h.start_status = absl::OkStatus();
  h.Ack(AgentRole::kActive, Assignment(2));
  CHECK(h.StartedAttempts() == std::vector<uint64_t>{1, 2, 2});
}

TEST_CASE("exits the agent caused are not reported, training's own are", "[unit]") {
  Harness h;
  h.Ack(AgentRole::kActive, Assignment(1));
  CHECK(h.state.ReportsExit(false));
  CHECK_FALSE(h.state.ReportsExit(true));
  AgentCommand stop = Cmd("stop", Kind::kStop);
  h.Command(stop);
  CHECK_FALSE(h.state.ReportsExit(false));
}

TEST_CASE("phase follows the supervisor once training started", "[unit]") {
  Harness h;
  h.Ack(AgentRole::kActive, Assignment(1));
  CHECK(h.state.Phase(SupervisorView{false, false, true, false}) == AgentPhase::kRunning);
  CHECK(h.state.Phase(SupervisorView{false, true, true, false}) == AgentPhase::kStopping);
  CHECK(h.state.Phase(SupervisorView{true, false, false, true}) == AgentPhase::kExited);
  CHECK(h.state.Phase(SupervisorView{true, false, false, false}) == AgentPhase::kSucceeded);
}

TEST_CASE("shutdown stops training for good and drops queued work", "[unit]") {
  CommandStateOptions options;
  options.default_grace = absl::Seconds(3);
  Harness h(options);
  h.Ack(AgentRole::kActive, Assignment(1));
  AgentCommand restart = Cmd("restart", Kind::kRestartInPlace, 2);
  h.Apply(h.state.OnCommand(restart, h.view, kT0));  // queued, not yet run
  h.ClearRecord();
  h.Apply(h.state.BeginShutdown(h.view));
  CHECK(h.stops == std::vector<absl::Duration>{absl::Seconds(3)});
  CHECK(h.state.shutting_down());
  h.Settle();
  h.Ack(AgentRole::kActive, Assignment(3));
  CHECK(h.starts.empty());
  CHECK(h.state.Phase(h.view) == AgentPhase::kIdle);
  CHECK(h.state.BeginShutdown(h.view).empty());  // once
}

}  // namespace
}  // namespace peregrine
