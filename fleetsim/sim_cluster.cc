#include "fleetsim/sim_cluster.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

// How the simulated cluster stands in for Kubernetes and the agents:
//  - pods: a created pod takes the lowest-numbered free machine (no pod, working, not
//    quarantined) or waits, in creation order, for one to free up; it runs
//    pod_start_s later. A deleted pod frees its machine at once (unless broken or
//    quarantined). The registry forgets a deleted pod's agent.
//  - agents: a pod that runs registers its agent: a standby (pod not a slot's) registers
//    as standby with its self-check passed; a slot's pod is acked with its desired
//    assignment and converges to it alone, as a RestartInPlace would. Converging to an
//    attempt takes restart_s (standby_swap_s when activating a warm standby) plus the
//    restore (memory_restore_s or disk_restore_s when resuming after step 0); the command
//    is pending meanwhile, then answered ok.
//  - every other command is answered ok after kRoundTripNs (a stop leaves the agent
//    idle); a run_diagnostic after diagnosis_s / 3 (the crash path runs three stages:
//    EUD, all-to-all, all-gather), failed when its machine has a fault in force.
//  - progress: only one rank per machine (its first) reports steps; the core takes the
//    minimum over the ranks that report, and the simulated ranks of a machine are in
//    lockstep. Checkpoint reports carry the newest checkpoint step at or below the step.

