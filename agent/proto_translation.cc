#include "agent/proto_translation.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "diagnosis/stack_parse.h"

namespace peregrine {

namespace v1 = ::peregrine::v1;

TrainingCode CodeFromProto(const v1::CodeVersion& code) {
  TrainingCode out;
  out.image = code.image();
  out.command.assign(code.command().begin(), code.command().end());
  out.revision = code.revision();
  out.env.insert(code.env().begin(), code.env().end());
  return out;
}

v1::CodeVersion CodeToProto(const TrainingCode& code) {
  v1::CodeVersion out;
  out.set_image(code.image);
  for (const std::string& arg : code.command) out.add_command(arg);
  out.set_revision(code.revision);
  out.mutable_env()->insert(code.env.begin(), code.env.end());
  return out;
}

TrainingAssignment AssignmentFromProto(const v1::Assignment& assignment) {
  TrainingAssignment out;
  out.machine_index = assignment.machine_index();
  for (const v1::RankInfo& r : assignment.ranks()) {
    out.ranks.push_back(AssignedRank{r.global_rank(), r.local_rank(), r.tp(), r.pp(), r.dp()});
  }
  out.world_size = assignment.world_size();
  const v1::ParallelLayout& layout = assignment.layout();
  out.layout = AssignedLayout{layout.tensor(), layout.pipeline(), layout.data(), layout.gpus_per_machine()};
  out.master_addr = assignment.master_addr();
  out.master_port = assignment.master_port();
  out.resume_step = assignment.resume_step();
  out.attempt = assignment.attempt();
  out.code = CodeFromProto(assignment.code());
  if (assignment.has_checkpoint()) out.checkpoint_plan = assignment.checkpoint().SerializeAsString();
  out.failslow_change_point_probability = assignment.fail_slow().change_point_probability();
  out.failslow_verify_threshold = assignment.fail_slow().verify_threshold();
  return out;
}

v1::Assignment AssignmentToProto(const TrainingAssignment& assignment) {
  v1::Assignment out;
  out.set_machine_index(assignment.machine_index);
  for (const AssignedRank& r : assignment.ranks) {
    v1::RankInfo* rank = out.add_ranks();
    rank->set_global_rank(r.global_rank);
    rank->set_local_rank(r.local_rank);
    rank->set_tp(r.tp);
    rank->set_pp(r.pp);
    rank->set_dp(r.dp);
  }
  out.set_world_size(assignment.world_size);
  v1::ParallelLayout* layout = out.mutable_layout();
  layout->set_tensor(assignment.layout.tensor);
  layout->set_pipeline(assignment.layout.pipeline);
  layout->set_data(assignment.layout.data);
  layout->set_gpus_per_machine(assignment.layout.gpus_per_machine);
  out.set_master_addr(assignment.master_addr);
  out.set_master_port(assignment.master_port);
  out.set_resume_step(assignment.resume_step);
  out.set_attempt(assignment.attempt);
  *out.mutable_code() = CodeToProto(assignment.code);
  if (!assignment.checkpoint_plan.empty()) out.mutable_checkpoint()->ParseFromString(assignment.checkpoint_plan);
  if (assignment.failslow_change_point_probability != 0 || assignment.failslow_verify_threshold != 0) {
    v1::FailSlowSettings* f = out.mutable_fail_slow();
    f->set_change_point_probability(assignment.failslow_change_point_probability);
    f->set_verify_threshold(assignment.failslow_verify_threshold);
  }
  return out;
}

DesiredState DesiredStateFromProto(const v1::RegisterAck& ack) {
  DesiredState out;
  if (ack.role() == v1::AGENT_ROLE_ACTIVE) out.role = AgentRole::kActive;
  if (ack.role() == v1::AGENT_ROLE_STANDBY) out.role = AgentRole::kStandby;
  out.assignment = AssignmentFromProto(ack.assignment());
  return out;
}

AgentCommand CommandFromProto(const v1::Command& command) {
  using Kind = AgentCommand::Kind;
  AgentCommand out;
  out.id = command.id();
  switch (command.kind_case()) {
    case v1::Command::kRestartInPlace:
      out.kind = Kind::kRestartInPlace;
      out.assignment = AssignmentFromProto(command.restart_in_place().assignment());
      out.grace_ms = command.restart_in_place().grace_ms();
      break;
    case v1::Command::kActivate:
      out.kind = Kind::kActivate;
      out.assignment = AssignmentFromProto(command.activate().assignment());
      break;
    case v1::Command::kStop:
      out.kind = Kind::kStop;
      out.grace_ms = command.stop().grace_ms();
      break;
    case v1::Command::kPause:
      out.kind = Kind::kPause;
      break;
    case v1::Command::kResume:
      out.kind = Kind::kResume;
      break;
    case v1::Command::kCaptureStacks:
      out.kind = Kind::kCaptureStacks;
      out.include_native = command.capture_stacks().include_native();
      break;
    case v1::Command::kRunDiagnostic:
      out.kind = Kind::kRunDiagnostic;
      out.diagnostic_kind = command.run_diagnostic().kind();
      out.diagnostic_params.insert(command.run_diagnostic().params().begin(),
                                   command.run_diagnostic().params().end());
      out.diagnostic_timeout_ms = command.run_diagnostic().timeout_ms();
      break;
    case v1::Command::kNcclMode:
      out.kind = Kind::kNcclMode;
      out.profiling = command.nccl_mode().profiling();
      out.trap = command.nccl_mode().trap();
      break;
    case v1::Command::kHotUpdate:
      out.kind = Kind::kHotUpdate;
      out.code = CodeFromProto(command.hot_update().code());
      out.urgent = command.hot_update().urgent();
      out.assignment = AssignmentFromProto(command.hot_update().assignment());
      break;
    case v1::Command::kSetMicrobatchPlan: {
      const v1::SetMicroBatchPlan& plan = command.set_microbatch_plan();
      out.kind = Kind::kSetMicroBatchPlan;
      out.microbatch_plan.plan_id = plan.plan_id();
      out.microbatch_plan.from_step = plan.from_step();
      out.microbatch_plan.counts.assign(plan.counts().begin(), plan.counts().end());
      out.microbatch_plan.gradient_scale = plan.gradient_scale();
      out.microbatch_plan.global_micro_batches = plan.global_micro_batches();
      break;
    }
    default:
      out.kind = Kind::kUnknown;
      break;
  }
  return out;
}

v1::AgentRole RoleToProto(AgentRole role) {
  return role == AgentRole::kStandby ? v1::AGENT_ROLE_STANDBY : v1::AGENT_ROLE_ACTIVE;
}

v1::TrainingPhase PhaseToProto(AgentPhase phase) {
  switch (phase) {
    case AgentPhase::kIdle:
      return v1::TRAINING_PHASE_IDLE;
    case AgentPhase::kRunning:
      return v1::TRAINING_PHASE_RUNNING;
    case AgentPhase::kPaused:
      return v1::TRAINING_PHASE_PAUSED;
    case AgentPhase::kStopping:
      return v1::TRAINING_PHASE_STOPPING;
    case AgentPhase::kExited:
      return v1::TRAINING_PHASE_EXITED;
    case AgentPhase::kSucceeded:
      return v1::TRAINING_PHASE_SUCCEEDED;
  }
  return v1::TRAINING_PHASE_UNSPECIFIED;
}

v1::Status OutcomeToProto(const CommandOutcome& outcome) {
  v1::Status out;
  out.set_code(static_cast<int32_t>(outcome.code));
  out.set_message(outcome.message);
  return out;
}

namespace {

void AddParsedThreads(const CapturedStack& s, v1::ProcessStacks* ps) {
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

// Water-filling: each process, smallest first, gets what it needs or an equal share of
// what is left, so small processes are never cut to make room for one huge one.
void FitToBudget(size_t max_bytes, v1::StackCapture* capture) {
  if (capture->ByteSizeLong() <= max_bytes) return;
  constexpr size_t kFieldOverhead = 8;  // a repeated field's tag and length
  const int n = capture->processes_size();
  std::vector<size_t> need(static_cast<size_t>(n));
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    need[static_cast<size_t>(i)] = capture->processes(i).ByteSizeLong() + kFieldOverhead;
    order[static_cast<size_t>(i)] = i;
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) { return need[a] < need[b]; });
  std::vector<size_t> share(static_cast<size_t>(n));
  size_t left = max_bytes;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = static_cast<size_t>(order[k]);
    share[i] = std::min(need[i], left / (order.size() - k));
    left -= share[i];
  }
  for (int i = 0; i < n; ++i) {
    const size_t allowed = share[static_cast<size_t>(i)];
    if (need[static_cast<size_t>(i)] <= allowed) continue;
    v1::ProcessStacks* p = capture->mutable_processes(i);
    p->clear_threads();  // the frames go first; the text keeps the stacks
    const size_t size = p->ByteSizeLong() + kFieldOverhead;
    if (size <= allowed) continue;
    const size_t excess = size - allowed;
    const size_t raw = p->raw().size();
    p->set_raw(TruncateStackText(p->raw(), raw > excess ? raw - excess : 0));
  }
  // What a share cannot hold (a process's command line, its fields): leave processes out
  // from the end and say so.
  int dropped = 0;
  while (capture->processes_size() > 1 && capture->ByteSizeLong() + 96 > max_bytes) {
    capture->mutable_processes()->RemoveLast();
    ++dropped;
  }
  if (dropped > 0) {
    v1::ProcessStacks* last = capture->mutable_processes(capture->processes_size() - 1);
    last->set_raw(absl::StrCat(last->raw(), "\n... ", dropped, " more processes not captured: the reply is full"));
  }
}

}  // namespace

