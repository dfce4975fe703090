#include "controller/core/decision_engine.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/hang_policy.h"
#include "controller/core/loss_monitor.h"
#include "controller/core/recovery_policy.h"
#include "controller/core/stop_time_diagnosis.h"
#include "controller/core/standby_pool_size.h"

namespace peregrine {
namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;

void SetCondition(JobStatus& st, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, int64_t generation, int64_t now) {
  const std::string status = value ? "True" : "False";
  for (Condition& c : st.conditions) {
    if (c.type != type) continue;
    if (c.status != status) c.last_transition_time = now;
    c.status = status;
    c.reason = reason;
    c.message = message;
    c.observed_generation = generation;
    return;
  }
  st.conditions.push_back(Condition{type, status, reason, message, generation, now});
}

template <typename T>
void TrimFront(std::vector<T>& v, size_t max) {
  if (v.size() > max) v.erase(v.begin(), v.begin() + static_cast<long>(v.size() - max));
}

std::string ExitText(const RankExit& e) {
  return e.signal != 0 ? absl::StrFormat("rank %d killed by signal %d", e.global_rank, e.signal)
                       : absl::StrFormat("rank %d exited with code %d", e.global_rank, e.exit_code);
}

class Decider {
 public:
  Decider(const TrainingJob& job, const JobStatus& status, const JobObservation& obs, int64_t now,
          const DecisionConfig& config)
      : job_(job), spec_(job.spec), obs_(obs), now_(now), config_(config) {
    plan_.status = status;
    for (const PodObservation& p : obs.pods) pods_[p.name] = &p;
    for (const AgentObservation& a : obs.agents) agents_[a.pod] = &a;
  }

