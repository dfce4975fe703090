// CommandState: the agent's command handling as a pure state machine. It
// converges training toward what the controller wants (role, attempt), runs
// commands idempotently by id, defers non-urgent hot updates and tracks pause.
// Inputs are plain values (the controller's desired state, commands, what the
// supervisor shows, `now`); outputs are AgentActions the agent's event loop
// executes and reports back (OnStartResult, RecordResult, OnPauseCheck).
// No clock, thread, socket or wire type inside. Thread-compatible: the event
// loop owns it. Errors reach the controller as command outcomes, never throws.
#ifndef PEREGRINE_AGENT_COMMAND_STATE_H_
#define PEREGRINE_AGENT_COMMAND_STATE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/training_assignment.h"
#include "client/microbatch_plan_format.h"

namespace peregrine {

enum class AgentRole { kActive, kStandby };

// What the agent reports as its training phase.
enum class AgentPhase { kIdle, kRunning, kPaused, kStopping, kExited, kSucceeded };

// What the supervisor shows right now.
struct SupervisorView {
  bool idle = true;          // no training process group is left
  bool stopping = false;     // a stop is under way
  bool any_running = false;  // some training process runs
  bool any_failed = false;   // some process ended with a non-zero code or a signal
};

// The controller's desired state, as a RegisterAck carries it.
struct DesiredState {
  std::optional<AgentRole> role;  // nullopt: unchanged
  TrainingAssignment assignment;  // attempt 0: no training wanted
};

struct AgentCommand {
  enum class Kind {
    kUnknown,
    kRestartInPlace,
    kActivate,
    kStop,
    kPause,
    kResume,
    kCaptureStacks,
    kRunDiagnostic,
    kNcclMode,
    kHotUpdate,
    kSetMicroBatchPlan,
  };
  std::string id;
  Kind kind = Kind::kUnknown;
  TrainingAssignment assignment;  // restart_in_place, activate, hot_update (may have no ranks)
  uint32_t grace_ms = 0;          // restart_in_place, stop
  bool include_native = false;    // capture_stacks
  std::string diagnostic_kind;    // run_diagnostic
  std::map<std::string, std::string> diagnostic_params;
  uint32_t diagnostic_timeout_ms = 0;
  bool profiling = false;  // nccl_mode
  bool trap = false;
  TrainingCode code;  // hot_update
  bool urgent = false;
  MicroBatchPlan microbatch_plan;  // set_microbatch_plan
};

// A command's result status. Unlike absl::Status, an OK outcome may carry a message.
struct CommandOutcome {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string message;

  static CommandOutcome FromStatus(const absl::Status& status) {
    return CommandOutcome{status.code(), std::string(status.message())};
  }
  bool operator==(const CommandOutcome&) const = default;
};

// A stop-time diagnostic to run, with the machine's ranks resolved.
struct DiagnosticTask {
  std::string kind;
  std::map<std::string, std::string> params;
  uint32_t timeout_ms = 0;
  int gpus = 1;
  int rank_base = 0;
  std::vector<std::string> command;  // of the assignment held, if any
  std::vector<std::pair<std::string, std::string>> code_env;
};

// Actions, executed in order by the event loop.
struct StopAction {  // stop every training process group (SIGTERM, SIGKILL after grace)
  absl::Duration grace;
};
struct StartAction {  // launch `assignment`; report with OnStartResult
  TrainingAssignment assignment;
  std::string command_id;  // empty: started by convergence, not a command
};
struct SignalAction {  // SIGSTOP (pause) or SIGCONT to every process group
  bool pause = false;
};
struct FinishAction {  // the command's result; the loop stores it with RecordResult
  std::string id;
  CommandOutcome outcome;
};
struct ResendAction {  // a repeated id: send the stored result again
  std::string id;
  std::string record;
};
struct CaptureStacksAction {  // capture the ranks' stacks, then RecordResult
  std::string id;
  bool include_native = false;
};
struct DiagnosticAction {  // run off the loop, then RecordResult
  std::string id;
  DiagnosticTask task;
};
struct NcclModeAction {
  bool profiling = false;
  bool trap = false;
};
struct MicroBatchPlanAction {  // write (or, empty, remove) the plan file, then finish `id`
  std::string id;
  MicroBatchPlan plan;
};
struct LogAction {
  std::string text;
};
using AgentAction = std::variant<StopAction, StartAction, SignalAction, FinishAction, ResendAction,
                                 CaptureStacksAction, DiagnosticAction, NcclModeAction, MicroBatchPlanAction,
                                 LogAction>;

struct CommandStateOptions {
  AgentRole role = AgentRole::kActive;
  absl::Duration default_grace = absl::Seconds(10);
  bool has_nccl_hook = false;
  int gpus_per_machine = 0;  // GPUs when no assignment says (0: param "gpus", else 1)
  size_t result_memory = 256;  // results kept for repeated ids
};

class CommandState {
 public:
  // How long a trap may take to pause training before its command fails.
  static constexpr absl::Duration kTrapPauseDeadline = absl::Seconds(20);

