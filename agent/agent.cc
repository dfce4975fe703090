#include "agent/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/agent_components.h"
#include "agent/checkpoint/agent_checkpoints.h"
#include "agent/command_state.h"
#include "agent/controller_link.h"
#include "agent/diagnostics/diagnostic_runner.h"
#include "agent/failslow_monitor.h"
#include "agent/inspection_runner.h"
#include "agent/microbatch_plan_file.h"
#include "agent/progress_parser.h"
#include "agent/proto_translation.h"
#include "agent/self_check.h"
#include "agent/signal_pipe.h"
#include "agent/stack_capture.h"
#include "agent/stack_capture_worker.h"
#include "agent/supervisor.h"
#include "diagnosis/check.h"

// The agent's event loop: one thread owns all state and runs poll() over a wake-up
// eventfd, the SIGCHLD/SIGTERM signal pipe and the training processes' output,
// with a timeout for the next heartbeat, supervisor deadline or inspection.
// Every iteration drains closures posted by other threads (the controller link's
// callbacks, stack-capture workers, the diagnostic runner), polls the supervisor
// (progress lines, exits), the fail-slow monitor and the inspections, runs the
// command state machine's queued work and sends a heartbeat when due.
//
// What happens on the stream:
//   * every new stream registers (job, pod, machine, role, current TrainingState,
//     recent executed command ids, a self-check for standbys);
//   * every RegisterAck is the controller's desired state: CommandState converges
//     toward it (agent/command_state.cc explains how);
//   * heartbeats (TrainingState + IterationSummary per rank, latest inspections,
//     NCCL communicator profiles) go out every interval (the ack's
//     heartbeat_interval_ms overrides the option);
//   * Event.process_exit goes out when a training process exits on its own (not for
//     exits the agent caused by stop, restart or shutdown); events that happen while
//     disconnected are queued (bounded) and sent after the next RegisterAck;
//   * commands go through CommandState, which answers a repeated id from its record;
//     the loop executes its actions: stopping and starting training, signals,
//     stack capture (on a worker thread), diagnostics (one at a time, through
//     agent/diagnostics), the NCCL hook's mode and the micro-batch plan file (removed at
//     start and before every launch, agent/microbatch_plan_file.h).
// The agent never restarts training by itself and keeps it running while the
// controller is away (the link reconnects with jittered backoff). On shutdown every
// training process group gets SIGTERM, SIGKILL after grace_ms; Wait() then returns
// 0 if training had succeeded, else 143.

namespace peregrine {

namespace v1 = ::peregrine::v1;

namespace {

constexpr size_t kMaxPendingEvents = 1024;

int64_t UnixNanos(absl::Time t) { return absl::ToUnixNanos(t); }

CommandStateOptions CommandOptionsFor(const AgentOptions& options) {
  CommandStateOptions out;
  out.role = options.role == AgentRoleOption::kStandby ? AgentRole::kStandby : AgentRole::kActive;
  out.default_grace = absl::Milliseconds(options.grace_ms);
  out.has_nccl_hook = !options.nccl_hook.empty();
  out.gpus_per_machine = options.gpus_per_machine;
  return out;
}

}  // namespace

class Agent::Impl {
 public:
  explicit Impl(AgentOptions options)
      : options_(std::move(options)),
        heartbeat_interval_(absl::Milliseconds(options_.heartbeat_ms == 0 ? 1000 : options_.heartbeat_ms)),
        start_time_(options_.clock->Now()),
        commands_(CommandOptionsFor(options_)) {}

