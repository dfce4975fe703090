#include "agent/agent.h"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/controller_link.h"
#include "agent/diagnostics/diagnostic_runner.h"
#include "agent/failslow_monitor.h"
#include "agent/inspection_runner.h"
#include "agent/launch_plan.h"
#include "agent/progress_parser.h"
#include "agent/self_check.h"
#include "agent/signal_pipe.h"
#include "agent/stack_capture.h"
#include "agent/supervisor.h"
#include "diagnosis/check.h"
#include "diagnosis/stack_parse.h"

extern char** environ;

namespace peregrine {

namespace v1 = ::peregrine::v1;

namespace {

constexpr size_t kExecutedCommandMemory = 256;
constexpr size_t kMaxPendingEvents = 1024;
constexpr int kFailedPrecondition = 9;
constexpr int kInvalidArgument = 3;

int64_t UnixNanos(absl::Time t) { return absl::ToUnixNanos(t); }

v1::Status ToProto(const absl::Status& status) {
  v1::Status out;
  out.set_code(static_cast<int32_t>(status.code()));
  out.set_message(std::string(status.message()));
  return out;
}

}  // namespace

class Agent::Impl {
 public:
  explicit Impl(AgentOptions options)
      : options_(std::move(options)),
        heartbeat_interval_(absl::Milliseconds(options_.heartbeat_ms == 0 ? 1000 : options_.heartbeat_ms)),
        start_time_(absl::Now()) {
    role_ = options_.role == AgentRoleOption::kStandby ? v1::AGENT_ROLE_STANDBY : v1::AGENT_ROLE_ACTIVE;
  }