  JobPlan Run() {
    JobStatus& st = plan_.status;
    InitializeOnce();
    st.observed_generation = job_.metadata.generation;
    SetCondition(st, "Valid", true, "SpecValid", "the spec is valid", job_.metadata.generation, now_);
    ObserveMachines();
    if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) {
      TearDownStandbys();
      DeleteOrphans();
      FillDesiredAgents();
      UpdateConditions();
      return std::move(plan_);
    }
    SizeStandbyPool();
    ReplaceFailedStandbys();
    EnsurePods();
    if (st.attempt == 0) {
      MaybeStartFirstAttempt();
    } else {
      TrackProgress();
      if (st.diagnosis) {
        AdvanceDiagnosis();
      } else {
        DetectAndTriage();
      }
    }
    if (st.attempt > 0 && st.triage_deadline == 0 && !st.diagnosis && st.phase != JobPhase::kFailed) {
      HotUpdate();
      ConvergeAgents();
      DetectSuccess();
    }
    ReplenishStandbys();
    if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) TearDownStandbys();
    DeleteOrphans();
    FillDesiredAgents();
    UpdateEttr();
    UpdateConditions();
    return std::move(plan_);
  }

 private:
  const AgentObservation* Agent(const std::string& pod) const {
    auto it = agents_.find(pod);
    return it == agents_.end() ? nullptr : it->second;
  }
  const PodObservation* Pod(const std::string& pod) const {
    auto it = pods_.find(pod);
    return it == pods_.end() ? nullptr : it->second;
  }
  bool PodLost(const std::string& pod, bool observed, std::string* reason) const {
    const PodObservation* p = Pod(pod);
    if (p == nullptr) {
      if (!observed) return false;  // not created yet, or not visible yet
      *reason = "pod disappeared";
      return true;
    }
    if (p->failed) {
      *reason = p->reason.empty() ? "pod failed" : p->reason;
      return true;
    }
    return false;
  }
  Incident* OpenIncident() {
    JobStatus& st = plan_.status;
    if (st.incidents.empty()) return nullptr;
    Incident& last = st.incidents.back();
    return last.resumed_at == 0 ? &last : nullptr;
  }
  void Event(const std::string& type, const std::string& reason, const std::string& message) {
    plan_.events.push_back(JobEvent{type, reason, message});
  }
  AssignmentSpec DesiredAssignment(int slot) const {
    const JobStatus& st = plan_.status;
    AssignmentSpec a;
    a.slot = slot;
    a.attempt = st.attempt;
    a.resume_step = st.resume_step;
    a.master_addr = st.master_addr;
    a.master_port = st.master_port;
    a.code = st.code;
    return a;
  }
  std::string PodAddress(const std::string& pod) const {
    return obs_.rendezvous_domain.empty() ? "127.0.0.1" : absl::StrCat(pod, ".", obs_.rendezvous_domain);
  }
  std::string MasterAddr() const {
    const JobStatus& st = plan_.status;
    if (obs_.rendezvous_domain.empty() || st.slots.empty()) return "127.0.0.1";
    return absl::StrCat(st.slots[0].pod, ".", obs_.rendezvous_domain);
  }

  void InitializeOnce() {
    JobStatus& st = plan_.status;
    if (st.started_at == 0) st.started_at = now_;
    if (st.code.command.empty()) {
      st.code = spec_.code;
      st.version_history.push_back(VersionRecord{spec_.code, now_, "initial version", "Running"});
    }
    if (st.slots.empty()) {
      for (int i = 0; i < spec_.machines; ++i) st.slots.push_back(SlotStatus{i, ActivePodName(job_.metadata.name, i), "", false});
    }
  }

  void ObserveMachines() {
    JobStatus& st = plan_.status;
    for (SlotStatus& slot : st.slots) {
      if (const PodObservation* p = Pod(slot.pod); p != nullptr && p->running) {
        slot.observed = true;
        if (!p->machine_id.empty()) slot.machine_id = p->machine_id;
      }
    }
    for (StandbyStatus& sb : st.standbys) {
      if (const PodObservation* p = Pod(sb.pod); p != nullptr && p->running) {
        sb.observed = true;
        if (!p->machine_id.empty()) sb.machine_id = p->machine_id;
      }
    }
  }

  void SizeStandbyPool() {
    StandbyPoolInputs in;
    in.machines = spec_.machines;
    in.daily_failure_rate = spec_.standby.daily_failure_rate;
    in.replenish_horizon_hours = spec_.standby.replenish_horizon_hours;
    in.percentile = spec_.standby.percentile;
    in.min = spec_.standby.min;
    in.max = spec_.standby.max;
    auto k = StandbyPoolSize(in);
    plan_.status.standby_desired = k.ok() ? static_cast<int>(*k) : spec_.standby.min;
  }

  void ReplaceFailedStandbys() {
    JobStatus& st = plan_.status;
    std::vector<StandbyStatus> kept;
    for (const StandbyStatus& sb : st.standbys) {
      std::string reason;
      if (PodLost(sb.pod, sb.observed, &reason)) {
        st.evicted.push_back(Eviction{sb.machine_id, sb.pod, absl::StrCat("standby failed: ", reason), now_});
        plan_.delete_pods.push_back(PodToDelete{sb.pod, absl::StrCat("standby failed: ", reason)});
        Event("Warning", "StandbyFailed", absl::StrCat("standby ", sb.pod, " failed: ", reason));
        continue;
      }
      kept.push_back(sb);
    }
    st.standbys = std::move(kept);
    TrimFront(st.evicted, config_.max_evictions);
  }

  void EnsurePods() {
    for (const SlotStatus& slot : plan_.status.slots) {
      if (!slot.observed && Pod(slot.pod) == nullptr) {
        plan_.create_pods.push_back(PodToCreate{slot.pod, PodRole::kActive, slot.index});
      }
    }
    for (const StandbyStatus& sb : plan_.status.standbys) {
      if (!sb.observed && Pod(sb.pod) == nullptr) {
        plan_.create_pods.push_back(PodToCreate{sb.pod, PodRole::kStandby, -1});
      }
    }
  }

  void ReplenishStandbys() {
    JobStatus& st = plan_.status;
    if (st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed) return;
    while (static_cast<int>(st.standbys.size()) < st.standby_desired) {
      StandbyStatus sb{StandbyPodName(job_.metadata.name, st.next_pod_serial++), "", false};
      st.standbys.push_back(sb);
      plan_.create_pods.push_back(PodToCreate{sb.pod, PodRole::kStandby, -1});
    }
    while (static_cast<int>(st.standbys.size()) > st.standby_desired) {
      plan_.delete_pods.push_back(PodToDelete{st.standbys.back().pod, "standby pool larger than desired"});
      st.standbys.pop_back();
    }
    int ready = 0;
    for (const StandbyStatus& sb : st.standbys) {
      const AgentObservation* a = Agent(sb.pod);
      const PodObservation* p = Pod(sb.pod);
      if (a && a->connected && a->registered_as_standby && a->self_check_passed && p && p->running) ++ready;
    }
    st.standby_ready = ready;
  }

  void TearDownStandbys() {
    JobStatus& st = plan_.status;
    for (const StandbyStatus& sb : st.standbys) plan_.delete_pods.push_back(PodToDelete{sb.pod, "job finished"});
    st.standbys.clear();
    st.standby_ready = 0;
  }

  // Pods the cluster shows for the job that are neither a slot nor a standby (an evicted
  // pod whose deletion failed, a leftover after a controller restart) are deleted.
  void DeleteOrphans() {
    std::set<std::string> wanted;
    for (const SlotStatus& s : plan_.status.slots) wanted.insert(s.pod);
    for (const StandbyStatus& s : plan_.status.standbys) wanted.insert(s.pod);
    std::set<std::string> already;
    for (const PodToDelete& d : plan_.delete_pods) already.insert(d.name);
    for (const PodObservation& p : obs_.pods) {
      if (!wanted.count(p.name) && !already.count(p.name) && (p.running || p.failed)) {
        plan_.delete_pods.push_back(PodToDelete{p.name, "not part of the job any more"});
      }
    }
  }

  void MaybeStartFirstAttempt() {
    JobStatus& st = plan_.status;
    for (const SlotStatus& slot : st.slots) {
      const AgentObservation* a = Agent(slot.pod);
      const PodObservation* p = Pod(slot.pod);
      if (!p || !p->running || !a || !a->connected) return;  // wait for every slot's agent
    }
    st.attempt = 1;
    st.attempt_started_at = now_;
    st.master_addr = MasterAddr();
    st.master_port = obs_.candidate_master_port;
    st.phase = JobPhase::kRunning;
    Event("Normal", "Started",
          absl::StrFormat("all %d machines registered; training attempt 1 starts from step %d", st.slots.size(),
                          st.resume_step));
  }

  void TrackProgress() {
    JobStatus& st = plan_.status;
    uint64_t min_step = std::numeric_limits<uint64_t>::max();
    uint64_t max_step = st.resume_step;
    double iter_sum = 0;
    int iter_n = 0;
    const int gpus = spec_.gpus_per_machine;
    for (const SlotStatus& slot : st.slots) {
      const AgentObservation* a = Agent(slot.pod);
      for (int r = slot.index * gpus; r < (slot.index + 1) * gpus; ++r) {
        uint64_t step = st.resume_step;
        if (a && a->attempt == st.attempt) {
          if (auto it = a->rank_steps.find(r); it != a->rank_steps.end()) step = std::max(step, it->second);
        }
        min_step = std::min(min_step, step);
        max_step = std::max(max_step, step);
      }
      if (a && a->attempt == st.attempt && a->mean_iteration_seconds > 0) {
        iter_sum += a->mean_iteration_seconds;
        ++iter_n;
      }
    }
    if (min_step == std::numeric_limits<uint64_t>::max()) min_step = st.resume_step;
    st.last_completed_step = std::max(st.last_completed_step, min_step);
    st.max_completed_step = std::max(st.max_completed_step, max_step);
    if (iter_n > 0) st.mean_iteration_seconds = iter_sum / iter_n;

    Incident* open = OpenIncident();
    if (open != nullptr && open->decided_at != 0 && min_step > open->resume_step) {
      open->resumed_at = now_;
      const double downtime = static_cast<double>(now_ - open->detected_at) / kNanosPerSecond;
      const double redo = static_cast<double>(open->step_at_failure - std::min(open->step_at_failure, open->resume_step)) *
                          st.mean_iteration_seconds;
      // Added to what the incident already counts (a hang's time without a step before
      // it was detected, which the job total got at detection).
      open->training_time_lost_seconds += downtime + redo;
      st.training_time_lost_seconds += downtime + redo;
      st.phase = JobPhase::kRunning;
      Event("Normal", "Recovered",
            absl::StrFormat("incident %d: training resumed at step %d (attempt %d); %.1f s of training time lost",
                            open->id, min_step, st.attempt, open->training_time_lost_seconds));
    }
    // Passing the last failure's step ends the escalation (reattempt -> rollback -> replay).
    // After a NaN / spike incident a step only counts once its loss was found healthy (folded
    // into the loss reference): the ranks complete numerically bad steps too.
    const Incident* last = st.incidents.empty() ? nullptr : &st.incidents.back();
    const bool numeric_last = last != nullptr && (last->kind == "NaNLoss" || last->kind == "LossSpike");
    if ((st.reattempts > 0 || st.rollbacks > 0) && OpenIncident() == nullptr && last != nullptr &&
        min_step > last->step_at_failure && (!numeric_last || st.loss_reference.step > last->step_at_failure)) {
      st.reattempts = 0;
      st.rollbacks = 0;
    }
    if (!st.version_history.empty()) {
      VersionRecord& current = st.version_history.back();
      if (current.outcome == "Running" && current.code == st.code &&
          st.last_completed_step >= current.applied_at_step + config_.healthy_version_steps) {
        current.outcome = "Healthy";
      }
    }
  }

  void DetectAndTriage() {
    JobStatus& st = plan_.status;
    std::vector<int> lost_slots;
    std::vector<std::string> signals;
    std::vector<std::string> user_errors;
    std::string lost_kind = "MachineLost";
    bool process_failed = false;
    auto machine_at_fault = [&](const SlotStatus& slot, const std::string& reason) {
      lost_slots.push_back(slot.index);
      signals.insert(signals.begin() + static_cast<long>(lost_slots.size() - 1),
                     absl::StrFormat("machine %s (slot %d, pod %s): %s", slot.machine_id, slot.index, slot.pod, reason));
    };
    for (const SlotStatus& slot : st.slots) {
      std::string reason;
      if (PodLost(slot.pod, slot.observed, &reason)) {
        machine_at_fault(slot, reason);
        continue;
      }
      const AgentObservation* a = Agent(slot.pod);
      if (a == nullptr) continue;
      // Machine-attributed inspection faults (fatal Xid, GPU lost, ECC, disk): evict now.
      if (std::optional<std::string> fault = MachineAttributedFault(*a)) {
        machine_at_fault(slot, absl::StrCat("inspection ", *fault));
        lost_kind = "MachineFault";
        continue;
      }
      // Network alarms: tolerated until the Nth within the window on the same machine.
      if (!slot.machine_id.empty()) {
        const FaultToleranceSpec& ft = spec_.fault_tolerance;
        const int added = RecordNetworkAlarms(slot.machine_id, *a, config_.max_network_alarms, &st.network_alarms);
        const int64_t window = static_cast<int64_t>(ft.network_alarm_window_seconds) * kNanosPerSecond;
        const int recent = NetworkAlarmsWithin(st.network_alarms, slot.machine_id, now_, window);
        if (recent >= ft.network_alarms_to_evict) {
          machine_at_fault(slot, absl::StrFormat("%d network alarms within %d s (latest: %s)", recent,
                                                 ft.network_alarm_window_seconds,
                                                 st.network_alarms.empty() ? "" : st.network_alarms.back().summary));
          if (lost_kind == "MachineLost") lost_kind = "NetworkAlarms";
          continue;
        }
        if (added > 0) {
          Event("Warning", "NetworkAlarmTolerated",
                absl::StrFormat("machine %s (slot %d): %d of %d alarms within %d s before eviction",
                                slot.machine_id, slot.index, recent,
                                ft.network_alarms_to_evict, ft.network_alarm_window_seconds));
        }
      }
      if (a->attempt == st.attempt && a->phase == AgentTrainingPhase::kExited) {
        process_failed = true;
        for (const RankExit& e : a->exits) {
          if (e.exit_code != 0 || e.signal != 0) signals.push_back(absl::StrCat("pod ", slot.pod, ": ", ExitText(e)));
          if (e.exit_code != 0) {
            if (std::optional<std::string> err = UserCodeError(e.last_log_lines)) {
              user_errors.push_back(absl::StrFormat("rank %d: %s", e.global_rank, *err));
            }
          }
        }
      }
      const std::string id = CommandId(slot.pod, st.attempt);
      if (auto it = a->failed_commands.find(id); it != a->failed_commands.end()) {
        process_failed = true;
        signals.push_back(absl::StrCat("pod ", slot.pod, ": start failed: ", it->second));
      }
    }
    // An attempt that never completes a step fails (stuck rendezvous, a rank that never came up).
    if (!process_failed && lost_slots.empty() && st.attempt_started_at != 0 &&
        st.last_completed_step <= st.resume_step && now_ - st.attempt_started_at > config_.start_timeout_ns) {
      process_failed = true;
      signals.push_back(absl::StrFormat("attempt %d made no step in %d s", st.attempt, config_.start_timeout_ns / kNanosPerSecond));
    }
    // NaN / Inf or a loss spike on a running attempt (no other failure, no open incident).
    std::optional<LossVerdict> numeric;
    if (!process_failed && lost_slots.empty() && st.triage_deadline == 0 && OpenIncident() == nullptr &&
        st.phase == JobPhase::kRunning) {
      std::map<int, RankLossObservation> losses;
      for (const SlotStatus& slot : st.slots) {
        const AgentObservation* a = Agent(slot.pod);
        if (a == nullptr || a->attempt != st.attempt) continue;
        for (const auto& [rank, l] : a->rank_losses) {
          if (l.step > st.resume_step) losses[rank] = l;
        }
      }
      numeric = CheckLosses(losses, spec_.fault_tolerance.loss_spike_factor, &st.loss_reference);
      if (numeric) signals.push_back(numeric->signal);
    }
    // Hang / MFU drop: stack aggregation over-evicts the outliers' parallel group (hang_policy.h).
    const HangDecision hang = RunHangPolicy(process_failed || !lost_slots.empty() || numeric.has_value());
    if (hang.verdict == HangVerdict::kEvict) {
      for (int index : hang.evict_slots) {
        if (index < 0 || index >= static_cast<int>(st.slots.size())) continue;
        if (std::find(lost_slots.begin(), lost_slots.end(), index) != lost_slots.end()) continue;
        machine_at_fault(st.slots[index], "in the group stack aggregation over-evicts");
      }
      if (lost_kind == "MachineLost") lost_kind = hang.kind;
    } else if (hang.verdict == HangVerdict::kReattempt) {  // no outlier: the no-culprit ladder
      process_failed = true;
      signals.push_back(hang.reason);
    }
    const bool failure = process_failed || !lost_slots.empty() || numeric.has_value();
    // A lost machine makes every peer's collectives fail: name the machine, count the rest.
    if (!lost_slots.empty()) {
      std::vector<std::string> machine_signals(signals.begin(), signals.begin() + static_cast<long>(lost_slots.size()));
      std::vector<std::string> kept;
      int peer_exits = 0;
      for (const std::string& sig : signals) {
        if (std::find(machine_signals.begin(), machine_signals.end(), sig) != machine_signals.end()) {
          kept.push_back(sig);
        } else {
          ++peer_exits;
        }
      }
      if (peer_exits > 0) kept.push_back(absl::StrFormat("%d rank(s) on other machines exited after it", peer_exits));
      signals = std::move(kept);
    }

    if (failure && st.triage_deadline == 0) {
      Incident inc;
      inc.id = st.next_incident_id++;
      inc.kind = !lost_slots.empty() ? lost_kind : (numeric && !process_failed ? numeric->kind : "ProcessCrash");
      inc.signal = absl::StrJoin(signals, "; ");
      inc.detected_at = now_;
      inc.step_at_failure = st.max_completed_step;
      st.incidents.push_back(inc);
      TrimFront(st.incidents, config_.max_incidents);
      st.triage_deadline = now_ + config_.triage_window_ns;
      st.phase = JobPhase::kRecovering;
      Event("Warning", inc.kind, absl::StrCat("incident ", inc.id, " detected: ", inc.signal));
      plan_.requeue_after_ns = config_.triage_window_ns;
      return;
    }
    if (st.triage_deadline == 0) return;
    if (now_ < st.triage_deadline) {
      plan_.requeue_after_ns = st.triage_deadline - now_;
      return;
    }
    // Triage window over: decide on everything observed now.
    st.triage_deadline = 0;
    Incident* inc = OpenIncident();
    if (inc == nullptr) return;
    if (!signals.empty()) inc->signal = absl::StrJoin(signals, "; ");
    inc->decided_at = now_;
    if (hang.verdict == HangVerdict::kEvict || hang.verdict == HangVerdict::kReattempt) {
      inc->signal = absl::StrCat(hang.signal, "; ", inc->signal);
      inc->actions.insert(inc->actions.end(), hang.details.begin(), hang.details.end());
    }
    bool rolled_back = false;
    if (!lost_slots.empty()) {
      inc->kind = lost_kind;
      EvictAndActivate(lost_slots, inc);
      inc->decision = hang.verdict == HangVerdict::kEvict
                          ? absl::StrCat(hang.reason, "; activate warm standbys, restart the others in place")
                          : "evict the machine, activate a warm standby, restart the others in place";
    } else if (process_failed || inc->kind == "NaNLoss" || inc->kind == "LossSpike") {
      const std::optional<CodeVersionSpec> target = RollbackTarget(st.version_history);
      if (!user_errors.empty() && target) {
        inc->kind = "UserCodeError";
        inc->signal = absl::StrCat(absl::StrJoin(user_errors, "; "), "; ", inc->signal);
        inc->decision = "user-code error: roll back the code version";
        Rollback(*target, inc, absl::StrCat("user-code error: ", user_errors.front()));
        rolled_back = true;
      } else if (!user_errors.empty()) {
        // A deterministic error of the user's code and no earlier version: no machine is
        // at fault (no diagnosis, never a replay); one reattempt in place, then give up.
        inc->kind = "UserCodeError";
        inc->signal = absl::StrCat(absl::StrJoin(user_errors, "; "), "; ", inc->signal);
        if (st.reattempts > 0) {
          FailJob(inc, "UserCodeError",
                  absl::StrFormat("user-code error again after a reattempt, and no earlier code version to roll "
                                  "back to: the job fails (%s); fix the code and submit an update",
                                  user_errors.front()));
          return;
        }
        inc->decision = "user-code error and no earlier code version to roll back to: reattempt in place once";
        ++st.reattempts;
      } else {
        // No culprit: stop training and diagnose (stop_time_diagnosis.h).
        inc->decided_at = 0;
        const bool numeric_incident = inc->kind == "NaNLoss" || inc->kind == "LossSpike";
        st.diagnosis = BeginStopTimeDiagnosis(inc->id, numeric_incident, obs_.candidate_master_port, now_);
        inc->actions.push_back(absl::StrFormat("stop training on %d machines for stop-time diagnosis (%s)",
                                               st.slots.size(),
                                               numeric_incident ? "alignment, EUD, all-to-all, neighbour all-gather"
                                                                : "EUD, all-to-all, neighbour all-gather"));
        Event("Warning", "Diagnosing", absl::StrCat("incident ", inc->id, ": ", inc->actions.back()));
        AdvanceDiagnosis();
        return;
      }
    } else {
      inc->decision = "signal not confirmed: no action";
      inc->resumed_at = now_;
      st.phase = JobPhase::kRunning;
      return;
    }
    FinishRecovery(inc, rolled_back);
  }

  // Runs the stack-aggregation policy (hangs, MFU drops) and merges its commands, events
  // and state; a detected hang opens its incident and holds the triage until the verdict.
  HangDecision RunHangPolicy(bool other_failure) {
    JobStatus& st = plan_.status;
    auto layout = ParallelLayout::Create(spec_.parallelism.tensor, spec_.parallelism.pipeline, spec_.parallelism.data,
                                         spec_.gpus_per_machine);
    if (!layout.ok() || layout->machines() != static_cast<int>(st.slots.size())) return HangDecision{};
    const bool steady = st.phase == JobPhase::kRunning && OpenIncident() == nullptr && st.triage_deadline == 0;
    HangDecision d = DecideHang(MakeHangPolicyInput(job_, st, obs_, &*layout, steady, other_failure), now_);
    st.stack_diagnosis = d.state;
    for (const StackCaptureRequest& r : d.captures) {
      CommandToSend c;
      c.pod = r.pod;
      c.id = r.command_id;
      c.kind = CommandKind::kCaptureStacks;
      plan_.commands.push_back(std::move(c));
    }
    plan_.events.insert(plan_.events.end(), d.events.begin(), d.events.end());
    if (d.wake_at > now_ && (plan_.requeue_after_ns == 0 || d.wake_at - now_ < plan_.requeue_after_ns)) {
      plan_.requeue_after_ns = d.wake_at - now_;
    }
    switch (d.verdict) {
      case HangVerdict::kHangDetected: {
        Incident inc;
        inc.id = st.next_incident_id++;
        inc.kind = d.kind;
        inc.signal = d.signal;
        inc.detected_at = now_;
        inc.step_at_failure = st.max_completed_step;
        inc.actions.push_back(absl::StrFormat("capture the stacks of every training process on %d machines",
                                              st.slots.size()));
        // The hang began before it could be detected: that time is lost training time too.
        st.training_time_lost_seconds += d.silent_seconds;
        inc.training_time_lost_seconds = d.silent_seconds;
        inc.actions.push_back(absl::StrFormat("%.1f s without a step before detection counted as lost training time",
                                              d.silent_seconds));
        st.incidents.push_back(inc);
        TrimFront(st.incidents, config_.max_incidents);
        if (!st.stack_diagnosis.investigations.empty()) st.stack_diagnosis.investigations.back().incident_id = inc.id;
        st.triage_deadline = d.hold_until + config_.triage_window_ns;  // the verdict comes by hold_until
        st.phase = JobPhase::kRecovering;
        Event("Warning", inc.kind, absl::StrCat("incident ", inc.id, " detected: ", inc.signal));
        break;
      }
      case HangVerdict::kEvict:
      case HangVerdict::kReattempt:
      case HangVerdict::kResolved:
        if (st.triage_deadline > now_) st.triage_deadline = now_;  // the investigation was the triage
        break;
      case HangVerdict::kAbandoned:
        st.triage_deadline = std::min(st.triage_deadline, now_ + config_.triage_window_ns);
        if (Incident* inc = OpenIncident(); inc != nullptr && inc->kind == "Hang") inc->kind = "ProcessCrash";
        break;
      case HangVerdict::kNone:
        break;
    }
    return d;
  }

  // Ends the job as Failed on `inc` (no restart): the current version's outcome becomes
  // Failed, the Failed condition carries `reason` and `message`, training is stopped.
  void FailJob(Incident* inc, const std::string& reason, const std::string& message) {
    JobStatus& st = plan_.status;
    inc->decided_at = now_;
    inc->decision = message;
    st.phase = JobPhase::kFailed;
    st.finished_at = now_;
    if (!st.version_history.empty() && st.version_history.back().code == st.code) {
      st.version_history.back().outcome = "Failed";
    }
    inc->actions.push_back("stop training; the job failed");
    SetCondition(st, "Failed", true, reason, message, job_.metadata.generation, now_);
    Event("Warning", "Failed", absl::StrCat("incident ", inc->id, ": ", message));
    StopAll();
  }

  // Counts the recovery (or gives up past maxRecoveries), applies a pending lazy update and
  // restarts every machine in place.
  void FinishRecovery(Incident* inc, bool rolled_back) {
    JobStatus& st = plan_.status;
    inc->decided_at = now_;
    ++st.recoveries;
    if (st.recoveries > spec_.fault_tolerance.max_recoveries) {
      st.phase = JobPhase::kFailed;
      st.finished_at = now_;
      inc->actions.push_back(absl::StrFormat("give up: %d recoveries exceed maxRecoveries", st.recoveries));
      SetCondition(st, "Failed", true, "MaxRecoveriesExceeded", inc->actions.back(), job_.metadata.generation, now_);
      Event("Warning", "Failed", inc->actions.back());
      StopAll();
      return;
    }
    if (st.pending_code && !rolled_back) {
      const std::string from = st.code.revision;
      ApplyCode(*st.pending_code, "lazy hot update at the failure-triggered restart");
      inc->actions.push_back(absl::StrCat("apply the pending code update (revision ", st.code.revision, ")"));
      Event("Normal", "HotUpdate",
            absl::StrFormat("code revision %s -> %s at the failure-triggered restart of incident %d (lazy update)",
                            from, st.code.revision, inc->id));
    }
    StartNewAttempt(inc);
  }

  // One round of the stop-time diagnosis in progress; on its verdict, evict what failed or
  // escalate: reattempt in place -> roll back the last code update -> dual-phase replay.
  void AdvanceDiagnosis() {
    JobStatus& st = plan_.status;
    Incident* inc = nullptr;
    for (Incident& i : st.incidents) {
      if (i.id == st.diagnosis->incident_id) inc = &i;
    }
    if (inc == nullptr) {  // the incident fell out of the bounded history: start over cleanly
      st.diagnosis.reset();
      return;
    }
    // A machine lost meanwhile ends the diagnosis: it is the one to evict.
    std::vector<int> lost;
    for (const SlotStatus& slot : st.slots) {
      std::string reason;
      const AgentObservation* a = Agent(slot.pod);
      std::optional<std::string> fault = a ? MachineAttributedFault(*a) : std::nullopt;
      if (PodLost(slot.pod, slot.observed, &reason) || fault) {
        lost.push_back(slot.index);
        inc->signal = absl::StrCat(inc->signal, "; during diagnosis: machine ", slot.machine_id, " ",
                                   fault ? absl::StrCat("inspection ", *fault) : reason);
      }
    }
    if (!lost.empty()) {
      st.diagnosis.reset();
      inc->kind = "MachineLost";
      inc->decision = "machine lost during stop-time diagnosis: evict it, activate a warm standby, restart the others in place";
      EvictAndActivate(lost, inc);
      FinishRecovery(inc, false);
      return;
    }
    DiagnosisContext ctx;
    ctx.id_prefix = absl::StrCat(job_.metadata.namespace_, "/", job_.metadata.name, "/incident-", inc->id);
    for (const SlotStatus& slot : st.slots) {
      ctx.machines.push_back(DiagnosisMachine{slot.index, slot.pod, slot.machine_id, PodAddress(slot.pod), Agent(slot.pod)});
    }
    ctx.gpus_per_machine = spec_.gpus_per_machine;
    ctx.parallelism = spec_.parallelism;
    ctx.stop_grace_ms = spec_.fault_tolerance.restart_grace_seconds * 1000;
    ctx.now = now_;
    const std::string stage_before = st.diagnosis->stage;
    DiagnosisAdvance step = AdvanceStopTimeDiagnosis(ctx, &*st.diagnosis, &inc->diagnosis);
    for (CommandToSend& c : step.commands) plan_.commands.push_back(std::move(c));
    if (!step.finished) {
      plan_.requeue_after_ns = step.requeue_after_ns;
      if (st.diagnosis->stage != stage_before) {
        Event("Normal", "DiagnosisStage", absl::StrCat("incident ", inc->id, ": stage ", st.diagnosis->stage));
      }
      return;
    }
    const bool was_replay = st.diagnosis->stage == "replay";
    if (!step.failed_slots.empty()) {
      st.diagnosis.reset();
      const DiagnosisStageRecord& r = inc->diagnosis.back();
      inc->decision = absl::StrFormat("stop-time diagnosis: %s failed on %s: evict, activate a warm standby, restart the others in place",
                                      r.stage, absl::StrJoin(r.failed_machines, ", "));
      if (was_replay) inc->kind = "SilentDataCorruption";
      EvictAndActivate(step.failed_slots, inc);
      FinishRecovery(inc, false);
      return;
    }
    // Every stage passed: no machine at fault by the diagnostics.
    const std::optional<CodeVersionSpec> target = RollbackTarget(st.version_history);
    const int max_reattempts = spec_.fault_tolerance.max_reattempts;
    if (was_replay) {
      st.diagnosis.reset();
      inc->decision = "stop-time diagnosis and dual-phase replay found no machine: reattempt in place";
      ++st.reattempts;
      FinishRecovery(inc, false);
      return;
    }
    if (st.reattempts < max_reattempts && st.rollbacks == 0) {
      st.diagnosis.reset();
      inc->decision = "stop-time diagnosis passed on every machine: reattempt in place";
      ++st.reattempts;
      FinishRecovery(inc, false);
      return;
    }
    if (target && st.rollbacks == 0) {
      st.diagnosis.reset();
      inc->decision = absl::StrFormat(
          "stop-time diagnosis passed; failed again after %d reattempt(s) without passing the failure step: roll back "
          "the last code update",
          st.reattempts);
      Rollback(*target, inc, "failed again after a reattempt in place");
      st.rollbacks += 1;
      FinishRecovery(inc, true);
      return;
    }
    StartReplayStage(&*st.diagnosis, now_);
    inc->actions.push_back(target ? "failed again after the rollback: dual-phase replay to locate the faulty machine"
                                  : "failed again with no earlier version: dual-phase replay to locate the faulty machine");
    Event("Warning", "DualPhaseReplay", absl::StrCat("incident ", inc->id, ": ", inc->actions.back()));
    AdvanceDiagnosis();
  }

  // Makes `code` the running version (recorded in the bounded history) for the next attempt.
  void ApplyCode(const CodeVersionSpec& code, const std::string& reason) {
    JobStatus& st = plan_.status;
    st.code = code;
    st.pending_code.reset();
    st.pending_code_since = 0;
    st.version_history.push_back(VersionRecord{code, now_, reason, "Running", st.last_completed_step});
    TrimFront(st.version_history, config_.max_versions);
  }

  void Rollback(const CodeVersionSpec& target, Incident* inc, const std::string& why) {
    JobStatus& st = plan_.status;
    const std::string from = st.code.revision;
    if (!st.version_history.empty()) st.version_history.back().outcome = "RolledBack";
    ApplyCode(target, absl::StrCat("rollback: ", why));
    st.reattempts = 0;
    inc->actions.push_back(absl::StrFormat("roll back code revision %s -> %s", from, target.revision));
    Event("Warning", "RolledBack", absl::StrCat("incident ", inc->id, ": ", inc->actions.back()));
  }

  // Hot update: the desired code (spec.codeVersion) differs from the running one. Urgent
  // (annotation peregrine.dev/hot-update: urgent) restarts in place now; otherwise it
  // waits for the next failure-triggered restart or hotUpdateWindowHours.
  void HotUpdate() {
    JobStatus& st = plan_.status;
    if (st.phase != JobPhase::kRunning || OpenIncident() != nullptr) return;
    const CodeVersionSpec& desired = spec_.code;
    if (st.pending_code && !(*st.pending_code == desired)) st.pending_code.reset();
    if (desired.command.empty() || desired == st.code || WasRejected(st.version_history, desired)) return;
    auto urgent_it = job_.metadata.annotations.find("peregrine.dev/hot-update");
    const bool urgent = urgent_it != job_.metadata.annotations.end() && urgent_it->second == "urgent";
    const int64_t window =
        static_cast<int64_t>(spec_.fault_tolerance.hot_update_window_hours * 3600.0 * kNanosPerSecond);
    if (!urgent && !st.pending_code) {
      st.pending_code = desired;
      st.pending_code_since = now_;
      Event("Normal", "HotUpdatePending",
            absl::StrFormat("code revision %s waits for the next restart (at most %.1f h)", desired.revision,
                            spec_.fault_tolerance.hot_update_window_hours));
      return;
    }
    if (!urgent && now_ < st.pending_code_since + window) {
      plan_.requeue_after_ns = st.pending_code_since + window - now_;
      return;
    }
    const std::string from = st.code.revision;
    ApplyCode(desired, urgent ? "urgent hot update" : "hot update window expired");
    st.attempt += 1;
    st.resume_step = st.last_completed_step;
    st.attempt_started_at = now_;
    st.master_addr = MasterAddr();
    st.master_port = obs_.candidate_master_port;
    st.reattempts = 0;
    st.rollbacks = 0;
    Event("Normal", "HotUpdate",
          absl::StrFormat("code revision %s -> %s: restart %d machines in place from step %d (attempt %d)", from,
                          desired.revision, st.slots.size(), st.resume_step, st.attempt));
  }

  void EvictAndActivate(const std::vector<int>& lost_slots, Incident* inc) {
    JobStatus& st = plan_.status;
    for (int index : lost_slots) {
      SlotStatus& slot = st.slots[index];
      inc->machines.push_back(slot.machine_id);
      st.evicted.push_back(Eviction{slot.machine_id, slot.pod, inc->signal, now_});
      plan_.delete_pods.push_back(PodToDelete{slot.pod, "evicted: machine-attributed fault"});
      inc->actions.push_back(absl::StrFormat("evict machine %s (pod %s, slot %d)", slot.machine_id, slot.pod, index));
      Event("Warning", "Evicted", inc->actions.back());
      // The first ready standby takes the slot.
      auto ready = std::find_if(st.standbys.begin(), st.standbys.end(), [&](const StandbyStatus& sb) {
        const AgentObservation* a = Agent(sb.pod);
        const PodObservation* p = Pod(sb.pod);
        return a && a->connected && a->registered_as_standby && a->self_check_passed && p && p->running;
      });
      if (ready != st.standbys.end()) {
        inc->actions.push_back(absl::StrFormat("activate standby %s (machine %s) in slot %d", ready->pod,
                                               ready->machine_id, index));
        slot.pod = ready->pod;
        slot.machine_id = ready->machine_id;
        slot.observed = true;
        st.standbys.erase(ready);
        Event("Normal", "StandbyActivated", inc->actions.back());
      } else {
        slot.pod = absl::StrCat(ActivePodName(job_.metadata.name, index), "-", st.next_pod_serial++);
        slot.machine_id.clear();
        slot.observed = false;
        plan_.create_pods.push_back(PodToCreate{slot.pod, PodRole::kActive, index});
        inc->actions.push_back(absl::StrFormat("no ready standby: create pod %s for slot %d", slot.pod, index));
      }

    }
    TrimFront(st.evicted, config_.max_evictions);
  }

  void StartNewAttempt(Incident* inc) {
    JobStatus& st = plan_.status;
    st.attempt += 1;
    st.resume_step = st.last_completed_step;
    st.max_completed_step = std::max(st.max_completed_step, st.resume_step);
    st.attempt_started_at = now_;
    st.master_addr = MasterAddr();
    st.master_port = obs_.candidate_master_port;
    inc->resume_step = st.resume_step;
    inc->actions.push_back(absl::StrFormat("restart %d machines in place from step %d (attempt %d)", st.slots.size(),
                                           st.resume_step, st.attempt));
    Event("Normal", "Restarting", absl::StrCat("incident ", inc->id, ": ", inc->decision, "; ", inc->actions.back()));
  }

  void StopAll() {
    for (const SlotStatus& slot : plan_.status.slots) {
      const AgentObservation* a = Agent(slot.pod);
      if (a == nullptr || !a->connected) continue;
      if (a->phase == AgentTrainingPhase::kIdle || a->phase == AgentTrainingPhase::kExited) continue;
      CommandToSend c;
      c.pod = slot.pod;
      c.id = absl::StrCat(job_.metadata.namespace_, "/", job_.metadata.name, "/", slot.pod, "/stop");
      c.kind = CommandKind::kStop;
      c.grace_ms = spec_.fault_tolerance.restart_grace_seconds * 1000;
      if (std::find(a->pending_command_ids.begin(), a->pending_command_ids.end(), c.id) == a->pending_command_ids.end()) {
        plan_.commands.push_back(c);
      }
    }
  }

  std::string CommandId(const std::string& pod, uint64_t attempt) const {
    return absl::StrCat(job_.metadata.namespace_, "/", job_.metadata.name, "/", pod, "/attempt-", attempt);
  }

  // Every slot's agent runs the current attempt; one that does not gets a command with a
  // deterministic id (an agent that registered after the attempt began converges alone).
  void ConvergeAgents() {
    JobStatus& st = plan_.status;
    for (const SlotStatus& slot : st.slots) {
      const AgentObservation* a = Agent(slot.pod);
      if (a == nullptr || !a->connected) continue;
      if (a->attempt == st.attempt && a->phase != AgentTrainingPhase::kIdle && a->phase != AgentTrainingPhase::kUnknown) {
        continue;
      }
      if (a->acked_attempt == st.attempt && !a->registered_as_standby) continue;
      const std::string id = CommandId(slot.pod, st.attempt);
      if (std::find(a->pending_command_ids.begin(), a->pending_command_ids.end(), id) != a->pending_command_ids.end()) {
        continue;
      }
      if (a->failed_commands.count(id)) continue;
      CommandToSend c;
      c.pod = slot.pod;
      c.id = id;
      c.kind = a->registered_as_standby ? CommandKind::kActivate : CommandKind::kRestartInPlace;
      c.assignment = DesiredAssignment(slot.index);
      c.grace_ms = spec_.fault_tolerance.restart_grace_seconds * 1000;
      plan_.commands.push_back(std::move(c));
    }
  }

  void DetectSuccess() {
    JobStatus& st = plan_.status;
    for (const SlotStatus& slot : st.slots) {
      const AgentObservation* a = Agent(slot.pod);
      if (a == nullptr || a->attempt != st.attempt || a->phase != AgentTrainingPhase::kSucceeded) return;
    }
    st.phase = JobPhase::kSucceeded;
    st.finished_at = now_;
    st.last_completed_step = std::max(st.last_completed_step, st.max_completed_step);
    Event("Normal", "Succeeded", absl::StrFormat("training finished at step %d after %d recoveries",
                                                 st.last_completed_step, st.recoveries));
  }

  void FillDesiredAgents() {
    const JobStatus& st = plan_.status;
    for (const SlotStatus& slot : st.slots) plan_.desired_agents[slot.pod] = DesiredAgent{false, DesiredAssignment(slot.index)};
    for (const StandbyStatus& sb : st.standbys) plan_.desired_agents[sb.pod] = DesiredAgent{true, {}};
  }

  void UpdateEttr() {
    JobStatus& st = plan_.status;
    const int64_t end = st.finished_at != 0 ? st.finished_at : now_;
    const double elapsed = static_cast<double>(end - st.started_at) / kNanosPerSecond;
    double lost = st.training_time_lost_seconds;
    if (Incident* open = OpenIncident(); open != nullptr) lost += static_cast<double>(now_ - open->detected_at) / kNanosPerSecond;
    st.ettr = elapsed > 0 ? std::clamp(1.0 - lost / elapsed, 0.0, 1.0) : 1.0;
  }

  void UpdateConditions() {
    JobStatus& st = plan_.status;
    const int64_t gen = job_.metadata.generation;
    const bool running = st.phase == JobPhase::kRunning;
    SetCondition(st, "Ready", running, running ? "Training" : JobPhaseName(st.phase),
                 absl::StrFormat("phase %s, attempt %d, step %d", JobPhaseName(st.phase), st.attempt, st.last_completed_step),
                 gen, now_);
    const Incident* open = OpenIncident();
    SetCondition(st, "Degraded", open != nullptr, open ? open->kind : "NoIncident",
                 open ? absl::StrCat("incident ", open->id, ": ", open->signal) : "no open incident", gen, now_);
    const bool terminal = st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed;
    SetCondition(st, "StandbyReady", terminal || st.standby_ready >= st.standby_desired,
                 terminal ? "JobFinished" : (st.standby_ready >= st.standby_desired ? "PoolReady" : "PoolFilling"),
                 absl::StrFormat("%d of %d standbys ready", st.standby_ready, st.standby_desired), gen, now_);
  }

  const TrainingJob& job_;
  const TrainingJobSpec& spec_;
  const JobObservation& obs_;
  const int64_t now_;
  const DecisionConfig& config_;
  JobPlan plan_;
  std::map<std::string, const PodObservation*> pods_;
  std::map<std::string, const AgentObservation*> agents_;
};

}  // namespace