  ~Impl() {
    if (loop_thread_.joinable()) {
      RequestShutdown();
      Wait();
    }
    diagnostics_.reset();  // kills a running diagnostic's helper, drops queued ones
    if (link_) link_->Stop();
    captures_.reset();  // drops queued captures, waits for the running one
    if (checkpoints_) checkpoints_->Shutdown();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  absl::Status Start() {
    // The credential leaves the file system before anything else starts.
    std::string credential;
    if (!options_.credential_file.empty()) {
      absl::StatusOr<std::string> taken = TakeCredentialFile(options_.credential_file);
      if (!taken.ok()) return taken.status();
      credential = *std::move(taken);
    }
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return absl::InternalError("eventfd failed");
    std::vector<int> signals = {SIGCHLD};
    if (options_.handle_signals) {
      signals.push_back(SIGTERM);
      signals.push_back(SIGINT);
    }
    absl::StatusOr<int> signal_fd = InstallSignalPipe(signals);
    if (!signal_fd.ok()) return signal_fd.status();
    signal_fd_ = *signal_fd;
    Supervisor::Options supervisor_options;
    supervisor_options.clock = options_.clock;
    supervisor_ = std::make_unique<Supervisor>(supervisor_options);
    absl::StatusOr<std::unique_ptr<FailSlowMonitor>> failslow = CreateFailSlowMonitor(options_);
    if (!failslow.ok()) return failslow.status();
    failslow_ = std::move(*failslow);
    absl::StatusOr<std::unique_ptr<InspectionRunner>> inspections = CreateInspectionRunner(options_);
    if (!inspections.ok()) return inspections.status();
    inspections_ = std::move(*inspections);
    if (!options_.log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(options_.log_dir, ec);
      if (ec) {
        return absl::FailedPreconditionError(
            absl::StrCat("--log-dir ", options_.log_dir, ": ", ec.message()));
      }
    }
    diagnostics_ = std::make_unique<DiagnosticRunner>(DiagnosticRunnerOptionsFor(options_));
    // A plan left by an earlier agent of this pod belongs to no run of this one.
    if (absl::Status cleared = ClearMicroBatchPlan(plan_path_); !cleared.ok()) return cleared;
    // Without a store (no shared memory, a port taken) training still runs, without
    // in-memory checkpoints; the reason goes to the controller as a log event.
    absl::StatusOr<std::unique_ptr<checkpoint::AgentCheckpoints>> checkpoints =
        checkpoint::AgentCheckpoints::Create(CheckpointOptionsFor(options_));
    if (checkpoints.ok()) {
      checkpoints_ = std::move(*checkpoints);
    } else {
      ReportLog(absl::StrCat("in-memory checkpoints are off: ", checkpoints.status().ToString()));
    }
    ControllerLinkOptions link_options;
    link_options.target = options_.controller;
    link_options.credential = std::move(credential);
    link_options.tls_ca_file = options_.tls_ca_file;
    link_options.backoff_initial = options_.backoff_initial;
    link_options.backoff_max = options_.backoff_max;
    link_options.clock = options_.clock;
    link_options.seed = static_cast<uint64_t>(UnixNanos(start_time_)) ^ static_cast<uint64_t>(::getpid());
    ControllerLink::Callbacks callbacks;
    callbacks.on_stream_open = [this](uint64_t session) { Post([this, session] { OnStreamOpen(session); }); };
    callbacks.on_message = [this](uint64_t session, v1::ControllerMessage message) {
      Post([this, session, m = std::move(message)] { OnMessage(session, m); });
    };
    callbacks.on_stream_closed = [this](uint64_t session, absl::Status status) {
      Post([this, session, status] { OnStreamClosed(session, status); });
    };
    link_ = std::make_unique<ControllerLink>(link_options, std::move(callbacks));
    loop_thread_ = std::thread([this] { Loop(); });
    link_->Start();
    return absl::OkStatus();
  }

  void RequestShutdown() {
    Post([this] { BeginShutdown(); });
  }

  int Wait() {
    {
      std::unique_lock<std::mutex> lock(done_mu_);
      done_cv_.wait(lock, [this] { return done_; });
    }
    if (loop_thread_.joinable()) loop_thread_.join();
    return exit_code_;
  }

 private:
  // ---- control loop plumbing -------------------------------------------------

  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(post_mu_);
      if (loop_finished_) return;
      posted_.push_back(std::move(fn));
    }
    uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
    (void)ignored;
  }