namespace peregrine::fleetsim {
namespace {

constexpr int64_t kRoundTripNs = kSimNanosPerSecond;  // a command's answer
constexpr size_t kMaxCommandResults = 64;

bool SlowKind(FaultKind kind) { return kind == FaultKind::kSlowCompute || kind == FaultKind::kSlowLink; }

const char* KindText(FaultKind kind) {
  switch (kind) {
    case FaultKind::kGpu: return "gpu";
    case FaultKind::kMemory: return "memory";
    case FaultKind::kNic: return "nic";
    case FaultKind::kHost: return "host";
    case FaultKind::kSoftware: return "software";
    case FaultKind::kSlowCompute: return "slow";
    case FaultKind::kSlowLink: return "slow-link";
  }
  return "unknown";
}

std::string MachineName(int m) { return absl::StrCat("m", m); }

}  // namespace

SimCluster::SimCluster(const SimClusterOptions& options, const std::vector<FaultEvent>& faults, EventQueue* queue)
    : options_(options), faults_(faults), queue_(queue), machines_(static_cast<size_t>(options.fleet_machines)) {
  for (int m = 0; m < options_.fleet_machines; ++m) free_.insert(m);
  for (size_t i = 0; i < faults_.size(); ++i) {
    queue_->Push(faults_[i].start_ns, SimEventKind::kFaultStart, static_cast<int64_t>(i));
  }
  obs_.candidate_master_port = 29500;
  absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::Create(options_.tensor, options_.pipeline, options_.data, options_.gpus_per_machine);
  if (layout.ok() && layout->machines() == options_.job_machines) layout_ = *layout;
}

int SimCluster::MachineIndex(const std::string& machine_id) {
  int m = -1;
  if (machine_id.size() < 2 || machine_id[0] != 'm' || !absl::SimpleAtoi(machine_id.substr(1), &m)) return -1;
  return m;
}

PodObservation* SimCluster::PodByUid(int64_t uid, size_t* index) {
  auto it = pod_by_uid_.find(uid);
  if (it == pod_by_uid_.end()) return nullptr;
  if (index != nullptr) *index = it->second;
  return &obs_.pods[it->second];
}

AgentObservation* SimCluster::AgentByPod(const std::string& pod, size_t* index) {
  auto it = agent_by_pod_.find(pod);
  if (it == agent_by_pod_.end()) return nullptr;
  if (index != nullptr) *index = it->second;
  return &obs_.agents[it->second];
}

void SimCluster::MaybeFree(int m, int64_t now) {
  Machine& machine = machines_[static_cast<size_t>(m)];
  if (machine.pod_uid >= 0 || machine.quarantined || machine.broken_until > now) return;
  free_.insert(m);
  ScheduleWaiting(now);
}

void SimCluster::Schedule(size_t pod_index, int m, int64_t now) {
  PodObservation& p = obs_.pods[pod_index];
  PodMeta& meta = pod_meta_[pod_index];
  free_.erase(m);
  machines_[static_cast<size_t>(m)].pod_uid = meta.uid;
  ++held_;
  meta.machine = m;
  p.machine_id = MachineName(m);
  p.waiting_reason.clear();
  queue_->Push(now + SecondsToNs(options_.costs.pod_start_s), SimEventKind::kPodReady, meta.uid);
}

void SimCluster::ScheduleWaiting(int64_t now) {
  while (!waiting_.empty() && !free_.empty()) {
    const int64_t uid = waiting_.front();
    waiting_.pop_front();
    size_t index = 0;
    if (PodByUid(uid, &index) == nullptr) continue;  // deleted while waiting
    Schedule(index, *free_.begin(), now);
    changed_ = true;
  }
}

void SimCluster::AddPod(const PodToCreate& create, int64_t now) {
  if (pod_by_name_.count(create.name)) return;  // already there (the plan asks level-based)
  PodObservation p;
  p.name = create.name;
  p.created_at = SimToUnix(now);
  const size_t index = obs_.pods.size();
  obs_.pods.push_back(std::move(p));
  PodMeta meta;
  meta.uid = next_uid_++;
  pod_meta_.push_back(meta);
  pod_by_name_[create.name] = index;
  pod_by_uid_[pod_meta_.back().uid] = index;
  if (free_.empty()) {
    obs_.pods[index].waiting_reason = "Unschedulable: no free machine";
    waiting_.push_back(pod_meta_.back().uid);
  } else {
    Schedule(index, *free_.begin(), now);
  }
}

void SimCluster::DeletePod(const std::string& name, int64_t now) {
  auto it = pod_by_name_.find(name);
  if (it == pod_by_name_.end()) return;
  const size_t index = it->second;
  const PodMeta meta = pod_meta_[index];
  // The agent goes with its pod.
  size_t a = 0;
  if (AgentByPod(name, &a) != nullptr) {
    SetTrapped(a, false);
    FailSlowStateChanged();
    const size_t last = obs_.agents.size() - 1;
    agent_by_pod_.erase(name);
    if (a != last) {
      obs_.agents[a] = std::move(obs_.agents[last]);
      agent_meta_[a] = std::move(agent_meta_[last]);
      agent_by_pod_[obs_.agents[a].pod] = a;
    }
    obs_.agents.pop_back();
    agent_meta_.pop_back();
  }
  const size_t last = obs_.pods.size() - 1;
  pod_by_name_.erase(it);
  pod_by_uid_.erase(meta.uid);
  if (index != last) {
    obs_.pods[index] = std::move(obs_.pods[last]);
    pod_meta_[index] = pod_meta_[last];
    pod_by_name_[obs_.pods[index].name] = index;
    pod_by_uid_[pod_meta_[index].uid] = index;
  }
  obs_.pods.pop_back();
  pod_meta_.pop_back();
  if (meta.machine >= 0) {
    machines_[static_cast<size_t>(meta.machine)].pod_uid = -1;
    --held_;
    MaybeFree(meta.machine, now);
  }
}

double SimCluster::RestoreSeconds(const AssignmentSpec& assignment) const {
  if (assignment.resume_step == 0) return 0;
  return options_.restore_from_memory ? options_.costs.memory_restore_s : options_.costs.disk_restore_s;
}

void SimCluster::Register(int64_t uid, int64_t now) {
  size_t index = 0;
  PodObservation* p = PodByUid(uid, &index);
  if (p == nullptr || p->failed) return;
  p->running = true;
  const PodMeta& meta = pod_meta_[index];
  if (meta.machine < 0 || machines_[static_cast<size_t>(meta.machine)].broken_until > now) return;
  AgentObservation agent;
  agent.pod = p->name;
  agent.machine_id = p->machine_id;
  agent.connected = true;
  agent.last_seen = SimToUnix(now);
  agent.phase = AgentTrainingPhase::kIdle;
  auto want = desired_.find(p->name);
  const bool standby = want == desired_.end() || want->second.standby;
  agent.registered_as_standby = standby;
  agent.self_check_passed = true;
  const size_t a = obs_.agents.size();
  obs_.agents.push_back(std::move(agent));
  AgentMeta agent_meta;
  agent_meta.uid = uid;
  agent_meta_.push_back(std::move(agent_meta));
  agent_by_pod_[p->name] = a;
  if (!standby) {
    obs_.agents[a].acked_attempt = want->second.assignment.attempt;
    if (want->second.assignment.attempt > 0) Converge(a, want->second.assignment, "", false, now);
  }
}

void SimCluster::Converge(size_t a, const AssignmentSpec& assignment, const std::string& command_id, bool activate,
                          int64_t now) {
  AgentObservation& agent = obs_.agents[a];
  AgentMeta& meta = agent_meta_[a];
  if (agent.phase == AgentTrainingPhase::kRunning) agent.phase = AgentTrainingPhase::kStopping;
  meta.target_attempt = assignment.attempt;
  meta.converging = true;
  meta.converge_id = command_id;
  meta.first_rank = assignment.slot * options_.gpus_per_machine;
  if (!command_id.empty()) agent.pending_command_ids.push_back(command_id);
  const double start_s = activate ? options_.costs.standby_swap_s : options_.costs.restart_s;
  queue_->Push(now + SecondsToNs(start_s + RestoreSeconds(assignment)), SimEventKind::kAgentReady, meta.uid,
               static_cast<int64_t>(assignment.attempt));
}

void SimCluster::FinishCommand(size_t a, const std::string& id, bool ok, const std::string& message, int64_t now) {
  AgentObservation& agent = obs_.agents[a];
  auto& pending = agent.pending_command_ids;
  pending.erase(std::remove(pending.begin(), pending.end(), id), pending.end());
  std::deque<std::string>& order = agent_meta_[a].result_order;
  if (!agent.command_results.count(id)) order.push_back(id);
  CommandResultObservation& r = agent.command_results[id];
  r.command_id = id;
  r.ok = ok;
  r.code = ok ? 0 : 13;  // INTERNAL
  r.message = message;
  r.finished_at = SimToUnix(now);
  if (!ok) agent.failed_commands[id] = message;
  // The oldest results go first (the registry's order), never the one just finished: an
  // id that sorts first (a fail-slow re-confirmation's "c<start>-") must stay readable.
  while (order.size() > kMaxCommandResults) {
    agent.command_results.erase(order.front());
    order.pop_front();
  }
  changed_ = true;
}

void SimCluster::RunCommand(const CommandToSend& c, int64_t now) {
  size_t a = 0;
  AgentObservation* agent = AgentByPod(c.pod, &a);
  if (agent == nullptr || !agent->connected) return;  // lost on the wire; resent level-based
  if (std::find(agent->pending_command_ids.begin(), agent->pending_command_ids.end(), c.id) !=
      agent->pending_command_ids.end()) {
    return;
  }
  switch (c.kind) {
    case CommandKind::kRestartInPlace:
    case CommandKind::kActivate:
      if (c.kind == CommandKind::kActivate) agent->registered_as_standby = false;
      Converge(a, c.assignment, c.id, c.kind == CommandKind::kActivate, now);
      return;
    default:
      break;
  }
  if (c.kind == CommandKind::kStop) {
    agent->phase = AgentTrainingPhase::kIdle;
    agent_meta_[a].converging = false;
  }
  agent->pending_command_ids.push_back(c.id);
  const int64_t key = next_command_++;
  commands_[key] = Command{agent_meta_[a].uid, c};
  int64_t delay = kRoundTripNs;
  if (c.kind == CommandKind::kRunDiagnostic) {
    delay = c.diagnostic.kind == DiagnosticKind::kGemm        ? SecondsToNs(options_.signals.gemm_s)
            : c.diagnostic.kind == DiagnosticKind::kP2pRounds ? SecondsToNs(options_.signals.links_s)
                                                              : SecondsToNs(options_.costs.diagnosis_s / 3);
  }
  queue_->Push(now + delay, SimEventKind::kCommandDone, agent_meta_[a].uid, key);
}

void SimCluster::Quarantine(const std::string& machine_id, int64_t now) {
  const int m = MachineIndex(machine_id);
  if (m < 0 || m >= options_.fleet_machines) return;
  Machine& machine = machines_[static_cast<size_t>(m)];
  if (machine.quarantined) return;
  machine.quarantined = true;
  free_.erase(m);
  // Repair (the fault's end) and the node's return to service.
  queue_->Push(std::max(now, machine.broken_until) + SecondsToNs(options_.costs.machine_return_s),
               SimEventKind::kMachineReturn, m);
}

ApplyResult SimCluster::Apply(JobPlan* plan, int64_t now) {
  ApplyResult result;
  desired_ = std::move(plan->desired_agents);
  for (const QuarantineRequest& q : plan->quarantine) {
    Quarantine(q.machine_id, now);
    for (Eviction& e : plan->status.evicted) {
      if (e.machine_id == q.machine_id) e.quarantined = true;
    }
    ++result.quarantined;
  }
  for (const PodToDelete& d : plan->delete_pods) {
    if (pod_by_name_.count(d.name)) ++result.pods_deleted;
    DeletePod(d.name, now);
  }
  for (const PodToCreate& c : plan->create_pods) {
    AddPod(c, now);
    ++result.pods_created;
  }
  for (const CommandToSend& c : plan->commands) RunCommand(c, now);
  return result;
}

void SimCluster::OnEvent(const SimEvent& e, int64_t now) {
  switch (e.kind) {
    case SimEventKind::kFaultStart: {
      const FaultEvent& f = faults_[static_cast<size_t>(e.a)];
      Machine& machine = machines_[static_cast<size_t>(f.machine)];
      const bool in_use = machine.pod_uid >= 0;
      if (SlowKind(f.kind)) {
        machine.slow.push_back(Machine::Slow{f.kind, f.severity, static_cast<int>(e.a % options_.gpus_per_machine)});
        slow_machines_.insert(f.machine);
        FailSlowStateChanged();
        queue_->Push(f.end_ns, SimEventKind::kFaultEnd, e.a);
        if (in_use) {
          ++faults_hit_;
          ++fail_slows_hit_;
        }
        return;  // nothing the controller sees yet
      }
      if (f.kind == FaultKind::kSoftware) {
        // Only a training process can crash: an active pod's agent that runs an attempt.
        if (!in_use) return;
        size_t index = 0;
        PodObservation* p = PodByUid(machine.pod_uid, &index);
        size_t a = 0;
        AgentObservation* agent = p == nullptr ? nullptr : AgentByPod(p->name, &a);
        if (agent == nullptr || agent->registered_as_standby || agent->attempt == 0 ||
            agent->phase != AgentTrainingPhase::kRunning) {
          return;
        }
        agent_meta_[a].crashed = true;
        ++faults_hit_;
        ++fail_stops_hit_;
        queue_->Push(now + SecondsToNs(options_.costs.failstop_detection_s), SimEventKind::kFaultDetected, e.a,
                     machine.pod_uid);
        return;  // seen at detection
      }
      machine.broken_until = std::max(machine.broken_until, f.end_ns);
      free_.erase(f.machine);
      queue_->Push(f.end_ns, SimEventKind::kFaultEnd, e.a);
      if (in_use) {
        ++faults_hit_;
        ++fail_stops_hit_;
        queue_->Push(now + SecondsToNs(options_.costs.failstop_detection_s), SimEventKind::kFaultDetected, e.a,
                     machine.pod_uid);
      }
      return;  // seen at detection
    }
    case SimEventKind::kFaultDetected: {
      const FaultEvent& f = faults_[static_cast<size_t>(e.a)];
      size_t index = 0;
      PodObservation* p = PodByUid(e.b, &index);
      if (p == nullptr) return;  // already replaced
      size_t a = 0;
      AgentObservation* agent = AgentByPod(p->name, &a);
      if (f.kind == FaultKind::kSoftware) {
        if (agent == nullptr || !agent_meta_[a].crashed) return;
        agent->phase = AgentTrainingPhase::kExited;
        agent->exits = {RankExit{agent_meta_[a].first_rank, 1, 0, {}}};
      } else {
        p->running = false;
        p->failed = true;
        p->reason = absl::StrCat(KindText(f.kind), " fault: machine ", p->machine_id, " stopped");
        if (agent != nullptr) agent->connected = false;
      }
      changed_ = true;
      return;
    }
    case SimEventKind::kFaultEnd: {
      const FaultEvent& f = faults_[static_cast<size_t>(e.a)];
      Machine& machine = machines_[static_cast<size_t>(f.machine)];
      if (SlowKind(f.kind)) {
        auto it = std::find_if(machine.slow.begin(), machine.slow.end(),
                               [&](const Machine::Slow& s) { return s.kind == f.kind && s.severity == f.severity; });
        if (it != machine.slow.end()) machine.slow.erase(it);
        FailSlowStateChanged();
        if (machine.slow.empty()) slow_machines_.erase(f.machine);
      } else {
        MaybeFree(f.machine, now);  // a waiting pod may get it (a change)
      }
      return;
    }
    case SimEventKind::kPodReady:
      Register(e.a, now);
      changed_ = true;
      return;
    case SimEventKind::kAgentReady: {
      PodObservation* p = PodByUid(e.a);
      size_t a = 0;
      AgentObservation* agent = p == nullptr ? nullptr : AgentByPod(p->name, &a);
      if (agent == nullptr || !agent->connected) return;
      AgentMeta& meta = agent_meta_[a];
      if (!meta.converging || meta.target_attempt != static_cast<uint64_t>(e.b)) return;  // superseded
      meta.converging = false;
      meta.crashed = false;
      SetTrapped(a, false);
      FailSlowStateChanged();
      agent->attempt = meta.target_attempt;
      agent->phase = AgentTrainingPhase::kRunning;
      agent->registered_as_standby = false;
      agent->exits.clear();
      agent->rank_steps.clear();
      agent->fail_slow.clear();
      if (!meta.converge_id.empty()) FinishCommand(a, meta.converge_id, true, "", now);
      changed_ = true;
      return;
    }
    case SimEventKind::kCommandDone: {
      auto it = commands_.find(e.b);
      if (it == commands_.end()) return;
      const CommandToSend c = std::move(it->second.command);
      commands_.erase(it);
      size_t a = 0;
      AgentObservation* agent = AgentByPod(c.pod, &a);
      if (agent == nullptr || agent_meta_[a].uid != e.a || !agent->connected) return;
      if (c.kind == CommandKind::kSetNcclMode) {
        if (agent->nccl_profiling != c.nccl_profiling) FailSlowStateChanged();
        agent->nccl_profiling = c.nccl_profiling;
        if (!c.nccl_profiling) agent->comm_profiles.clear();
        SetTrapped(a, c.nccl_trap);
      }
      if (c.kind == CommandKind::kSetMicroBatchPlan && layout_) {
        const std::vector<uint32_t>& counts = c.microbatch_plan.counts;
        std::vector<uint32_t> next;
        if (static_cast<int>(counts.size()) == layout_->data()) next = counts;
        if (next != micro_batches_) {
          micro_batches_ = std::move(next);
          plan_attempt_ = agent->attempt;
          FailSlowStateChanged();
        }
      }
      if (c.kind == CommandKind::kRunDiagnostic &&
          (c.diagnostic.kind == DiagnosticKind::kGemm || c.diagnostic.kind == DiagnosticKind::kP2pRounds)) {
        // The fail-slow validation's measurements: an oracle of the fault list.
        const int m = MachineIndex(agent->machine_id);
        const SlotSlowState state = MachineSlowState(m);
        const int slot = agent_meta_[a].first_rank >= 0 ? agent_meta_[a].first_rank / options_.gpus_per_machine : -1;
        DiagnosticOutcome outcome;
        if (c.diagnostic.kind == DiagnosticKind::kGemm) {
          outcome = SimulatedGemm(state, options_.gpus_per_machine, options_.signals);
        } else if (layout_) {
          auto rounds = c.diagnostic.params.find("rounds");
          static const std::string kNone;
          const std::string& text = rounds == c.diagnostic.params.end() ? kNone : rounds->second;
          outcome = SimulatedLinkRounds(*layout_, slot, CachedSlotStates(agent->attempt), link_rounds_.Links(text),
                                        options_.signals);
        }
        outcome.machine_id = agent->machine_id;
        FinishCommand(a, c.id, true, "", now);
        agent->command_results[c.id].diagnostic = std::move(outcome);
        return;
      }
      if (c.kind == CommandKind::kRunDiagnostic) {
        DiagnosticOutcome outcome;
        outcome.kind = ToString(c.diagnostic.kind);
        outcome.machine_id = agent->machine_id;
        outcome.passed = !MachineFaulty(agent->machine_id, now);
        outcome.detail = outcome.passed ? "simulated: passed" : "simulated: the machine has a fault in force";
        outcome.seconds = options_.costs.diagnosis_s / 3;
        FinishCommand(a, c.id, true, "", now);
        agent->command_results[c.id].diagnostic = std::move(outcome);
        return;
      }
      FinishCommand(a, c.id, true, "", now);
      return;
    }
    case SimEventKind::kFirstStep:
      changed_ = true;
      return;
    case SimEventKind::kSlowCheck:
      return;  // the engine's TrackSlowdown reports it
    case SimEventKind::kMachineReturn: {
      Machine& machine = machines_[static_cast<size_t>(e.a)];
      if (machine.broken_until > now) {  // broken again meanwhile: back after that repair
        queue_->Push(machine.broken_until + SecondsToNs(options_.costs.machine_return_s), SimEventKind::kMachineReturn,
                     e.a);
        return;
      }
      machine.quarantined = false;
      MaybeFree(static_cast<int>(e.a), now);
      return;
    }
  }
}

const JobObservation& SimCluster::Observe(int64_t now, uint64_t attempt, uint64_t step, double iteration_s) {
  changed_ = false;
  const int64_t unix_now = SimToUnix(now);
  if (!micro_batches_.empty() && attempt != plan_attempt_) {
    micro_batches_.clear();  // the new attempt's trainers start on the even split
    FailSlowStateChanged();
  }
  const uint64_t k = options_.checkpoint_interval_steps;
  const uint64_t checkpoint = k > 0 ? step / k * k : 0;
  for (size_t i = 0; i < obs_.agents.size(); ++i) {
    AgentObservation& a = obs_.agents[i];
    if (a.connected) a.last_seen = unix_now;
    // Training stops on every machine when one fails: the step (and checkpoint) a lost or
    // crashed agent reported last is the job's step now.
    const AgentMeta& meta = agent_meta_[i];
    if (attempt == 0 || a.attempt != attempt || meta.converging) continue;
    a.rank_steps[meta.first_rank] = step;
    a.mean_iteration_seconds = iteration_s;
    if (a.nccl_profiling && layout_) {
      // The iteration summaries S2 reads (sent with the profiles, see the header).
      for (int r = meta.first_rank; r < meta.first_rank + options_.gpus_per_machine && r < layout_->world_size(); ++r) {
        RankIterationObservation& it = a.rank_iterations[r];
        it.step = step;
        it.mean_iteration_seconds = iteration_s;
        const size_t d = static_cast<size_t>(layout_->Coordinates(r).dp);
        it.micro_batches = d < micro_batches_.size() ? micro_batches_[d] : options_.signals.micro_batches;
      }
    } else if (!a.rank_iterations.empty()) {
      a.rank_iterations.clear();
    }
    if (k > 0 && checkpoint > 0) {
      if (!a.checkpoint) a.checkpoint.emplace();
      CheckpointReportObservation& r = *a.checkpoint;
      if (r.stored_steps.size() != 1 || r.stored_steps[0] != checkpoint) {
        r.stored_steps.assign(1, checkpoint);
        if (options_.backed_up) r.backed_up_steps.assign(1, checkpoint);
      }
    }
  }
  if (profiles_dirty_) UpdateProfiles(attempt);
  return obs_;
}

bool SimCluster::SlotsReady(const JobStatus& status, int64_t now) const {
  if (status.attempt == 0 || status.slots.empty()) return false;
  for (const SlotStatus& slot : status.slots) {
    auto it = agent_by_pod_.find(slot.pod);
    if (it == agent_by_pod_.end()) return false;
    const AgentObservation& a = obs_.agents[it->second];
    const AgentMeta& meta = agent_meta_[it->second];
    if (!a.connected || a.attempt != status.attempt || meta.converging || meta.crashed ||
        a.phase != AgentTrainingPhase::kRunning) {
      return false;
    }
    auto p = pod_by_name_.find(slot.pod);
    if (p == pod_by_name_.end() || obs_.pods[p->second].failed) return false;
    const int m = pod_meta_[p->second].machine;
    if (m < 0 || machines_[static_cast<size_t>(m)].broken_until > now) return false;
  }
  return true;
}

bool SimCluster::SlotWaitingForMachine(const JobStatus& status) const {
  if (waiting_.empty()) return false;
  for (const SlotStatus& slot : status.slots) {
    auto p = pod_by_name_.find(slot.pod);
    if (p != pod_by_name_.end() && pod_meta_[p->second].machine < 0) return true;
  }
  return false;
}

double SimCluster::SlotSlowdown(const JobStatus& status) const {
  // Only the slowed machines are looked at (slow_machines_): each one's slot through its
  // agent's first rank, checked against the status (a scan of the slots only when the
  // agent is not there yet).
  double slow = 0;
  std::vector<SlotSlowState> slots;
  const bool plan = layout_ && !micro_batches_.empty();
  if (plan) slots.resize(static_cast<size_t>(options_.job_machines));
  for (int m : slow_machines_) {
    const Machine& machine = machines_[static_cast<size_t>(m)];
    if (machine.pod_uid < 0) continue;
    auto p = pod_by_uid_.find(machine.pod_uid);
    if (p == pod_by_uid_.end()) continue;
    const std::string& pod = obs_.pods[p->second].name;
    int slot = -1;
    auto a = agent_by_pod_.find(pod);
    const int first = a == agent_by_pod_.end() ? -1 : agent_meta_[a->second].first_rank;
    const size_t s = first < 0 ? status.slots.size() : static_cast<size_t>(first / options_.gpus_per_machine);
    if (s < status.slots.size() && status.slots[s].pod == pod) {
      slot = static_cast<int>(s);
    } else if (std::none_of(status.slots.begin(), status.slots.end(),
                            [&](const SlotStatus& x) { return x.pod == pod; })) {
      continue;
    }
    const SlotSlowState state = MachineSlowState(m);
    slow = std::max({slow, state.compute, state.link});
    if (plan && slot >= 0 && slot < options_.job_machines) slots[static_cast<size_t>(slot)] = state;
  }
  if (!plan) return slow;
  return JobSlowdown(ReplicaStepFactors(*layout_, slots, micro_batches_, options_.signals), slots);
}

bool SimCluster::MachineFaulty(const std::string& machine_id, int64_t now) const {
  const int m = MachineIndex(machine_id);
  if (m < 0 || m >= options_.fleet_machines) return false;
  const Machine& machine = machines_[static_cast<size_t>(m)];
  return machine.broken_until > now || !machine.slow.empty();
}

void SimCluster::SetTrapped(size_t a, bool trapped) {
  AgentMeta& meta = agent_meta_[a];
  if (meta.trapped == trapped) return;
  meta.trapped = trapped;
  trapped_ += trapped ? 1 : -1;
}

void SimCluster::FailSlowStateChanged() {
  profiles_dirty_ = true;
  slot_states_valid_ = false;
}

SlotSlowState SimCluster::MachineSlowState(int m) const {
  SlotSlowState state;
  if (m < 0 || m >= options_.fleet_machines) return state;
  for (const Machine::Slow& s : machines_[static_cast<size_t>(m)].slow) {
    if (s.kind == FaultKind::kSlowLink) {
      state.link = std::max(state.link, s.severity);
    } else if (s.severity > state.compute) {
      state.compute = s.severity;
      state.slow_gpu = s.gpu;
    }
  }
  return state;
}

std::vector<SlotSlowState> SimCluster::SlotStates(uint64_t attempt) const {
  std::vector<SlotSlowState> slots(static_cast<size_t>(options_.job_machines));
  for (size_t i = 0; i < obs_.agents.size(); ++i) {
    const AgentObservation& a = obs_.agents[i];
    const AgentMeta& meta = agent_meta_[i];
    if (a.attempt != attempt || a.registered_as_standby || meta.first_rank < 0) continue;
    const int slot = meta.first_rank / options_.gpus_per_machine;
    if (slot >= options_.job_machines) continue;
    slots[static_cast<size_t>(slot)] = MachineSlowState(MachineIndex(a.machine_id));
  }
  return slots;
}

const std::vector<SlotSlowState>& SimCluster::CachedSlotStates(uint64_t attempt) {
  if (!slot_states_valid_ || slot_states_attempt_ != attempt) {
    slot_states_ = SlotStates(attempt);
    slot_states_attempt_ = attempt;
    slot_states_valid_ = true;
  }
  return slot_states_;
}

void SimCluster::UpdateProfiles(uint64_t attempt) {
  profiles_dirty_ = false;
  bool any = false;
  for (size_t i = 0; i < obs_.agents.size(); ++i) {
    AgentObservation& a = obs_.agents[i];
    const bool want = layout_ && a.nccl_profiling && attempt > 0 && a.attempt == attempt && !a.registered_as_standby &&
                      agent_meta_[i].first_rank >= 0;
    if (!want) {
      a.comm_profiles.clear();
      continue;
    }
    any = true;
  }
  if (!any) return;
  // Every profiling agent reports its ranks' latest collectives: all built in one pass
  // over the layout's groups (failslow_signals.cc), only when the state changed.
  std::vector<std::vector<CommProfileObservation>> profiles =
      SynthesizeCommProfiles(*layout_, CachedSlotStates(attempt), micro_batches_, options_.step_time_s, options_.signals);
  for (size_t i = 0; i < obs_.agents.size(); ++i) {
    AgentObservation& a = obs_.agents[i];
    if (!a.nccl_profiling || a.attempt != attempt || a.registered_as_standby || agent_meta_[i].first_rank < 0) continue;
    const size_t slot = static_cast<size_t>(agent_meta_[i].first_rank / options_.gpus_per_machine);
    if (slot < profiles.size()) a.comm_profiles = std::move(profiles[slot]);
  }
}

void SimCluster::TrackSlowdown(double slowdown, uint64_t attempt, bool training, int64_t now) {
  if (!layout_) return;
  if (attempt != tracker_.attempt) tracker_ = Tracker{attempt};
  if (attempt == 0) return;
  // Without new iterations (not training, or paused) nothing new is measured.
  double target = tracker_.reported;
  if (training && !Paused()) {
    target = slowdown >= options_.verify_threshold ? slowdown : 0;
    // A change too small to verify (relative to the level reported) is not reported.
    if (target > 0 && tracker_.reported > 0 &&
        std::abs(target - tracker_.reported) < options_.verify_threshold * (1 + tracker_.reported)) {
      target = tracker_.reported;
    }
  }
  if (target == tracker_.reported) {
    tracker_.pending = -1;
    return;
  }
  const int64_t due = SecondsToNs(TrackingLatencySeconds(options_.signals, options_.step_time_s, target));
  if (target != tracker_.pending) {
    tracker_.pending = target;
    tracker_.pending_since = now;
    queue_->Push(now + due, SimEventKind::kSlowCheck);
    return;
  }
  if (now < tracker_.pending_since + due) return;
  if (target > 0 && tracker_.reported == 0) tracker_.onset = tracker_.pending_since;
  tracker_.reported = target;
  tracker_.pending = -1;
  ReportSlowdown(now);
}

void SimCluster::ReportSlowdown(int64_t now) {
  (void)now;
  for (size_t i = 0; i < obs_.agents.size(); ++i) {
    AgentObservation& a = obs_.agents[i];
    const AgentMeta& meta = agent_meta_[i];
    if (a.attempt != tracker_.attempt || a.registered_as_standby || meta.converging || meta.first_rank < 0) continue;
    RankFailSlowObservation& r = a.fail_slow[meta.first_rank];
    if (tracker_.reported > 0) {
      r.slow = true;
      r.onset = SimToUnix(tracker_.onset);
      r.ended_at = 0;
      r.severity = tracker_.reported;
      r.before_seconds = options_.step_time_s;
      r.after_seconds = options_.step_time_s * (1 + tracker_.reported);
    } else {
      r.slow = false;
      r.ended_at = SimToUnix(tracker_.pending_since);
    }
  }
  changed_ = true;
}

}  // namespace peregrine::fleetsim
