#include "controller/agent_wire.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "diagnosis/parallel_layout.h"

namespace peregrine {
namespace {

AgentTrainingPhase FromWire(v1::TrainingPhase phase) {
  switch (phase) {
    case v1::TRAINING_PHASE_IDLE: return AgentTrainingPhase::kIdle;
    case v1::TRAINING_PHASE_RUNNING: return AgentTrainingPhase::kRunning;
    case v1::TRAINING_PHASE_PAUSED: return AgentTrainingPhase::kPaused;
    case v1::TRAINING_PHASE_STOPPING: return AgentTrainingPhase::kStopping;
    case v1::TRAINING_PHASE_EXITED: return AgentTrainingPhase::kExited;
    case v1::TRAINING_PHASE_SUCCEEDED: return AgentTrainingPhase::kSucceeded;
    default: return AgentTrainingPhase::kUnknown;
  }
}

v1::CodeVersion ToWire(const CodeVersionSpec& c) {
  v1::CodeVersion w;
  w.set_image(c.image);
  for (const auto& a : c.command) w.add_command(a);
  w.set_revision(c.revision);
  for (const auto& [k, v] : c.env) (*w.mutable_env())[k] = v;
  return w;
}

}  // namespace

InspectionObservation InspectionFromWire(const v1::InspectionResult& r, int64_t at) {
  InspectionObservation o;
  o.kind = r.kind();
  o.component = r.component();
  switch (r.status()) {
    case v1::INSPECTION_STATUS_OK: o.status = InspectionStatus::kOk; break;
    case v1::INSPECTION_STATUS_NOT_PRESENT: o.status = InspectionStatus::kNotPresent; break;
    case v1::INSPECTION_STATUS_WARNING: o.status = InspectionStatus::kWarning; break;
    case v1::INSPECTION_STATUS_FAULT: o.status = InspectionStatus::kFault; break;
    case v1::INSPECTION_STATUS_ERROR: o.status = InspectionStatus::kError; break;
    case v1::INSPECTION_STATUS_CANNOT_SEE: o.status = InspectionStatus::kCannotSee; break;
    default: o.status = InspectionStatus::kUnknown; break;
  }
  o.summary = r.summary();
  o.machine_attributed = r.machine_attributed();
  o.at = at;
  return o;
}

void ApplyTrainingState(const v1::TrainingState& t, AgentObservation* obs) {
  if (t.attempt() != obs->attempt) {
    obs->rank_steps.clear();
    obs->exits.clear();
    obs->mean_iteration_seconds = 0;
    obs->rank_losses.clear();
    obs->fail_slow.clear();
    obs->comm_profiles.clear();
    obs->rank_iterations.clear();
  }
  obs->attempt = t.attempt();
  obs->phase = FromWire(t.phase());
  std::vector<RankExit> exits;
  for (const v1::ProcessState& p : t.processes()) {
    if (p.running()) continue;
    RankExit e;
    e.global_rank = static_cast<int>(p.global_rank());
    e.exit_code = p.exit_code();
    e.signal = p.signal();
    for (const RankExit& old : obs->exits) {
      if (old.global_rank == e.global_rank) e.last_log_lines = old.last_log_lines;
    }
    exits.push_back(std::move(e));
  }
  obs->exits = std::move(exits);
}

v1::Assignment ToWire(const AssignmentSpec& a, const TrainingJobSpec& spec,
                      const std::map<int, std::string>& data_addresses) {
  v1::Assignment w;
  w.set_machine_index(static_cast<uint32_t>(std::max(a.slot, 0)));
  auto layout = ParallelLayout::Create(spec.parallelism.tensor, spec.parallelism.pipeline, spec.parallelism.data,
                                       spec.gpus_per_machine);
  if (layout.ok() && a.slot >= 0 && a.slot < layout->machines()) {
    for (int rank : layout->RanksOfMachine(a.slot)) {
      const RankCoordinates c = layout->Coordinates(rank);
      v1::RankInfo* r = w.add_ranks();
      r->set_global_rank(static_cast<uint32_t>(rank));
      r->set_local_rank(static_cast<uint32_t>(layout->LocalRank(rank)));
      r->set_tp(static_cast<uint32_t>(c.tp));
      r->set_pp(static_cast<uint32_t>(c.pp));
      r->set_dp(static_cast<uint32_t>(c.dp));
    }
    w.set_world_size(static_cast<uint32_t>(layout->world_size()));
  }
  v1::ParallelLayout* l = w.mutable_layout();
  l->set_tensor(static_cast<uint32_t>(spec.parallelism.tensor));
  l->set_pipeline(static_cast<uint32_t>(spec.parallelism.pipeline));
  l->set_data(static_cast<uint32_t>(spec.parallelism.data));
  l->set_gpus_per_machine(static_cast<uint32_t>(spec.gpus_per_machine));
  w.set_master_addr(a.master_addr);
  w.set_master_port(a.master_port);
  w.set_resume_step(a.resume_step);
  w.set_attempt(a.attempt);
  *w.mutable_code() = ToWire(a.code);
  v1::FailSlowSettings* fail_slow = w.mutable_fail_slow();
  fail_slow->set_change_point_probability(spec.fail_slow.change_point_probability);
  fail_slow->set_verify_threshold(spec.fail_slow.verify_threshold);
  const CheckpointPlanSpec& c = a.checkpoint;
  if (c.interval_steps > 0) {
    v1::CheckpointPlan* p = w.mutable_checkpoint();
    auto peer = [&](int slot, v1::CheckpointPeerAddress* out) {
      out->set_slot(static_cast<uint32_t>(std::max(slot, 0)));
      if (auto it = data_addresses.find(slot); it != data_addresses.end()) out->set_address(it->second);
    };
    p->set_interval_steps(c.interval_steps);
    p->set_backup_copies(c.backup_copies);
    for (int s : c.backup_to) peer(s, p->add_backup_to());
    for (int s : c.hold_for) p->add_hold_for(static_cast<uint32_t>(std::max(s, 0)));
    p->set_restore_step(c.restore_step);
    for (int s : c.restore_from) peer(s, p->add_restore_from());
    p->set_memory_limit_bytes(c.memory_limit_bytes);
    p->set_backup_bandwidth_bytes_per_second(c.backup_bandwidth_bytes_per_second);
    p->set_persist_every_steps(c.persist_every_steps);
    p->set_persist_dir(c.persist_dir);
    p->set_committed_step(c.committed_step);
  }
  return w;
}

CheckpointReportObservation CheckpointReportFromWire(const v1::CheckpointReport& r) {
  CheckpointReportObservation o;
  o.stored_steps.assign(r.stored_steps().begin(), r.stored_steps().end());
  o.backed_up_steps.assign(r.backed_up_steps().begin(), r.backed_up_steps().end());
  o.persisted_steps.assign(r.persisted_steps().begin(), r.persisted_steps().end());
  for (auto* steps : {&o.stored_steps, &o.backed_up_steps, &o.persisted_steps}) std::sort(steps->begin(), steps->end());
  o.store_bytes = r.store_bytes();
  o.memory_budget_bytes = r.memory_budget_bytes();
  for (const v1::HeldBackup& h : r.held()) o.held.emplace_back(static_cast<int>(h.slot()), h.step());
  return o;
}

CheckpointEventObservation CheckpointEventFromWire(const v1::CheckpointEvent& e, int64_t at) {
  CheckpointEventObservation o;
  o.at = at;
  switch (e.kind()) {
    case v1::CheckpointEvent::MEMORY_SHORT: o.kind = CheckpointEventKind::kMemoryShort; break;
    case v1::CheckpointEvent::CORRUPT_SHARD: o.kind = CheckpointEventKind::kCorruptShard; break;
    case v1::CheckpointEvent::RESTORE_FAILED: o.kind = CheckpointEventKind::kRestoreFailed; break;
    case v1::CheckpointEvent::RESTORED: o.kind = CheckpointEventKind::kRestored; break;
    case v1::CheckpointEvent::BACKUP_FAILED: o.kind = CheckpointEventKind::kBackupFailed; break;
    case v1::CheckpointEvent::PERSIST_FAILED: o.kind = CheckpointEventKind::kPersistFailed; break;
    default: o.kind = CheckpointEventKind::kSkipped; break;
  }
  o.step = e.step();
  o.global_rank = e.global_rank();
  o.detail = e.detail();
  return o;
}

v1::Command CommandToWire(const CommandToSend& c, const TrainingJobSpec& spec, int64_t now,
                          const std::map<int, std::string>& data_addresses) {
  v1::Command w;
  w.set_id(c.id);
  w.set_issued_at(now);
  switch (c.kind) {
    case CommandKind::kRestartInPlace:
      *w.mutable_restart_in_place()->mutable_assignment() = ToWire(c.assignment, spec, data_addresses);
      w.mutable_restart_in_place()->set_grace_ms(static_cast<uint32_t>(c.grace_ms));
      break;
    case CommandKind::kActivate:
      *w.mutable_activate()->mutable_assignment() = ToWire(c.assignment, spec, data_addresses);
      break;
    case CommandKind::kStop:
      w.mutable_stop()->set_grace_ms(static_cast<uint32_t>(c.grace_ms));
      break;
    case CommandKind::kSetNcclMode:
      w.mutable_nccl_mode()->set_profiling(c.nccl_profiling);
      w.mutable_nccl_mode()->set_trap(c.nccl_trap);
      break;
    case CommandKind::kPause:
      w.mutable_pause();
      break;
    case CommandKind::kResume:
      w.mutable_resume();
      break;
    case CommandKind::kCaptureStacks:
      w.mutable_capture_stacks()->set_include_native(c.include_native);
      break;
    case CommandKind::kRunDiagnostic: {
      v1::RunDiagnostic* d = w.mutable_run_diagnostic();
      d->set_kind(ToString(c.diagnostic.kind));
      for (const auto& [k, v] : c.diagnostic.params) (*d->mutable_params())[k] = v;
      d->set_timeout_ms(c.diagnostic.timeout_ms);
      break;
    }
    case CommandKind::kSetMicroBatchPlan: {
      v1::SetMicroBatchPlan* p = w.mutable_set_microbatch_plan();
      p->set_plan_id(c.microbatch_plan.plan_id);
      p->set_from_step(c.microbatch_plan.from_step);
      for (uint32_t n : c.microbatch_plan.counts) p->add_counts(n);
      p->set_gradient_scale(c.microbatch_plan.gradient_scale);
      p->set_global_micro_batches(c.microbatch_plan.global_micro_batches);
      break;
    }
  }
  return w;
}

DiagnosticOutcome DiagnosticFromWire(const v1::DiagnosticResult& d) {
  DiagnosticOutcome o;
  o.kind = d.kind();
  o.passed = d.passed();
  o.detail = d.detail();
  o.figures.insert(d.figures().begin(), d.figures().end());
  for (uint32_t r : d.failed_ranks()) o.failed_ranks.push_back(static_cast<int>(r));
  o.not_present = d.not_present();
  o.digest = d.digest();
  o.machine_id = d.machine_id();
  o.seconds = d.seconds();
  return o;
}

v1::DiagnosticResult DiagnosticToWire(const DiagnosticOutcome& o) {
  v1::DiagnosticResult d;
  d.set_kind(o.kind);
  d.set_passed(o.passed);
  d.set_detail(o.detail);
  for (const auto& [k, v] : o.figures) (*d.mutable_figures())[k] = v;
  for (int r : o.failed_ranks) d.add_failed_ranks(static_cast<uint32_t>(std::max(r, 0)));
  d.set_not_present(o.not_present);
  d.set_digest(o.digest);
  d.set_machine_id(o.machine_id);
  d.set_seconds(o.seconds);
  return d;
}

CommandResultObservation CommandResultFromWire(const v1::CommandResult& r) {
  CommandResultObservation o;
  o.command_id = r.command_id();
  o.code = r.status().code();
  o.ok = o.code == 0;
  o.message = r.status().message();
  o.finished_at = r.finished_at();
  if (r.has_diagnostic()) o.diagnostic = DiagnosticFromWire(r.diagnostic());
  if (r.has_stacks()) {
    o.has_stacks = true;
    for (const v1::ProcessStacks& p : r.stacks().processes()) {
      CapturedProcessStack c;
      c.stack.pid = p.pid();
      c.stack.command = p.command();
      c.stack.tool = p.tool();
      for (const v1::ThreadStack& t : p.threads()) {
        ThreadStack ts;
        ts.thread_id = t.thread_id();
        ts.thread_name = t.thread_name();
        for (const v1::StackFrame& f : t.frames()) {
          ts.frames.push_back(StackFrame{f.function(), f.file(), static_cast<int>(f.line()), f.module(), f.address()});
        }
        c.stack.threads.push_back(std::move(ts));
      }
      c.raw = p.raw();
      o.stacks[p.global_rank() < 0 ? -1 : p.global_rank()].push_back(std::move(c));
    }
  }
  return o;
}

}  // namespace peregrine
