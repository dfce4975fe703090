#include "agent/command_state.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

// How the agent handles what the controller wants.
//
// Convergence is level-based: every RegisterAck says which role the agent has and
// which attempt should run. An ACTIVE agent with attempt > 0 makes training of
// exactly that attempt run: left alone when it already runs (or is about to),
// otherwise stopped and restarted. ACTIVE with attempt 0, or STANDBY, means
// nothing runs. The agent never restarts training by itself.
//
// Anything that must wait for the training processes to be gone is a Step in a
// queue: restart_in_place, activate and urgent hot updates queue a start, stop
// queues its result, convergence queues a start or nothing. Advance first stops
// whatever runs (marking the stop as the agent's, so the exits are not reported)
// and, once the supervisor is idle, pops the steps in order. A start ends the
// call: the loop launches, reports with OnStartResult and calls Advance again
// with a fresh view, so a later step stops that start again.
//
// Commands are idempotent by id: an id already answered is answered again from
// the stored record (the last `result_memory` results), an id in progress is
// ignored (its result follows). Every id accepted ends with exactly one
// RecordResult, made by the loop when it sends the result.
//
// A non-urgent hot update is only remembered: its code replaces the
// assignment's at the next start (restart, activation or convergence) and is
// then forgotten. An urgent one restarts now with the new code, on the
// command's assignment or, when that has no ranks, on the one that runs.
//
// Pause and resume signal every process group (SIGSTOP / SIGCONT) and fail with
// FAILED_PRECONDITION when nothing runs. An nccl_mode command that sets the trap
// is answered only once the rings show training paused (OnPauseCheck), or with
// DEADLINE_EXCEEDED after kTrapPauseDeadline; a newer nccl_mode supersedes it
// (ABORTED).
//
// set_microbatch_plan is checked here (a valid plan, one count per data-parallel replica
// of the running assignment, training running with no start queued, since every start
// clears the plan) and written by the loop (MicroBatchPlanAction); an empty plan clears
// it at any time.