  void Loop() {
    bool sweep = true;
    while (!finished_) {
      std::vector<pollfd> fds;
      fds.push_back(pollfd{wake_fd_, POLLIN, 0});
      fds.push_back(pollfd{signal_fd_, POLLIN, 0});
      for (int fd : supervisor_->OutputFds()) fds.push_back(pollfd{fd, POLLIN, 0});
      absl::Time now = Now();
      absl::Time wake = now + absl::Milliseconds(100);
      if (registered_) wake = std::min(wake, next_heartbeat_);
      if (auto deadline = supervisor_->NextDeadline()) wake = std::min(wake, *deadline);
      if (inspections_) wake = std::min(wake, std::max(now, inspections_->NextDue()));
      int timeout_ms = static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(wake - now) + 1));
      ::poll(fds.data(), fds.size(), timeout_ms);

      uint64_t count;
      while (::read(wake_fd_, &count, sizeof(count)) > 0) {
      }
      for (int signo : DrainSignalPipe(signal_fd_)) {
        if (signo == SIGCHLD) sweep = true;
        if ((signo == SIGTERM || signo == SIGINT) && options_.handle_signals) BeginShutdown();
      }
      std::deque<std::function<void()>> work;
      {
        std::lock_guard<std::mutex> lock(post_mu_);
        work.swap(posted_);
      }
      for (auto& fn : work) fn();