  ~Impl() {
    if (loop_thread_.joinable()) {
      RequestShutdown();
      Wait();
    }
    diagnostics_.reset();  // kills a running diagnostic's helper, drops queued ones
    if (link_) link_->Stop();
    JoinWorkers();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  absl::Status Start() {
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
    supervisor_ = std::make_unique<Supervisor>();
    if (!options_.nccl_hook.empty()) {
      // Rings live in memory (/dev/shm, a tmpfs) in a directory private to this agent
      // process, unless the agent's environment names one (PEREGRINE_NCCL_RING_DIR): a
      // disk-backed log volume would put page-cache writeback and a full disk under the
      // training processes' NCCL calls. The hook reserves each ring in full at creation
      // and forwards unrecorded when it cannot (reported through TakeRingFailures).
      FailSlowMonitorOptions monitor;
      const char* ring_dir_env = std::getenv("PEREGRINE_NCCL_RING_DIR");
      std::error_code shm_ec;
      if (ring_dir_env != nullptr && *ring_dir_env != '\0') {
        monitor.ring_dir = ring_dir_env;
      } else if (std::filesystem::is_directory("/dev/shm", shm_ec)) {
        RemoveDeadAgentRingDirs("/dev/shm");  // of agents killed before they could clean up
        monitor.ring_dir = absl::StrCat("/dev/shm/peregrine-nccl-", options_.pod_name, "-", ::getpid());
        monitor.remove_ring_dir_on_exit = true;
      } else {
        monitor.ring_dir = options_.log_dir.empty() ? absl::StrCat("/tmp/peregrine-nccl-", options_.pod_name)
                                                    : absl::StrCat(options_.log_dir, "/nccl-rings");
      }
      absl::StatusOr<std::unique_ptr<FailSlowMonitor>> created = FailSlowMonitor::Create(monitor);
      if (!created.ok()) return created.status();
      failslow_ = std::move(*created);
    }
    if (options_.inspections) {
      std::string sim_dir;
      if (!options_.sim_machine_root.empty()) {
        sim_dir = absl::StrCat(options_.sim_machine_root, "/", options_.machine_id);
        if (absl::Status s = PrepareStandInMachine(sim_dir); !s.ok()) return s;
      }
      InspectionRunnerOptions inspect;
      inspect.kmsg_path = options_.kmsg_path;
      inspect.sysfs_root = options_.sysfs_root;
      inspect.use_dmesg_fallback = sim_dir.empty();
      if (!options_.log_dir.empty()) inspect.volumes.push_back(options_.log_dir);
      inspections_ = std::make_unique<InspectionRunner>(inspect);
    }
    if (!options_.log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(options_.log_dir, ec);
      if (ec) {
        return absl::FailedPreconditionError(
            absl::StrCat("--log-dir ", options_.log_dir, ": ", ec.message()));
      }
    }
    {
      DiagnosticRunnerOptions diag;
      diag.helper_binary = options_.diagnose_binary;
      if (diag.helper_binary.empty()) {
        std::error_code ec;
        std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
        diag.helper_binary = (ec ? std::filesystem::path(".") : self.parent_path()) / "peregrine-diagnose";
      }
      diag.scratch_dir = options_.log_dir.empty() ? absl::StrCat("/tmp/peregrine-diagnostics-", options_.pod_name)
                                                  : absl::StrCat(options_.log_dir, "/diagnostics");
      diag.spawn = [](const std::vector<std::string>& argv, absl::Duration timeout) -> absl::StatusOr<HelperRun> {
        absl::StatusOr<ToolRun> run = RunTool(argv, timeout, 1 << 20);
        if (!run.ok()) return run.status();
        return HelperRun{run->exit_code, run->signal, run->timed_out, std::move(run->output)};
      };
      diagnostics_ = std::make_unique<DiagnosticRunner>(std::move(diag));
    }
    ControllerLinkOptions link_options;
    link_options.target = options_.controller;
    link_options.token_file = options_.token_file;
    link_options.tls_ca_file = options_.tls_ca_file;
    link_options.backoff_initial = options_.backoff_initial;
    link_options.backoff_max = options_.backoff_max;
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
      absl::Time now = absl::Now();
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
      RunContinuations();
      if (registered_ && absl::Now() >= next_heartbeat_) SendHeartbeat();
      if (shutting_down_ && supervisor_->Idle() && !supervisor_->stopping()) {
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
    PollResult result = supervisor_->Poll(absl::Now(), sweep);
    const absl::Time now = absl::Now();
    for (const OutputLine& line : result.lines) {
      if (std::optional<ProgressRecord> record = ParseProgressLine(line.text)) {
        progress_[line.global_rank].Observe(*record, now);
      }
    }
    for (const ProcessExitReport& exit : result.exits) {
      if (exit.during_stop || intentional_stop_) continue;
      v1::Event event;
      event.set_at(UnixNanos(now));
      v1::ProcessExit* pe = event.mutable_process_exit();
      pe->set_global_rank(static_cast<uint32_t>(std::max(exit.global_rank, 0)));
      pe->set_pid(exit.pid);
      pe->set_exit_code(exit.exit_code);
      pe->set_signal(exit.signal);
      for (const std::string& line : exit.tail) pe->add_last_log_lines(line);
      pe->set_attempt(assignment_ ? assignment_->attempt() : 0);
      auto it = progress_.find(exit.global_rank);
      if (it != progress_.end()) pe->set_last_completed_step(it->second.Current().last_completed_step);
      SendEvent(std::move(event));
    }
    if (!result.exits.empty() && registered_) SendHeartbeat();  // the phase may have changed
  }

  // Machine inspections: alarms go out as events at once, results with the heartbeat.
  void PollInspections() {
    if (!inspections_ || shutting_down_) return;
    const absl::Time now = absl::Now();
    InspectionRunner::Outcome outcome = inspections_->Poll(now);
    for (v1::InspectionResult& alarm : outcome.alarms) {
      v1::Event event;
      event.set_at(UnixNanos(now));
      *event.mutable_inspection_alarm() = std::move(alarm);
      SendEvent(std::move(event));
    }
  }

  // Fail-slow tracking: reads the NCCL rings every ~100 ms; verified changes go out as
  // events at once.
  void PollFailSlow() {
    if (!failslow_ || shutting_down_) return;
    const absl::Time now = absl::Now();
    if (now < next_failslow_poll_) return;
    next_failslow_poll_ = now + absl::Milliseconds(100);
    timespec mono{};
    ::clock_gettime(CLOCK_MONOTONIC, &mono);
    const int64_t mono_ns = static_cast<int64_t>(mono.tv_sec) * 1'000'000'000 + mono.tv_nsec;
    for (v1::FailSlowEvent& fs : failslow_->Poll(UnixNanos(now), mono_ns)) {
      v1::Event event;
      event.set_at(UnixNanos(now));
      *event.mutable_fail_slow() = std::move(fs);
      SendEvent(std::move(event));
    }
    if (pending_trap_) {
      const FailSlowMonitor::PauseCheck check = failslow_->CheckPaused();
      if (check.paused) {
        Finish(pending_trap_->id, absl::OkStatus());
        pending_trap_.reset();
      } else if (now >= pending_trap_->deadline) {
        Finish(pending_trap_->id,
               absl::DeadlineExceededError(absl::StrCat("nccl_mode trap: training did not pause within ",
                                                        absl::FormatDuration(kTrapPauseDeadline),
                                                        "; waiting for ", check.waiting_for)));
        pending_trap_.reset();
      }
    }
    for (const NcclRingFailure& f : failslow_->TakeRingFailures()) {
      ReportLog(absl::StrCat("NCCL hook of rank ", f.global_rank, " (pid ", f.pid,
                             ") runs without a ring, so that rank is not tracked for fail-slow: ", f.reason));
    }
  }

  // ---- state -----------------------------------------------------------------

  bool AnyRunning() const {
    for (const ProcessStatus& p : supervisor_->Processes()) {
      if (p.running) return true;
    }
    return false;
  }

  v1::TrainingPhase Phase() const {
    if (supervisor_->stopping()) return v1::TRAINING_PHASE_STOPPING;
    if (!started_ || intentional_stop_) {
      return supervisor_->Idle() ? v1::TRAINING_PHASE_IDLE : v1::TRAINING_PHASE_STOPPING;
    }
    if (AnyRunning()) return paused_ ? v1::TRAINING_PHASE_PAUSED : v1::TRAINING_PHASE_RUNNING;
    for (const ProcessStatus& p : supervisor_->Processes()) {
      if (p.signal != 0 || p.exit_code != 0) return v1::TRAINING_PHASE_EXITED;
    }
    return v1::TRAINING_PHASE_SUCCEEDED;
  }

  v1::TrainingState State() const {
    v1::TrainingState state;
    state.set_phase(Phase());
    if (assignment_) state.set_attempt(assignment_->attempt());
    if (started_) {
      for (const ProcessStatus& p : supervisor_->Processes()) {
        v1::ProcessState* ps = state.add_processes();
        ps->set_global_rank(static_cast<uint32_t>(std::max(p.global_rank, 0)));
        ps->set_pid(p.pid);
        ps->set_running(p.running);
        ps->set_exit_code(p.exit_code);
        ps->set_signal(p.signal);
      }
      *state.mutable_code() = running_code_;
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
    reg->set_role(role_);
    if (role_ == v1::AGENT_ROLE_ACTIVE && assignment_) *reg->mutable_assignment() = *assignment_;
    reg->set_agent_version(options_.agent_version);
    reg->set_agent_start_time(UnixNanos(start_time_));
    *reg->mutable_training() = State();
    for (const std::string& id : executed_order_) reg->add_executed_command_ids(id);
    if (role_ == v1::AGENT_ROLE_STANDBY) {
      SelfCheckOutcome check = RunSelfCheck(options_.log_dir);
      reg->mutable_self_check()->set_passed(check.passed);
      reg->mutable_self_check()->set_detail(check.detail);
      reg->mutable_self_check()->set_checked_at(UnixNanos(absl::Now()));
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
        if (registered_) OnCommand(message.command());
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
    if (ack.role() != v1::AGENT_ROLE_UNSPECIFIED) role_ = ack.role();
    if (ack.assignment().ranks_size() > 0) acked_assignment_ = ack.assignment();
    if (!shutting_down_) Converge(ack);
    while (!pending_events_.empty() && registered_) {
      v1::AgentMessage message;
      *message.mutable_event() = pending_events_.front();
      if (!link_->Send(session_, message)) break;
      pending_events_.pop_front();
    }
    SendHeartbeat();
  }

  // Level-based: make what runs match what the controller believes.
  void Converge(const v1::RegisterAck& ack) {
    if (role_ == v1::AGENT_ROLE_ACTIVE && ack.assignment().attempt() > 0) {
      if (target_attempt_ == ack.assignment().attempt()) return;  // running, or about to
      target_attempt_ = ack.assignment().attempt();
      StopThen(absl::Milliseconds(options_.grace_ms), [this, a = ack.assignment()] {
        absl::Status status = StartTraining(a);
        if (!status.ok()) ReportLog(absl::StrCat("cannot start attempt ", a.attempt(), ": ", status.ToString()));
      });
      return;
    }
    if (started_ && !intentional_stop_) {
      target_attempt_ = 0;
      StopThen(absl::Milliseconds(options_.grace_ms), [] {});
    }
  }

  // ---- sending ---------------------------------------------------------------

  void SendHeartbeat() {
    next_heartbeat_ = absl::Now() + heartbeat_interval_;
    if (!registered_) return;
    v1::AgentMessage message;
    v1::Heartbeat* hb = message.mutable_heartbeat();
    hb->set_sent_at(UnixNanos(absl::Now()));
    *hb->mutable_training() = State();
    for (auto& [rank, progress] : progress_) {
      if (!progress.Current().has_progress) continue;
      ProgressWindow window = progress.TakeWindow();
      v1::IterationSummary* it = hb->add_iterations();
      it->set_global_rank(static_cast<uint32_t>(std::max(rank, 0)));
      it->set_last_completed_step(window.last_completed_step);
      it->set_last_loss(window.last_loss);
      it->set_last_grad_norm(window.last_grad_norm);
      it->set_mean_iteration_seconds(window.mean_iteration_seconds);
      it->set_steps_in_window(window.steps_in_window);
      it->set_last_step_time(UnixNanos(window.last_step_time));
    }
    if (inspections_) {
      for (v1::InspectionResult& r : inspections_->Latest()) *hb->add_inspections() = std::move(r);
    }
    if (failslow_) failslow_->FillCommProfiles(hb->mutable_comm_profiles());
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
    event.set_at(UnixNanos(absl::Now()));
    event.set_log(text);
    SendEvent(std::move(event));
  }

  // ---- training --------------------------------------------------------------

  // Runs `then` once no training process is left, stopping them first.
  // Continuations run in order, each after its own stop.
  void StopThen(absl::Duration grace, std::function<void()> then) {
    continuations_.push_back(Continuation{grace, std::move(then)});
    RunContinuations();
  }

  void RunContinuations() {
    while (!continuations_.empty() && !shutting_down_) {
      if (!supervisor_->Idle()) {
        if (!supervisor_->stopping()) {
          intentional_stop_ = true;
          paused_ = false;
          supervisor_->BeginStop(continuations_.front().grace, absl::Now());
          if (registered_) SendHeartbeat();
        }
        return;
      }
      Continuation next = std::move(continuations_.front());
      continuations_.pop_front();
      next.then();
    }
  }

  absl::Status StartTraining(v1::Assignment assignment) {
    PEREGRINE_CHECK(supervisor_->Idle()) << "StartTraining with live processes";
    if (pending_code_) *assignment.mutable_code() = *pending_code_;
    LaunchContext context;
    for (char** e = environ; *e != nullptr; ++e) context.agent_env.emplace_back(*e);
    context.machine_id = options_.machine_id;
    context.log_dir = options_.log_dir;
    context.started_at = absl::FormatTime(absl::RFC3339_sec, absl::Now(), absl::UTCTimeZone());
    absl::StatusOr<std::vector<ProcessSpec>> plan = BuildLaunchPlan(assignment, context);
    if (!plan.ok()) return plan.status();
    if (failslow_) {
      for (ProcessSpec& spec : *plan) {
        AddNcclHookEnvironment(options_.nccl_hook, failslow_->ring_dir(), failslow_->profiling(), failslow_->trap(),
                               &spec.env);
      }
      failslow_->Reset();
    }
    absl::Status status = supervisor_->Start(std::move(*plan));
    if (!status.ok()) return status;
    pending_code_.reset();
    assignment_ = assignment;
    target_attempt_ = assignment.attempt();
    running_code_ = assignment.code();
    started_ = true;
    intentional_stop_ = false;
    paused_ = false;
    progress_.clear();
    v1::Event event;
    event.set_at(UnixNanos(absl::Now()));
    event.set_training_started(absl::StrCat("attempt ", assignment.attempt(), ": ", assignment.ranks_size(),
                                            " process(es) of \"", absl::StrJoin(assignment.code().command(), " "),
                                            "\" resume_step ", assignment.resume_step()));
    SendEvent(std::move(event));
    if (registered_) SendHeartbeat();
    return absl::OkStatus();
  }

  // ---- commands --------------------------------------------------------------

  void OnCommand(const v1::Command& command) {
    const std::string& id = command.id();
    if (auto it = executed_.find(id); it != executed_.end()) {
      v1::AgentMessage message;
      *message.mutable_command_result() = it->second;
      link_->Send(session_, message);
      return;
    }
    if (in_progress_.contains(id)) return;  // the result follows when it is done
    in_progress_.insert(id);
    const absl::Duration default_grace = absl::Milliseconds(options_.grace_ms);
    switch (command.kind_case()) {
      case v1::Command::kRestartInPlace: {
        const auto& restart = command.restart_in_place();
        Restart(id, restart.assignment(), absl::Milliseconds(restart.grace_ms()));
        break;
      }
      case v1::Command::kActivate:
        role_ = v1::AGENT_ROLE_ACTIVE;
        Restart(id, command.activate().assignment(), default_grace);
        break;
      case v1::Command::kStop:
        target_attempt_ = 0;
        StopThen(absl::Milliseconds(command.stop().grace_ms()), [this, id] {
          intentional_stop_ = true;
          Finish(id, absl::OkStatus());
        });
        break;
      case v1::Command::kPause:
        if (!AnyRunning()) {
          Finish(id, absl::FailedPreconditionError("pause: no training process is running"));
        } else {
          supervisor_->SignalAll(SIGSTOP);
          paused_ = true;
          Finish(id, absl::OkStatus());
        }
        break;
      case v1::Command::kResume:
        if (!AnyRunning()) {
          Finish(id, absl::FailedPreconditionError("resume: no training process is running"));
        } else {
          supervisor_->SignalAll(SIGCONT);
          paused_ = false;
          Finish(id, absl::OkStatus());
        }
        break;
      case v1::Command::kCaptureStacks:
        CaptureStacksAsync(id, command.capture_stacks().include_native());
        break;
      case v1::Command::kRunDiagnostic:
        RunDiagnosticAsync(id, command.run_diagnostic());
        break;
      case v1::Command::kNcclMode:
        if (!failslow_) {
          Finish(id, absl::FailedPreconditionError("nccl_mode: this agent runs without the NCCL hook (--nccl-hook)"));
        } else {
          if (pending_trap_) {
            Finish(pending_trap_->id, absl::AbortedError("nccl_mode: superseded by a newer nccl_mode command"));
            pending_trap_.reset();
          }
          failslow_->SetMode(command.nccl_mode().profiling(), command.nccl_mode().trap());
          if (command.nccl_mode().trap()) {
            // Acknowledged by PollFailSlow once every live ring is really paused.
            pending_trap_ = PendingTrap{id, absl::Now() + kTrapPauseDeadline};
          } else {
            Finish(id, absl::OkStatus());
          }
        }
        break;
      case v1::Command::kHotUpdate: {
        const auto& update = command.hot_update();
        if (!update.urgent()) {
          pending_code_ = update.code();
          v1::Status status;
          status.set_message("deferred: the code is applied at the next restart or activation");
          FinishWith(id, status, nullptr);
          break;
        }
        v1::Assignment assignment = update.assignment().ranks_size() > 0
                                        ? update.assignment()
                                        : (assignment_ ? *assignment_ : update.assignment());
        *assignment.mutable_code() = update.code();
        pending_code_.reset();
        Restart(id, assignment, default_grace);
        break;
      }
      default: {
        v1::Status status;
        status.set_code(kInvalidArgument);
        status.set_message("command has no kind this agent knows");
        FinishWith(id, status, nullptr);
        break;
      }
    }
  }

  void Restart(const std::string& id, const v1::Assignment& assignment, absl::Duration grace) {
    target_attempt_ = assignment.attempt();
    StopThen(grace, [this, id, assignment] {
      absl::Status status = StartTraining(assignment);
      if (!status.ok()) {
        target_attempt_ = 0;
        intentional_stop_ = true;
      }
      Finish(id, status);
    });
  }

  void CaptureStacksAsync(const std::string& id, bool include_native) {
    std::vector<StackTarget> roots;
    for (const ProcessStatus& p : supervisor_->LiveProcesses()) roots.push_back(StackTarget{p.pid, p.global_rank});
    if (roots.empty()) {
      Finish(id, absl::FailedPreconditionError("capture_stacks: no training process is running"));
      return;
    }
    std::lock_guard<std::mutex> lock(workers_mu_);
    workers_.emplace_back([this, id, roots, include_native] {
      StackCaptureOptions capture_options;
      capture_options.include_native = include_native;
      std::vector<CapturedStack> stacks = CaptureStacks(WithDescendants(roots), capture_options);
      // Parsed here, off the control loop, so the controller gets frames, not text to parse.
      v1::StackCapture capture;
      for (const CapturedStack& s : stacks) {
        v1::ProcessStacks* ps = capture.add_processes();
        ps->set_pid(s.pid);
        ps->set_global_rank(s.global_rank);
        ps->set_command(s.command);
        ps->set_tool(s.tool);
        ps->set_raw(s.raw);
        if (s.ok) AddParsedThreads(s, ps);
      }
      Post([this, id, capture = std::move(capture)] {
        v1::Status status;
        FinishWith(id, status, &capture);
      });
    });
  }

  // The frames of a captured stack (diagnosis/stack_parse.h); text that does not parse
  // leaves only the raw text (the controller then counts the rank as not captured).
  static void AddParsedThreads(const CapturedStack& s, v1::ProcessStacks* ps) {
    for (StackTool tool : {StackTool::kPySpy, StackTool::kEuStack, StackTool::kGdb}) {
      if (s.tool != StackToolName(tool)) continue;
      absl::StatusOr<std::vector<ProcessStack>> parsed = ParseStackText(tool, s.raw, s.pid);
      if (!parsed.ok()) return;
      for (const ProcessStack& p : *parsed) {
        for (const ThreadStack& t : p.threads) {
          v1::ThreadStack* wt = ps->add_threads();
          wt->set_thread_id(t.thread_id);
          wt->set_thread_name(t.thread_name);
          for (const StackFrame& f : t.frames) {
            v1::StackFrame* wf = wt->add_frames();
            wf->set_function(f.function);
            wf->set_file(f.file);
            wf->set_line(static_cast<uint32_t>(std::max(f.line, 0)));
            wf->set_module(f.module);
            wf->set_address(f.address);
          }
        }
      }
    }
  }

  // Runs off the loop (agent/diagnostics); the result comes back through Post. The
  // machine's ranks come from the assignment the agent holds; a standby uses the params.
  void RunDiagnosticAsync(const std::string& id, const v1::RunDiagnostic& command) {
    DiagnosticRequest request;
    request.command_id = id;
    request.kind = command.kind();
    request.params.insert(command.params().begin(), command.params().end());
    request.timeout_ms = command.timeout_ms();
    request.machine_id = options_.machine_id;
    int gpus = options_.gpus_per_machine > 0 ? options_.gpus_per_machine : 1;
    int rank_base = 0;
    const std::optional<v1::Assignment>& held = assignment_ ? assignment_ : acked_assignment_;
    if (held && held->layout().gpus_per_machine() > 0) {
      gpus = static_cast<int>(held->layout().gpus_per_machine());
      rank_base = static_cast<int>(held->machine_index()) * gpus;
      request.command.assign(held->code().command().begin(), held->code().command().end());
      for (const auto& [key, value] : held->code().env()) request.code_env.emplace_back(key, value);
    } else if (auto it = request.params.find("rank_base"); it != request.params.end()) {
      if (!absl::SimpleAtoi(it->second, &rank_base) || rank_base < 0) {
        Finish(id, absl::InvalidArgumentError(
                       absl::StrCat(request.kind, ": param rank_base: expected a non-negative integer, got \"",
                                    it->second, "\"")));
        return;
      }
    }
    if (auto it = request.params.find("gpus"); it != request.params.end()) {
      if (!absl::SimpleAtoi(it->second, &gpus) || gpus < 1 || gpus > 1024) {
        Finish(id, absl::InvalidArgumentError(absl::StrCat(
                       request.kind, ": param gpus: expected an integer in [1, 1024], got \"", it->second, "\"")));
        return;
      }
    }
    request.gpus = gpus;
    request.rank_base = rank_base;
    absl::Status submitted = diagnostics_->Submit(
        std::move(request), [this, id](const v1::Status& status, const v1::DiagnosticResult& result) {
          Post([this, id, status, result] { FinishWith(id, status, nullptr, &result); });
        });
    if (!submitted.ok()) Finish(id, submitted);
  }

  void Finish(const std::string& id, const absl::Status& status) { FinishWith(id, ToProto(status), nullptr); }

  void FinishWith(const std::string& id, const v1::Status& status, const v1::StackCapture* stacks,
                  const v1::DiagnosticResult* diagnostic = nullptr) {
    in_progress_.erase(id);
    v1::CommandResult result;
    result.set_command_id(id);
    *result.mutable_status() = status;
    result.set_finished_at(UnixNanos(absl::Now()));
    if (stacks != nullptr) *result.mutable_stacks() = *stacks;
    if (diagnostic != nullptr) *result.mutable_diagnostic() = *diagnostic;
    if (executed_order_.size() >= kExecutedCommandMemory) {
      executed_.erase(executed_order_.front());
      executed_order_.pop_front();
    }
    executed_order_.push_back(id);
    executed_[id] = result;
    if (registered_) {
      v1::AgentMessage message;
      *message.mutable_command_result() = std::move(result);
      link_->Send(session_, message);  // if lost, the controller re-sends the id and gets the stored result
    }
  }

  void BeginShutdown() {
    if (shutting_down_) return;
    shutting_down_ = true;
    exit_code_ = Phase() == v1::TRAINING_PHASE_SUCCEEDED ? 0 : 143;
    continuations_.clear();
    if (!supervisor_->Idle()) {
      intentional_stop_ = true;
      paused_ = false;
      supervisor_->BeginStop(absl::Milliseconds(options_.grace_ms), absl::Now());
    }
  }

  void JoinWorkers() {
    std::vector<std::thread> workers;
    {
      std::lock_guard<std::mutex> lock(workers_mu_);
      workers.swap(workers_);
    }
    for (std::thread& t : workers) t.join();
  }

  struct Continuation {
    absl::Duration grace;
    std::function<void()> then;
  };

  const AgentOptions options_;
  absl::Duration heartbeat_interval_;
  const absl::Time start_time_;

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
  std::mutex workers_mu_;
  std::vector<std::thread> workers_;
  std::thread loop_thread_;
  std::unique_ptr<ControllerLink> link_;
  std::unique_ptr<DiagnosticRunner> diagnostics_;

  // Control-loop state.
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<FailSlowMonitor> failslow_;
  // An nccl_mode command that set the trap, acknowledged only once training is paused.
  struct PendingTrap {
    std::string id;
    absl::Time deadline;
  };
  // Below the controller's pause deadline (30 s), so its error names what did not pause.
  static constexpr absl::Duration kTrapPauseDeadline = absl::Seconds(20);
  std::optional<PendingTrap> pending_trap_;
  absl::Time next_failslow_poll_ = absl::InfinitePast();
  std::unique_ptr<InspectionRunner> inspections_;
  bool finished_ = false;
  bool shutting_down_ = false;
  uint64_t session_ = 0;
  bool registered_ = false;
  absl::Time next_heartbeat_ = absl::InfinitePast();
  v1::AgentRole role_;
  std::optional<v1::Assignment> assignment_;
  std::optional<v1::Assignment> acked_assignment_;  // the latest RegisterAck's, for diagnostics
  uint64_t target_attempt_ = 0;
  v1::CodeVersion running_code_;
  std::optional<v1::CodeVersion> pending_code_;
  bool started_ = false;
  bool intentional_stop_ = false;
  bool paused_ = false;
  std::map<int, RankProgress> progress_;
  std::deque<v1::Event> pending_events_;
  std::deque<std::string> executed_order_;
  absl::flat_hash_map<std::string, v1::CommandResult> executed_;
  absl::flat_hash_set<std::string> in_progress_;
  std::deque<Continuation> continuations_;
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