v1::StackCapture StacksToProto(const std::vector<CapturedStack>& stacks, size_t max_bytes) {
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
  FitToBudget(max_bytes, &capture);
  return capture;
}

void FillIterationSummary(int global_rank, const ProgressWindow& window, v1::IterationSummary* out) {
  out->set_global_rank(static_cast<uint32_t>(std::max(global_rank, 0)));
  out->set_last_completed_step(window.last_completed_step);
  out->set_last_loss(window.last_loss);
  out->set_last_grad_norm(window.last_grad_norm);
  out->set_mean_iteration_seconds(window.mean_iteration_seconds);
  out->set_steps_in_window(window.steps_in_window);
  out->set_last_step_time(absl::ToUnixNanos(window.last_step_time));
  out->set_micro_batches(window.last_micro_batches);
}

void FillProcessState(const ProcessStatus& process, v1::ProcessState* out) {
  out->set_global_rank(static_cast<uint32_t>(std::max(process.global_rank, 0)));
  out->set_pid(process.pid);
  out->set_running(process.running);
  out->set_exit_code(process.exit_code);
  out->set_signal(process.signal);
}

void FillProcessExit(const ProcessExitReport& exit, uint64_t attempt, v1::ProcessExit* out) {
  out->set_global_rank(static_cast<uint32_t>(std::max(exit.global_rank, 0)));
  out->set_pid(exit.pid);
  out->set_exit_code(exit.exit_code);
  out->set_signal(exit.signal);
  for (const std::string& line : exit.tail) out->add_last_log_lines(line);
  out->set_attempt(attempt);
}

}  // namespace peregrine