      PollSupervisor(sweep);
      sweep = false;
      PollFailSlow();
      PollInspections();
      PollCheckpoints();
      RunQueuedWork();
      if (registered_ && Now() >= next_heartbeat_) SendHeartbeat();
      if (commands_.shutting_down() && supervisor_->Idle() && !supervisor_->stopping()) {
        if (registered_) SendHeartbeat();
        finished_ = true;
      }
    }
    {
      std::lock_guard<std::mutex> lock(post_mu_);
      loop_finished_ = true;
      posted_.clear();
    }
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_ = true;
    }
    done_cv_.notify_all();
  }

  void PollSupervisor(bool sweep) {
    PollResult result = supervisor_->Poll(Now(), sweep);
    const absl::Time now = Now();
    for (const OutputLine& line : result.lines) {
      if (std::optional<ProgressRecord> record = ParseProgressLine(line.text)) {
        progress_[line.global_rank].Observe(*record, now);
      }
    }
    for (const ProcessExitReport& exit : result.exits) {
      if (!commands_.ReportsExit(exit.during_stop)) continue;
      v1::Event event;
      event.set_at(UnixNanos(now));
      FillProcessExit(exit, commands_.running_assignment() ? commands_.running_assignment()->attempt : 0,
                      event.mutable_process_exit());
      auto it = progress_.find(exit.global_rank);
      if (it != progress_.end()) {
        event.mutable_process_exit()->set_last_completed_step(it->second.Current().last_completed_step);
      }
      SendEvent(std::move(event));
    }
    if (!result.exits.empty() && registered_) SendHeartbeat();  // the phase may have changed
  }

  // Machine inspections: alarms go out as events at once, results with the heartbeat.
  void PollInspections() {
    if (!inspections_ || commands_.shutting_down()) return;
    const absl::Time now = Now();
    InspectionRunner::Outcome outcome = inspections_->Poll(now);
    for (v1::InspectionResult& alarm : outcome.alarms) {
      v1::Event event;
      event.set_at(UnixNanos(now));
      *event.mutable_inspection_alarm() = std::move(alarm);
      SendEvent(std::move(event));
    }
  }

  // Fail-slow tracking: reads the NCCL rings every ~100 ms; verified changes go out as
  // events at once. A trap command waits here until the rings show training paused.
  void PollFailSlow() {
    if (!failslow_ || commands_.shutting_down()) return;
    const absl::Time now = Now();
    if (now < next_failslow_poll_) return;
    next_failslow_poll_ = now + absl::Milliseconds(100);
    // The hook stamps ring records with the host's CLOCK_MONOTONIC (the rings' time base,
    // shared with the training processes, not a time the agent chooses); this reading
    // next to the clock's Unix time lets the monitor map them.
    timespec mono{};
    ::clock_gettime(CLOCK_MONOTONIC, &mono);
    const int64_t mono_ns = static_cast<int64_t>(mono.tv_sec) * 1'000'000'000 + mono.tv_nsec;
    for (v1::FailSlowEvent& fs : failslow_->Poll(UnixNanos(now), mono_ns)) {
      v1::Event event;
      event.set_at(UnixNanos(now));
      *event.mutable_fail_slow() = std::move(fs);
      SendEvent(std::move(event));
    }
    if (commands_.trap_pending()) {
      const FailSlowMonitor::PauseCheck check = failslow_->CheckPaused();
      Execute(commands_.OnPauseCheck(check.paused, check.waiting_for, now));
    }
    for (const NcclRingFailure& f : failslow_->TakeRingFailures()) {
      ReportLog(absl::StrCat("NCCL hook of rank ", f.global_rank, " (pid ", f.pid,
                             ") runs without a ring, so that rank is not tracked for fail-slow: ", f.reason));
    }
  }

  // The checkpoint store's pass (every ~200 ms, agent/checkpoint/agent_checkpoints.h);
  // its events go out at once.
  void PollCheckpoints() {
    if (!checkpoints_ || commands_.shutting_down()) return;
    SendCheckpointEvents(checkpoints_->Poll(Now()));
  }

  void SendCheckpointEvents(std::vector<v1::CheckpointEvent> events) {
    for (v1::CheckpointEvent& e : events) {
      v1::Event event;
      event.set_at(UnixNanos(Now()));
      *event.mutable_checkpoint() = std::move(e);
      SendEvent(std::move(event));
    }
  }

  // Before ranks start: the store takes the assignment's plan and, for a restore, makes
  // every local rank's shard present. A failed restore starts nothing (the controller
  // falls back to an older step). The fetch blocks the loop (heartbeats wait) for as long
  // as the copy takes.
  absl::Status PrepareCheckpoints(const TrainingAssignment& assignment) {
    if (!checkpoints_) return absl::OkStatus();
    checkpoint::PreparedLaunch prepared = checkpoints_->PrepareLaunch(CheckpointLaunchFor(assignment));
    SendCheckpointEvents(std::move(prepared.events));
    return prepared.status;
  }

  absl::Time Now() const { return options_.clock->Now(); }

  // ---- state -----------------------------------------------------------------

  SupervisorView View() const {
    SupervisorView view;
    view.idle = supervisor_->Idle();
    view.stopping = supervisor_->stopping();
    for (const ProcessStatus& p : supervisor_->Processes()) {
      if (p.running) view.any_running = true;
      if (p.signal != 0 || p.exit_code != 0) view.any_failed = true;
    }
    return view;
  }

  std::optional<uint64_t> RunningAttempt() const {
    if (!commands_.running_assignment()) return std::nullopt;
    return commands_.running_assignment()->attempt;
  }

  v1::TrainingState State() const {
    v1::TrainingState state;
    state.set_phase(PhaseToProto(commands_.Phase(View())));
    if (commands_.running_assignment()) state.set_attempt(commands_.running_assignment()->attempt);
    if (commands_.started()) {
      for (const ProcessStatus& p : supervisor_->Processes()) FillProcessState(p, state.add_processes());
      *state.mutable_code() = CodeToProto(commands_.running_code());
    }
    return state;
  }

  // ---- stream ----------------------------------------------------------------

  void OnStreamOpen(uint64_t session) {
    session_ = session;
    registered_ = false;
    v1::AgentMessage message;
    v1::Register* reg = message.mutable_register_();
    reg->set_job_namespace(options_.job_namespace);
    reg->set_job_name(options_.job_name);
    reg->set_pod_name(options_.pod_name);
    reg->set_machine_id(options_.machine_id);
    reg->set_role(RoleToProto(commands_.role()));
    if (commands_.role() == AgentRole::kActive && commands_.running_assignment()) {
      *reg->mutable_assignment() = AssignmentToProto(*commands_.running_assignment());
    }
    reg->set_agent_version(options_.agent_version);
    reg->set_agent_start_time(UnixNanos(start_time_));
    if (checkpoints_) reg->set_data_address(checkpoints_->data_address());
    *reg->mutable_training() = State();
    for (const std::string& id : commands_.executed_ids()) reg->add_executed_command_ids(id);
    if (commands_.role() == AgentRole::kStandby) {
      SelfCheckOutcome check = RunSelfCheck(options_.log_dir);
      reg->mutable_self_check()->set_passed(check.passed);
      reg->mutable_self_check()->set_detail(check.detail);
      reg->mutable_self_check()->set_checked_at(UnixNanos(Now()));
    }
    link_->Send(session, message);  // a failed write ends the stream; the link reconnects
  }

  void OnStreamClosed(uint64_t session, const absl::Status& status) {
    if (session != session_) return;
    if (registered_) {
      std::fprintf(stderr, "peregrine-agent: controller stream closed: %s\n", status.ToString().c_str());
    }
    session_ = 0;
    registered_ = false;
  }

  void OnMessage(uint64_t session, const v1::ControllerMessage& message) {
    if (session != session_) return;
    switch (message.body_case()) {
      case v1::ControllerMessage::kRegisterAck:
        OnRegisterAck(message.register_ack());
        break;
      case v1::ControllerMessage::kCommand:
        if (registered_) {
          Execute(commands_.OnCommand(CommandFromProto(message.command()), View(), Now()));
          RunQueuedWork();
        }
        break;
      case v1::ControllerMessage::kCheckpointCommit:
        if (registered_ && checkpoints_) checkpoints_->ApplyCommit(message.checkpoint_commit(), RunningAttempt());
        break;
      case v1::ControllerMessage::kReject:
        std::fprintf(stderr, "peregrine-agent: controller rejected a message: %s\n",
                     message.reject().reason().c_str());
        break;
      default:
        break;  // unknown bodies are ignored (forward compatible)
    }
  }

  void OnRegisterAck(const v1::RegisterAck& ack) {
    registered_ = true;
    link_->MarkRegistered(session_);
    if (ack.heartbeat_interval_ms() > 0) heartbeat_interval_ = absl::Milliseconds(ack.heartbeat_interval_ms());
    // The job's data token first (a restore the ack leads to fetches with it), then the
    // plan's updates (committed step, the slots to hold for) reach a running store.
    if (checkpoints_) {
      checkpoints_->SetDataToken(ack.data_token());
      absl::Status configured = checkpoints_->ApplyAssignment(ack.assignment(), RunningAttempt());
      if (!configured.ok()) ReportLog(absl::StrCat("checkpoint store: ", configured.ToString()));
    }
    Execute(commands_.OnRegisterAck(DesiredStateFromProto(ack)));
    RunQueuedWork();
    while (!pending_events_.empty() && registered_) {
      v1::AgentMessage message;
      *message.mutable_event() = pending_events_.front();
      if (!link_->Send(session_, message)) break;
      pending_events_.pop_front();
    }
    SendHeartbeat();
  }

  // ---- sending ---------------------------------------------------------------

  void SendHeartbeat() {
    next_heartbeat_ = Now() + heartbeat_interval_;
    if (!registered_) return;
    v1::AgentMessage message;
    v1::Heartbeat* hb = message.mutable_heartbeat();
    hb->set_sent_at(UnixNanos(Now()));
    *hb->mutable_training() = State();
    for (auto& [rank, progress] : progress_) {
      if (!progress.Current().has_progress) continue;
      FillIterationSummary(rank, progress.TakeWindow(), hb->add_iterations());
    }
    if (inspections_) {
      for (v1::InspectionResult& r : inspections_->Latest()) *hb->add_inspections() = std::move(r);
    }
    if (failslow_) failslow_->FillCommProfiles(hb->mutable_comm_profiles());
    if (checkpoints_) *hb->mutable_checkpoint() = checkpoints_->Report();
    link_->Send(session_, message);
  }

  void SendEvent(v1::Event event) {
    if (registered_) {
      v1::AgentMessage message;
      *message.mutable_event() = event;
      if (link_->Send(session_, message)) return;
    }
    if (pending_events_.size() >= kMaxPendingEvents) pending_events_.pop_front();
    pending_events_.push_back(std::move(event));
  }

  void ReportLog(const std::string& text) {
    std::fprintf(stderr, "peregrine-agent: %s\n", text.c_str());
    v1::Event event;
    event.set_at(UnixNanos(Now()));
    event.set_log(text);
    SendEvent(std::move(event));
  }

  // ---- executing the command state machine's actions --------------------------

  // Runs the state machine's queued work until it waits for the supervisor; a
  // heartbeat follows each stop it begins.
  void RunQueuedWork() {
    for (;;) {
      std::vector<AgentAction> actions = commands_.Advance(View());
      if (actions.empty()) return;
      const bool stops = std::holds_alternative<StopAction>(actions.front());
      Execute(std::move(actions));
      if (stops && registered_) SendHeartbeat();
    }
  }

  void Execute(std::vector<AgentAction> actions) {
    for (AgentAction& action : actions) {
      std::visit([this](auto& a) { Run(a); }, action);
    }
  }

  void Run(const StopAction& stop) { supervisor_->BeginStop(stop.grace, Now()); }

  void Run(const StartAction& start) {
    absl::Status status = Launch(start.assignment);
    std::vector<AgentAction> follow = commands_.OnStartResult(start, status);
    if (status.ok()) {
      progress_.clear();
      const TrainingAssignment& a = start.assignment;
      v1::Event event;
      event.set_at(UnixNanos(Now()));
      event.set_training_started(absl::StrCat("attempt ", a.attempt, ": ", a.ranks.size(), " process(es) of \"",
                                              absl::StrJoin(a.code.command, " "), "\" resume_step ",
                                              a.resume_step));
      SendEvent(std::move(event));
      if (registered_) SendHeartbeat();
    }
    Execute(std::move(follow));
  }

  void Run(const SignalAction& signal) { supervisor_->SignalAll(signal.pause ? SIGSTOP : SIGCONT); }
  void Run(const FinishAction& finish) { FinishWith(finish.id, OutcomeToProto(finish.outcome)); }

  void Run(const ResendAction& resend) {
    v1::AgentMessage message;
    if (!message.mutable_command_result()->ParseFromString(resend.record)) return;
    link_->Send(session_, message);
  }

  void Run(const CaptureStacksAction& capture) {
    const std::string id = capture.id;
    const bool include_native = capture.include_native;
    std::vector<StackTarget> roots;
    for (const ProcessStatus& p : supervisor_->LiveProcesses()) roots.push_back(StackTarget{p.pid, p.global_rank});
    if (roots.empty()) {
      FinishWith(id, OutcomeToProto(CommandOutcome{absl::StatusCode::kFailedPrecondition,
                                                   "capture_stacks: no training process is running"}));
      return;
    }
    StackCaptureOptions capture_options;
    capture_options.include_native = include_native;
    capture_options.clock = options_.clock;
    // The agent bundle's bin/ carries eu-stack and gdb (docker/Dockerfile) for training
    // images that have neither.
    if (const std::string bundle = ClientDirFor(options_); !bundle.empty()) capture_options.tool_dir = bundle + "/bin";
    absl::Status submitted =
        captures_->Submit(std::move(roots), capture_options, [this, id](std::vector<CapturedStack> captured) {
          // Parsed here, off the control loop, so the controller gets frames, not text to parse.
          v1::StackCapture stacks = StacksToProto(captured);
          Post([this, id, stacks = std::move(stacks)] { FinishWith(id, v1::Status(), &stacks); });
        });
    if (!submitted.ok()) FinishWith(id, OutcomeToProto(CommandOutcome::FromStatus(submitted)));
  }

  // Runs off the loop (agent/diagnostics); the result comes back through Post.
  void Run(const DiagnosticAction& diagnostic) {
    const std::string id = diagnostic.id;
    absl::Status submitted = diagnostics_->Submit(
        MakeDiagnosticRequest(id, options_.machine_id, diagnostic.task),
        [this, id](const v1::Status& status, const v1::DiagnosticResult& result) {
          Post([this, id, status, result] { FinishWith(id, status, nullptr, &result); });
        });
    if (!submitted.ok()) FinishWith(id, OutcomeToProto(CommandOutcome::FromStatus(submitted)));
  }

  void Run(const NcclModeAction& mode) { failslow_->SetMode(mode.profiling, mode.trap); }
  void Run(const MicroBatchPlanAction& plan) {
    FinishWith(plan.id, OutcomeToProto(CommandOutcome::FromStatus(WriteMicroBatchPlan(plan_path_, plan.plan))));
  }
  void Run(const LogAction& log) { ReportLog(log.text); }

  // Builds the processes of `assignment` and starts them; nothing runs on error.
  absl::Status Launch(const TrainingAssignment& assignment) {
    PEREGRINE_CHECK(supervisor_->Idle()) << "Launch with live processes";
    if (absl::Status ready = PrepareCheckpoints(assignment); !ready.ok()) return ready;
    if (absl::Status cleared = ClearMicroBatchPlan(plan_path_); !cleared.ok()) return cleared;
    absl::StatusOr<std::vector<ProcessSpec>> plan =
        PrepareLaunch(options_, assignment, failslow_.get(), checkpoints_ ? checkpoints_->store() : nullptr);
    if (!plan.ok()) return plan.status();
    return supervisor_->Start(std::move(*plan));
  }

  // The one place a command's result is made: stored for resends, sent when registered
  // (if lost, the controller re-sends the id and gets the stored result).
  void FinishWith(const std::string& id, const v1::Status& status, const v1::StackCapture* stacks = nullptr,
                  const v1::DiagnosticResult* diagnostic = nullptr) {
    v1::CommandResult result;
    result.set_command_id(id);
    *result.mutable_status() = status;
    result.set_finished_at(UnixNanos(Now()));
    if (stacks != nullptr) *result.mutable_stacks() = *stacks;
    if (diagnostic != nullptr) *result.mutable_diagnostic() = *diagnostic;
    commands_.RecordResult(id, result.SerializeAsString());
    if (registered_) {
      v1::AgentMessage message;
      *message.mutable_command_result() = std::move(result);
      link_->Send(session_, message);
    }
  }

  void BeginShutdown() {
    if (commands_.shutting_down()) return;
    exit_code_ = commands_.Phase(View()) == AgentPhase::kSucceeded ? 0 : 143;
    Execute(commands_.BeginShutdown(View()));
  }


  const AgentOptions options_;
  absl::Duration heartbeat_interval_;
  const absl::Time start_time_;
  const std::string plan_path_ = MicroBatchPlanPathFor(options_.log_dir, options_.pod_name);

  // Cross-thread plumbing.
  int wake_fd_ = -1;
  int signal_fd_ = -1;
  std::mutex post_mu_;
  std::deque<std::function<void()>> posted_;
  bool loop_finished_ = false;  // guarded by post_mu_
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  bool done_ = false;  // guarded by done_mu_
  int exit_code_ = 143;  // written by the loop before done_
  // Stack captures run here, one at a time (a bounded queue): the thread count stays flat.
  std::unique_ptr<StackCaptureWorker> captures_ = std::make_unique<StackCaptureWorker>();
  std::thread loop_thread_;
  std::unique_ptr<ControllerLink> link_;
  std::unique_ptr<DiagnosticRunner> diagnostics_;
  std::unique_ptr<checkpoint::AgentCheckpoints> checkpoints_;  // null when checkpoints are off

  // Control-loop state.
  CommandState commands_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<FailSlowMonitor> failslow_;
  absl::Time next_failslow_poll_ = absl::InfinitePast();
  std::unique_ptr<InspectionRunner> inspections_;
  bool finished_ = false;
  uint64_t session_ = 0;
  bool registered_ = false;
  absl::Time next_heartbeat_ = absl::InfinitePast();
  std::map<int, RankProgress> progress_;
  std::deque<v1::Event> pending_events_;
};

absl::StatusOr<std::unique_ptr<Agent>> Agent::BuildAndStart(AgentOptions options) {
  if (options.controller.empty()) return absl::InvalidArgumentError("--controller is required (HOST:PORT)");
  if (options.job_name.empty()) return absl::InvalidArgumentError("--job is required (NAMESPACE/NAME)");
  if (options.pod_name.empty()) return absl::InvalidArgumentError("--pod is required");
  if (options.machine_id.empty()) options.machine_id = options.pod_name;
  auto impl = std::make_unique<Impl>(std::move(options));
  absl::Status status = impl->Start();
  if (!status.ok()) return status;
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;
void Agent::RequestShutdown() { impl_->RequestShutdown(); }
int Agent::Wait() { return impl_->Wait(); }

}  // namespace peregrine