namespace peregrine {

CommandState::CommandState(CommandStateOptions options)
    : options_(std::move(options)), role_(options_.role) {}

std::vector<AgentAction> CommandState::OnRegisterAck(const DesiredState& desired) {
  if (desired.role) role_ = *desired.role;
  if (!desired.assignment.ranks.empty()) acked_assignment_ = desired.assignment;
  if (shutting_down_) return {};
  const uint64_t attempt = desired.assignment.attempt;
  if (role_ == AgentRole::kActive && attempt > 0) {
    if (target_attempt_ == attempt) return {};  // running, or about to
    target_attempt_ = attempt;
    steps_.push_back(Step{Step::Kind::kStart, options_.default_grace, desired.assignment, ""});
    return {};
  }
  if (started_ && !intentional_stop_) {
    target_attempt_ = 0;
    steps_.push_back(Step{Step::Kind::kNothing, options_.default_grace, {}, ""});
  }
  return {};
}

std::vector<AgentAction> CommandState::OnCommand(const AgentCommand& command, const SupervisorView& view,
                                                 absl::Time now) {
  const std::string& id = command.id;
  if (auto it = executed_.find(id); it != executed_.end()) return {ResendAction{id, it->second}};
  if (in_progress_.contains(id)) return {};  // the result follows when it is done
  in_progress_.insert(id);
  using Kind = AgentCommand::Kind;
  switch (command.kind) {
    case Kind::kRestartInPlace:
      Restart(id, command.assignment, absl::Milliseconds(command.grace_ms));
      return {};
    case Kind::kActivate:
      role_ = AgentRole::kActive;
      Restart(id, command.assignment, options_.default_grace);
      return {};
    case Kind::kStop:
      target_attempt_ = 0;
      steps_.push_back(Step{Step::Kind::kFinishStop, absl::Milliseconds(command.grace_ms), {}, id});
      return {};
    case Kind::kPause:
    case Kind::kResume: {
      const bool pause = command.kind == Kind::kPause;
      if (!view.any_running) {
        return {FinishAction{id, CommandOutcome{absl::StatusCode::kFailedPrecondition,
                                                absl::StrCat(pause ? "pause" : "resume",
                                                             ": no training process is running")}}};
      }
      paused_ = pause;
      return {SignalAction{pause}, FinishAction{id, {}}};
    }
    case Kind::kCaptureStacks:
      return {CaptureStacksAction{id, command.include_native}};
    case Kind::kRunDiagnostic:
      return RunDiagnostic(command);
    case Kind::kNcclMode: {
      if (!options_.has_nccl_hook) {
        return {FinishAction{id, CommandOutcome{absl::StatusCode::kFailedPrecondition,
                                                "nccl_mode: this agent runs without the NCCL hook (--nccl-hook)"}}};
      }
      std::vector<AgentAction> actions;
      if (pending_trap_) {
        actions.push_back(FinishAction{pending_trap_->id,
                                       CommandOutcome{absl::StatusCode::kAborted,
                                                      "nccl_mode: superseded by a newer nccl_mode command"}});
        pending_trap_.reset();
      }
      actions.push_back(NcclModeAction{command.profiling, command.trap});
      nccl_profiling_ = command.profiling;
      nccl_trap_ = command.trap;
      if (command.trap) {
        pending_trap_ = PendingTrap{id, now + kTrapPauseDeadline};  // answered by OnPauseCheck
      } else {
        actions.push_back(FinishAction{id, {}});
      }
      return actions;
    }
    case Kind::kHotUpdate: {
      if (!command.urgent) {
        pending_code_ = command.code;
        return {FinishAction{
            id, CommandOutcome{absl::StatusCode::kOk,
                               "deferred: the code is applied at the next restart or activation"}}};
      }
      TrainingAssignment assignment = !command.assignment.ranks.empty() ? command.assignment
                                      : assignment_                     ? *assignment_
                                                                        : command.assignment;
      assignment.code = command.code;
      pending_code_.reset();
      Restart(id, assignment, options_.default_grace);
      return {};
    }
    case Kind::kSetMicroBatchPlan:
      return SetMicroBatchPlan(command);
    case Kind::kUnknown:
      break;
  }
  return {FinishAction{id, CommandOutcome{absl::StatusCode::kInvalidArgument,
                                          "command has no kind this agent knows"}}};
}

void CommandState::Restart(const std::string& id, const TrainingAssignment& assignment, absl::Duration grace) {
  target_attempt_ = assignment.attempt;
  steps_.push_back(Step{Step::Kind::kStart, grace, assignment, id});
}

// The machine's ranks come from the assignment held (running, else the latest
// ack's); a standby without one takes them from the params.
std::vector<AgentAction> CommandState::RunDiagnostic(const AgentCommand& command) {
  DiagnosticTask task;
  task.kind = command.diagnostic_kind;
  task.params = command.diagnostic_params;
  task.timeout_ms = command.diagnostic_timeout_ms;
  int gpus = options_.gpus_per_machine > 0 ? options_.gpus_per_machine : 1;
  int rank_base = 0;
  const std::optional<TrainingAssignment>& held = assignment_ ? assignment_ : acked_assignment_;
  if (held && held->layout.gpus_per_machine > 0) {
    gpus = static_cast<int>(held->layout.gpus_per_machine);
    rank_base = static_cast<int>(held->machine_index) * gpus;
    task.command = held->code.command;
    task.code_env.assign(held->code.env.begin(), held->code.env.end());
  } else if (auto it = task.params.find("rank_base"); it != task.params.end()) {
    if (!absl::SimpleAtoi(it->second, &rank_base) || rank_base < 0) {
      return {FinishAction{command.id, CommandOutcome{absl::StatusCode::kInvalidArgument,
                                                      absl::StrCat(task.kind,
                                                                   ": param rank_base: expected a non-negative "
                                                                   "integer, got \"",
                                                                   it->second, "\"")}}};
    }
  }
  if (auto it = task.params.find("gpus"); it != task.params.end()) {
    if (!absl::SimpleAtoi(it->second, &gpus) || gpus < 1 || gpus > 1024) {
      return {FinishAction{command.id,
                           CommandOutcome{absl::StatusCode::kInvalidArgument,
                                          absl::StrCat(task.kind, ": param gpus: expected an integer in [1, 1024], got \"",
                                                       it->second, "\"")}}};
    }
  }
  task.gpus = gpus;
  task.rank_base = rank_base;
  return {DiagnosticAction{command.id, std::move(task)}};
}

std::vector<AgentAction> CommandState::SetMicroBatchPlan(const AgentCommand& command) {
  const MicroBatchPlan& plan = command.microbatch_plan;
  auto fail = [&](absl::StatusCode code, const std::string& why) -> std::vector<AgentAction> {
    return {FinishAction{command.id, CommandOutcome{code, absl::StrCat("set_microbatch_plan: ", why)}}};
  };
  if (plan.empty()) return {MicroBatchPlanAction{command.id, plan}};
  if (absl::Status valid = ValidateMicroBatchPlan(plan); !valid.ok()) {
    return fail(absl::StatusCode::kInvalidArgument, std::string(valid.message()));
  }
  bool start_queued = false;
  for (const Step& step : steps_) start_queued = start_queued || step.kind == Step::Kind::kStart;
  if (!started_ || intentional_stop_ || !assignment_ || start_queued) {
    return fail(absl::StatusCode::kFailedPrecondition,
                "no training run to apply it to (nothing runs, or a start is queued: every start clears the plan)");
  }
  if (plan.counts.size() != assignment_->layout.data) {
    return fail(absl::StatusCode::kInvalidArgument,
                absl::StrCat("counts: ", plan.counts.size(), " entries, but the running assignment has ",
                             assignment_->layout.data, " data-parallel replicas"));
  }
  return {MicroBatchPlanAction{command.id, plan}};
}

std::vector<AgentAction> CommandState::Advance(const SupervisorView& view) {
  std::vector<AgentAction> actions;
  if (shutting_down_ || steps_.empty()) return actions;
  if (!view.idle) {
    if (!view.stopping) {
      intentional_stop_ = true;
      paused_ = false;
      actions.push_back(StopAction{steps_.front().grace});
    }
    return actions;
  }
  while (!steps_.empty()) {
    Step step = std::move(steps_.front());
    steps_.pop_front();
    switch (step.kind) {
      case Step::Kind::kStart:
        if (pending_code_) step.assignment.code = *pending_code_;
        if (nccl_trap_) {  // new processes start untrapped (see nccl_trap_)
          nccl_trap_ = false;
          actions.push_back(NcclModeAction{nccl_profiling_, false});
          if (pending_trap_) {
            actions.push_back(FinishAction{pending_trap_->id,
                                           CommandOutcome{absl::StatusCode::kAborted,
                                                          "nccl_mode: the trap was cleared by a new launch"}});
            pending_trap_.reset();
          }
        }
        actions.push_back(StartAction{std::move(step.assignment), std::move(step.command_id)});
        return actions;  // what runs changed: the caller looks again
      case Step::Kind::kFinishStop:
        intentional_stop_ = true;
        actions.push_back(FinishAction{step.command_id, {}});
        break;
      case Step::Kind::kNothing:
        break;
    }
  }
  return actions;
}

std::vector<AgentAction> CommandState::OnStartResult(const StartAction& start, const absl::Status& status) {
  if (status.ok()) {
    pending_code_.reset();
    assignment_ = start.assignment;
    target_attempt_ = start.assignment.attempt;
    running_code_ = start.assignment.code;
    started_ = true;
    intentional_stop_ = false;
    paused_ = false;
    if (start.command_id.empty()) return {};
    return {FinishAction{start.command_id, {}}};
  }
  if (start.command_id.empty()) {
    return {LogAction{absl::StrCat("cannot start attempt ", start.assignment.attempt, ": ", status.ToString())}};
  }
  target_attempt_ = 0;
  intentional_stop_ = true;
  return {FinishAction{start.command_id, CommandOutcome::FromStatus(status)}};
}

std::vector<AgentAction> CommandState::OnPauseCheck(bool paused, const std::string& waiting_for, absl::Time now) {
  if (!pending_trap_) return {};
  std::vector<AgentAction> actions;
  if (paused) {
    actions.push_back(FinishAction{pending_trap_->id, {}});
    pending_trap_.reset();
  } else if (now >= pending_trap_->deadline) {
    actions.push_back(FinishAction{
        pending_trap_->id,
        CommandOutcome{absl::StatusCode::kDeadlineExceeded,
                       absl::StrCat("nccl_mode trap: training did not pause within ",
                                    absl::FormatDuration(kTrapPauseDeadline), "; waiting for ", waiting_for)}});
    pending_trap_.reset();
  }
  return actions;
}

std::vector<AgentAction> CommandState::BeginShutdown(const SupervisorView& view) {
  if (shutting_down_) return {};
  shutting_down_ = true;
  steps_.clear();
  if (view.idle) return {};
  intentional_stop_ = true;
  paused_ = false;
  return {StopAction{options_.default_grace}};
}

void CommandState::RecordResult(const std::string& id, std::string record) {
  in_progress_.erase(id);
  if (executed_order_.size() >= options_.result_memory && !executed_order_.empty()) {
    executed_.erase(executed_order_.front());
    executed_order_.pop_front();
  }
  executed_order_.push_back(id);
  executed_[id] = std::move(record);
}

AgentPhase CommandState::Phase(const SupervisorView& view) const {
  if (view.stopping) return AgentPhase::kStopping;
  if (!started_ || intentional_stop_) return view.idle ? AgentPhase::kIdle : AgentPhase::kStopping;
  if (view.any_running) return paused_ ? AgentPhase::kPaused : AgentPhase::kRunning;
  if (view.any_failed) return AgentPhase::kExited;
  return AgentPhase::kSucceeded;
}

}  // namespace peregrine