  explicit CommandState(CommandStateOptions options);

  // A RegisterAck: adopts its role and converges toward its attempt.
  std::vector<AgentAction> OnRegisterAck(const DesiredState& desired);
  // A command: executed once per id; a repeated id resends its stored result.
  std::vector<AgentAction> OnCommand(const AgentCommand& command, const SupervisorView& view, absl::Time now);
  // Runs queued work: stops what runs, then the next queued start or result.
  // Call until it returns nothing, with a fresh view each time.
  std::vector<AgentAction> Advance(const SupervisorView& view);
  // The outcome of a StartAction (the launch has happened when `status` is OK).
  std::vector<AgentAction> OnStartResult(const StartAction& start, const absl::Status& status);
  // Whether the rings are paused, while a trap command waits for it.
  std::vector<AgentAction> OnPauseCheck(bool paused, const std::string& waiting_for, absl::Time now);
  // Drops queued work and stops training for good.
  std::vector<AgentAction> BeginShutdown(const SupervisorView& view);
  // Stores the result of a finished command (the loop's serialized form) for resends.
  void RecordResult(const std::string& id, std::string record);

  AgentPhase Phase(const SupervisorView& view) const;
  AgentRole role() const { return role_; }
  // The assignment training last started with.
  const std::optional<TrainingAssignment>& running_assignment() const { return assignment_; }
  bool started() const { return started_; }
  const TrainingCode& running_code() const { return running_code_; }
  bool trap_pending() const { return pending_trap_.has_value(); }
  bool shutting_down() const { return shutting_down_; }
  // Whether an exit is training's own (reported) rather than one the agent caused.
  bool ReportsExit(bool during_stop) const { return !during_stop && !intentional_stop_; }
  // Executed command ids, oldest first.
  const std::deque<std::string>& executed_ids() const { return executed_order_; }

 private:
  // Work queued behind a stop: once nothing runs, start, finish a stop, or nothing.
  struct Step {
    enum class Kind { kStart, kFinishStop, kNothing };
    Kind kind = Kind::kNothing;
    absl::Duration grace;
    TrainingAssignment assignment;
    std::string command_id;
  };

  void Restart(const std::string& id, const TrainingAssignment& assignment, absl::Duration grace);
  std::vector<AgentAction> RunDiagnostic(const AgentCommand& command);
  std::vector<AgentAction> SetMicroBatchPlan(const AgentCommand& command);

  const CommandStateOptions options_;
  AgentRole role_;
  bool shutting_down_ = false;
  std::optional<TrainingAssignment> assignment_;
  std::optional<TrainingAssignment> acked_assignment_;  // the latest RegisterAck's
  uint64_t target_attempt_ = 0;
  TrainingCode running_code_;
  std::optional<TrainingCode> pending_code_;
  bool started_ = false;
  bool intentional_stop_ = false;
  bool paused_ = false;
  struct PendingTrap {
    std::string id;
    absl::Time deadline;
  };
  std::optional<PendingTrap> pending_trap_;
  // The NCCL mode last asked for (kNcclMode). A launch clears the trap: a pause applies to
  // the processes running when it was asked, and new processes started trapped would
  // never step (seen: a validation's trap outlived the restart that ended it, and the new
  // attempt made no step until the hang policy stepped in 120 s later).
  bool nccl_profiling_ = false;
  bool nccl_trap_ = false;
  std::deque<Step> steps_;
  std::deque<std::string> executed_order_;
  absl::flat_hash_map<std::string, std::string> executed_;
  absl::flat_hash_set<std::string> in_progress_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_COMMAND_STATE_H_