const char* JobPhaseName(JobPhase phase) {
  switch (phase) {
    case JobPhase::kPending: return "Pending";
    case JobPhase::kRunning: return "Running";
    case JobPhase::kRecovering: return "Recovering";
    case JobPhase::kSucceeded: return "Succeeded";
    case JobPhase::kFailed: return "Failed";
  }
  return "Unknown";
}

const char* CommandKindName(CommandKind kind) {
  switch (kind) {
    case CommandKind::kRestartInPlace: return "restart_in_place";
    case CommandKind::kActivate: return "activate";
    case CommandKind::kStop: return "stop";
    case CommandKind::kSetNcclMode: return "set_nccl_mode";
    case CommandKind::kPause: return "pause";
    case CommandKind::kResume: return "resume";
    case CommandKind::kCaptureStacks: return "capture_stacks";
    case CommandKind::kRunDiagnostic: return "run_diagnostic";
  }
  return "unknown";
}

std::string ActivePodName(const std::string& job, int slot) { return absl::StrCat(job, "-m", slot); }
std::string StandbyPodName(const std::string& job, uint64_t serial) { return absl::StrCat(job, "-s", serial); }

JobPlan DecideJob(const TrainingJob& job, const JobStatus& status, const JobObservation& obs, int64_t now,
                  const DecisionConfig& config) {
  return Decider(job, status, obs, now, config).Run();
}

}  // namespace peregrine
