// DecideJob, failure detection and triage: progress tracking, lost machines, crashes, loss spikes, hangs, eviction and standby activation.
#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "absl/strings/ascii.h"
#include "controller/core/agent_reach.h"
#include "controller/core/conditions.h"
#include "controller/core/exit_policy.h"
#include "controller/core/failslow_mitigation.h"
#include "controller/core/hang_policy.h"
#include "controller/core/internal/decider.h"
#include "controller/core/list_summary.h"
#include "controller/core/loss_monitor.h"
#include "controller/core/pod_health.h"
#include "controller/core/recovery_policy.h"
#include "controller/core/standby_pool_size.h"
#include "controller/core/stop_time_diagnosis.h"

namespace peregrine::decision_internal {
namespace {

// The incident a stack investigation opens or evicts for.
IncidentKind IncidentKindOf(InvestigationKind kind) {
  switch (kind) {
    case InvestigationKind::kHang:
      return IncidentKind::kHang;
    case InvestigationKind::kMfuDrop:
      return IncidentKind::kMfuDrop;
  }
  return IncidentKind::kHang;  // unreachable: the switch covers every value
}

}  // namespace

void Decider::TrackProgress() {
  JobStatus& st = plan_.status;
  uint64_t min_step = std::numeric_limits<uint64_t>::max();
  uint64_t max_step = st.resume_step;
  double iter_sum = 0;
  int iter_n = 0;
  const int gpus = spec_.gpus_per_machine;
  // Ranks that printed no progress line in this attempt (a trainer where only rank 0
  // reports) do not hold back "every rank completed step N": the minimum is over the
  // ranks that report, the resume step when none does.
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    for (int r = slot.index * gpus; r < (slot.index + 1) * gpus; ++r) {
      if (!a || a->attempt != st.attempt) continue;
      auto it = a->rank_steps.find(r);
      if (it == a->rank_steps.end() || it->second <= st.resume_step) continue;
      min_step = std::min(min_step, it->second);
      max_step = std::max(max_step, it->second);
    }
    if (a && a->attempt == st.attempt && a->mean_iteration_seconds > 0) {
      iter_sum += a->mean_iteration_seconds;
      ++iter_n;
    }
  }
  if (min_step == std::numeric_limits<uint64_t>::max()) min_step = st.resume_step;
  // Attempt 1's start-up, measured once: the fail-slow ladder's restart cost before any
  // incident (failslow_mitigation.h MeasureRestartCost).
  if (st.attempt == 1 && st.first_step_seconds == 0 && st.attempt_started_at != 0 && min_step > st.resume_step &&
      now_ > st.attempt_started_at) {
    st.first_step_seconds = static_cast<double>(now_ - st.attempt_started_at) / kNanosPerSecond;
  }
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
    Event(JobEventType::kNormal, "Recovered",
          absl::StrFormat("incident %d: training resumed at step %d (attempt %d); %.1f s of training time lost",
                          open->id, min_step, st.attempt, open->training_time_lost_seconds));
  }
  // Passing the last failure's step ends the escalation (reattempt -> rollback -> replay).
  // After a NaN / spike incident a step only counts once its loss was found healthy (folded
  // into the loss reference): the ranks complete numerically bad steps too.
  const Incident* last = st.incidents.empty() ? nullptr : &st.incidents.back();
  const bool numeric_last = last != nullptr && IsNumeric(last->kind);
  if ((st.reattempts > 0 || st.rollbacks > 0) && OpenIncident() == nullptr && last != nullptr &&
      min_step > last->step_at_failure && (!numeric_last || st.loss_reference.step > last->step_at_failure)) {
    st.reattempts = 0;
    st.rollbacks = 0;
  }
  if (!st.version_history.empty()) {
    VersionRecord& current = st.version_history.back();
    if (current.outcome == VersionOutcome::kRunning && current.code == st.code &&
        st.last_completed_step >= current.applied_at_step + config_.healthy_version_steps) {
      current.outcome = VersionOutcome::kHealthy;
    }
  }
}

void Decider::DetectAndTriage() {
  JobStatus& st = plan_.status;
  std::vector<int> lost_slots;
  std::vector<std::string> signals;
  std::vector<std::string> user_errors;
  IncidentKind lost_kind = IncidentKind::kMachineLost;
  bool process_failed = false;
  std::vector<FailedExit> failed_exits;  // of the current attempt (exit_policy.h)
  auto machine_at_fault = [&](const SlotStatus& slot, const std::string& reason) {
    lost_slots.push_back(slot.index);
    signals.insert(signals.begin() + static_cast<long>(lost_slots.size() - 1),
                   absl::StrFormat("machine %s (slot %d, pod %s): %s", slot.machine_id, slot.index, slot.pod, reason));
  };
  // A pod on an unready node: lost, or kept while its agent vouches for the machine
  // (pod_health.h); the suspicion is persisted on the slot and shown as an event.
  const FaultToleranceSpec& fts = spec_.fault_tolerance;
  auto judge_node = [&](SlotStatus& slot, const PodObservation& p, const AgentObservation* a) {
    NodeUnreadyInput in;
    in.node_unready = p.node_unready;
    in.node_reason = p.reason.empty() ? absl::StrCat("node ", p.machine_id, " not Ready") : p.reason;
    in.agent = a;
    in.training = a != nullptr && a->attempt == st.attempt && st.attempt > 0 &&
                  (a->phase == AgentTrainingPhase::kRunning || a->phase == AgentTrainingPhase::kUnknown);
    if (a != nullptr) {
      for (const auto& [rank, step] : a->rank_steps) in.step = std::max(in.step, step);
    }
    in.since = slot.node_unready_since;
    in.since_step = slot.node_unready_since == 0 ? in.step : slot.node_unready_step;
    in.progress_at = slot.node_unready_progress_at;
    in.grace_ns = static_cast<int64_t>(fts.node_unreachable_grace_seconds) * kNanosPerSecond;
    in.heartbeat_timeout_ns = static_cast<int64_t>(fts.heartbeat_timeout_seconds) * kNanosPerSecond;
    in.stall_ns = static_cast<int64_t>(fts.hang_timeout_seconds) * kNanosPerSecond;
    if (st.mean_iteration_seconds > 0) {
      in.stall_ns = std::max(in.stall_ns, static_cast<int64_t>(10 * st.mean_iteration_seconds * kNanosPerSecond));
    }
    const NodeUnreadyJudgement j = JudgeNodeUnready(in, now_);
    if (j.verdict == NodeUnreadyVerdict::kTolerate && slot.node_unready_since == 0) {
      Event(JobEventType::kWarning, "NodeUnreachableTolerated",
            absl::StrFormat("machine %s (slot %d, pod %s): %s", slot.machine_id, slot.index, slot.pod, j.reason));
    } else if (j.verdict == NodeUnreadyVerdict::kReady && slot.node_unready_since != 0) {
      Event(JobEventType::kNormal, "NodeReachable",
            absl::StrFormat("machine %s (slot %d, pod %s): its node is Ready again", slot.machine_id, slot.index,
                            slot.pod));
    }
    // Kept until the node is Ready again or the slot's pod is replaced: a machine judged
    // lost stays lost for the rest of the triage window.
    const bool keep = j.verdict != NodeUnreadyVerdict::kReady;
    slot.node_unready_since = keep ? j.since : 0;
    slot.node_unready_step = keep ? j.step : 0;
    slot.node_unready_progress_at = keep ? j.progress_at : 0;
    return j;
  };
  // Pods lost for a reason that is not their machine's: replaced, never quarantined.
  std::set<std::string> blameless_pods;
  std::vector<std::string> tolerated_nodes;
  for (SlotStatus& slot : st.slots) {
    std::string reason;
    if (PodLost(slot.pod, slot.observed, &reason)) {
      const PodObservation* p = Pod(slot.pod);
      if (p == nullptr || p->not_machine_fault) {
        blameless_pods.insert(slot.pod);
        if (p == nullptr) reason = "pod disappeared without Peregrine deleting it";
        absl::StrAppend(&reason, " (not the machine's fault: it is not quarantined)");
      }
      machine_at_fault(slot, reason);
      continue;
    }
    const AgentObservation* a = Agent(slot.pod);
    if (const PodObservation* p = Pod(slot.pod); p != nullptr) {
      const NodeUnreadyJudgement node = judge_node(slot, *p, a);
      if (node.verdict == NodeUnreadyVerdict::kEvict) {
        machine_at_fault(slot, node.reason);
        continue;
      }
      if (node.verdict == NodeUnreadyVerdict::kTolerate) tolerated_nodes.push_back(node.reason);
    }
    if (a == nullptr) continue;
    // Machine-attributed inspection faults (fatal Xid, GPU lost, ECC, disk): evict now.
    if (std::optional<std::string> fault = MachineAttributedFault(*a)) {
      machine_at_fault(slot, absl::StrCat("inspection ", *fault));
      lost_kind = IncidentKind::kMachineFault;
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
        if (lost_kind == IncidentKind::kMachineLost) lost_kind = IncidentKind::kNetworkAlarms;
        continue;
      }
      if (added > 0) {
        Event(JobEventType::kWarning, "NetworkAlarmTolerated",
              absl::StrFormat("machine %s (slot %d): %d of %d alarms within %d s before eviction",
                              slot.machine_id, slot.index, recent,
                              ft.network_alarms_to_evict, ft.network_alarm_window_seconds));
      }
    }
    if (a->attempt == st.attempt && a->phase == AgentTrainingPhase::kExited) {
      process_failed = true;
      for (const RankExit& e : a->exits) {
        if (e.exit_code != 0 || e.signal != 0) {
          signals.push_back(absl::StrCat("pod ", slot.pod, ": ", ExitText(e)));
          failed_exits.push_back(FailedExit{slot.pod, e});
        }
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
  // Every rank exited non-zero before any progress with the same error: deterministic, the
  // user's code (or environment), not a machine. Never diagnosed; reattempted up to
  // maxReattempts, then rolled back or failed (below).
  // A recognised user-code error keeps its own ladder (roll back at once when it can).
  std::optional<std::string> startup_failure = StartupFailure();
  if (!user_errors.empty()) startup_failure.reset();
  if (startup_failure) user_errors.push_back(*startup_failure);
  // An attempt that never completes a step fails (stuck rendezvous, a rank that never came up).
  const int64_t start_timeout_ns =
      static_cast<int64_t>(spec_.fault_tolerance.start_timeout_seconds) * kNanosPerSecond;
  if (!process_failed && lost_slots.empty() && st.attempt_started_at != 0 &&
      st.last_completed_step <= st.resume_step && now_ - st.attempt_started_at > start_timeout_ns) {
    process_failed = true;
    signals.push_back(absl::StrFormat("attempt %d made no step in %d s (startTimeoutSeconds)", st.attempt,
                                      spec_.fault_tolerance.start_timeout_seconds));
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
    if (lost_kind == IncidentKind::kMachineLost) lost_kind = IncidentKindOf(hang.kind);
  } else if (hang.verdict == HangVerdict::kReattempt) {  // no outlier: the no-culprit ladder
    process_failed = true;
    signals.push_back(hang.reason);
  }
  // The fail-slow ladder decided S4 (failslow_mitigation.h): its machines are at fault, under
  // an incident of kind FailSlow that opens only when no other incident is open (and is
  // decided with the others at the end of its triage window). The MFU-drop path never
  // acts on the same slowdown: it stands down while a fail-slow is localized.
  std::optional<FailSlowReplacement> failslow;
  {
    const Incident* open = OpenIncident();
    failslow = PendingFailSlowReplacement(st, open != nullptr ? open->id : 0);
    if (failslow && (failslow->incident_id == 0 ? open != nullptr || st.triage_deadline != 0
                                                 : open == nullptr || open->decided_at != 0)) {
      failslow.reset();
    }
    if (failslow) {
      const bool only = lost_slots.empty();
      for (int index : failslow->slots) {
        if (std::find(lost_slots.begin(), lost_slots.end(), index) != lost_slots.end()) continue;
        machine_at_fault(st.slots[index], failslow->reason);
      }
      if (only) lost_kind = IncidentKind::kFailSlow;
    }
  }
  if (tolerated_nodes.empty()) {
    SetCondition(st, kNodeUnreachableCondition, false, "NodesReady", "every pod's node is Ready, or judged lost",
                 job_.metadata.generation, now_);
  } else {
    SetCondition(st, kNodeUnreachableCondition, true, "AgentVouches", absl::StrJoin(tolerated_nodes, "; "),
                 job_.metadata.generation, now_);
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
    inc.kind = !lost_slots.empty() ? lost_kind : (numeric && !process_failed ? numeric->kind : IncidentKind::kProcessCrash);
    inc.signal = SummarizeList(signals);
    inc.detected_at = now_;
    inc.step_at_failure = st.max_completed_step;
    st.incidents.push_back(inc);
    TrimFront(st.incidents, config_.max_incidents);
    if (failslow) {
      for (FailSlowFinding& f : st.fail_slows) {
        if (f.id == failslow->finding_id) f.mitigation.incident_id = inc.id;
      }
    }
    st.triage_deadline = now_ + config_.triage_window_ns;
    st.phase = JobPhase::kRecovering;
    Event(JobEventType::kWarning, ToString(inc.kind), absl::StrCat("incident ", inc.id, " detected: ", inc.signal));
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
  if (!signals.empty()) inc->signal = SummarizeList(signals);
  inc->decided_at = now_;
  if (hang.verdict == HangVerdict::kEvict || hang.verdict == HangVerdict::kReattempt) {
    inc->signal = absl::StrCat(hang.signal, "; ", inc->signal);
    inc->actions.insert(inc->actions.end(), hang.details.begin(), hang.details.end());
  }
  // The user's exit rules (exit_policy.h) come before every heuristic: FailJob ends the job
  // even when machines were lost with it; RestartInPlace and Ignore restart in place when
  // no machine was (a lost machine is replaced whatever its ranks' exit codes were).
  const std::optional<ExitJudgement> by_rule = JudgeExits(spec_.fault_tolerance.exit_rules, failed_exits);
  if (by_rule && by_rule->action == ExitAction::kFailJob) {
    FailJob(inc, "ExitRule",
            absl::StrFormat("%s, which exitRules[%d] (FailJob) covers: the job fails (%d other failed exit(s))",
                            by_rule->exit, by_rule->rule, by_rule->covered + by_rule->other - 1));
    return;
  }
  bool rolled_back = false;
  bool counted = true;
  if (!lost_slots.empty()) {
    inc->kind = lost_kind;
    EvictAndActivate(lost_slots, inc);
    // EvictAndActivate appended one eviction per lost slot (and may have trimmed the oldest).
    for (size_t i = st.evicted.size() - std::min(st.evicted.size(), lost_slots.size()); i < st.evicted.size(); ++i) {
      Eviction& e = st.evicted[i];
      if (!blameless_pods.count(e.pod)) continue;
      e.machine_fault = false;
      inc->actions.push_back(absl::StrFormat("pod %s replaced; machine %s not quarantined (not its fault)", e.pod,
                                             e.machine_id));
    }
    inc->decision = hang.verdict == HangVerdict::kEvict
                        ? absl::StrCat(hang.reason, "; activate warm standbys, restart the others in place")
                    : inc->kind == IncidentKind::kFailSlow
                        ? "fail-slow mitigation S4: evict the slow machine, activate a warm standby, restart the "
                          "others in place"
                        : "evict the machine, activate a warm standby, restart the others in place";
  } else if (process_failed && by_rule) {  // RestartInPlace or Ignore
    counted = by_rule->action != ExitAction::kIgnore;
    inc->decision = absl::StrFormat(
        "%s, which exitRules[%d] (%s) covers (%d other failed exit(s)): restart in place without diagnosis%s",
        by_rule->exit, by_rule->rule, ExitActionName(by_rule->action), by_rule->covered + by_rule->other - 1,
        counted ? "" : ", not counted against maxRecoveries");
  } else if (process_failed || IsNumeric(inc->kind)) {
    const std::optional<CodeVersionSpec> target = RollbackTarget(st.version_history);
    if (startup_failure && st.reattempts < spec_.fault_tolerance.max_reattempts) {
      inc->kind = IncidentKind::kUserCodeError;
      inc->signal = absl::StrCat(*startup_failure, "; ", inc->signal);
      inc->decision = absl::StrFormat(
          "every rank failed at start-up with the same error: reattempt in place (%d of %d)", st.reattempts + 1,
          spec_.fault_tolerance.max_reattempts);
      ++st.reattempts;
    } else if (startup_failure && !target) {
      inc->kind = IncidentKind::kUserCodeError;
      inc->signal = absl::StrCat(*startup_failure, "; ", inc->signal);
      FailJob(inc, "UserCodeError",
              absl::StrFormat("every rank failed at start-up with the same error after %d reattempt(s), and no "
                              "earlier code version to roll back to: the job fails (%s); fix the code and submit "
                              "an update",
                              st.reattempts, *startup_failure));
      return;
    } else if (!user_errors.empty() && target) {
      inc->kind = IncidentKind::kUserCodeError;
      inc->signal = absl::StrCat(SummarizeList(user_errors), "; ", inc->signal);
      inc->decision = "user-code error: roll back the code version";
      Rollback(*target, inc, absl::StrCat("user-code error: ", user_errors.front()));
      rolled_back = true;
    } else if (!user_errors.empty()) {
      // A deterministic error of the user's code and no earlier version: no machine is
      // at fault (no diagnosis, never a replay); one reattempt in place, then give up.
      inc->kind = IncidentKind::kUserCodeError;
      inc->signal = absl::StrCat(SummarizeList(user_errors), "; ", inc->signal);
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
      const bool numeric_incident = IsNumeric(inc->kind);
      st.diagnosis = BeginStopTimeDiagnosis(inc->id, numeric_incident, obs_.candidate_master_port, now_);
      inc->actions.push_back(absl::StrFormat("stop training on %d machines for stop-time diagnosis (%s)",
                                             st.slots.size(),
                                             numeric_incident ? "alignment, EUD, all-to-all, neighbour all-gather"
                                                              : "EUD, all-to-all, neighbour all-gather"));
      Event(JobEventType::kWarning, "Diagnosing", absl::StrCat("incident ", inc->id, ": ", inc->actions.back()));
      AdvanceDiagnosis();
      return;
    }
  } else {
    inc->decision = "signal not confirmed: no action";
    inc->resumed_at = now_;
    st.phase = JobPhase::kRunning;
    Event(JobEventType::kNormal, "SignalNotConfirmed",
          absl::StrFormat("incident %d: %s; training continues", inc->id, inc->decision));
    return;
  }
  FinishRecovery(inc, rolled_back, counted);
}

// Runs the stack-aggregation policy (hangs, MFU drops) and merges its commands, events
// and state; a detected hang opens its incident and holds the triage until the verdict.
HangDecision Decider::RunHangPolicy(bool other_failure) {
  JobStatus& st = plan_.status;
  auto layout = ParallelLayout::Create(spec_.parallelism.tensor, spec_.parallelism.pipeline, spec_.parallelism.data,
                                       spec_.gpus_per_machine);
  if (!layout.ok() || layout->machines() != static_cast<int>(st.slots.size())) return HangDecision{};
  const bool steady = st.phase == JobPhase::kRunning && OpenIncident() == nullptr && st.triage_deadline == 0;
  HangPolicyInput in = MakeHangPolicyInput(job_, st, obs_, &*layout, steady, other_failure);
  // An unreachable agent's ranks are not seen to train: no hang or MFU drop is judged on
  // its stale steps. While steady, the hang clock is held, so it restarts when the link
  // comes back instead of counting the partition as time without a step.
  const int64_t heartbeat_timeout =
      static_cast<int64_t>(spec_.fault_tolerance.heartbeat_timeout_seconds) * kNanosPerSecond;
  bool partitioned = false;
  for (HangPolicySlot& s : in.slots) {
    if (JudgeAgentReach(Pod(s.pod), Agent(s.pod), heartbeat_timeout, now_).reach == AgentReach::kUnreachable) {
      s.training_alive = false;
      partitioned = true;
    }
  }
  if (partitioned && steady) in.held = true;
  HangDecision d = DecideHang(in, now_);
  st.stack_diagnosis = std::move(d.state);  // the caller reads the verdict only
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
      inc.kind = IncidentKindOf(d.kind);
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
      Event(JobEventType::kWarning, ToString(inc.kind), absl::StrCat("incident ", inc.id, " detected: ", inc.signal));
      break;
    }
    case HangVerdict::kEvict:
    case HangVerdict::kReattempt:
    case HangVerdict::kResolved:
      if (st.triage_deadline > now_) st.triage_deadline = now_;  // the investigation was the triage
      break;
    case HangVerdict::kAbandoned:
      st.triage_deadline = std::min(st.triage_deadline, now_ + config_.triage_window_ns);
      if (Incident* inc = OpenIncident(); inc != nullptr && inc->kind == IncidentKind::kHang) inc->kind = IncidentKind::kProcessCrash;
      break;
    case HangVerdict::kNone:
      break;
  }
  return d;
}

// Ends the job as Failed on `inc` (no restart): the current version's outcome becomes
// Failed, the Failed condition carries `reason` and `message`, training is stopped.
void Decider::FailJob(Incident* inc, const std::string& reason, const std::string& message) {
  JobStatus& st = plan_.status;
  inc->decided_at = now_;
  inc->decision = message;
  st.phase = JobPhase::kFailed;
  st.finished_at = now_;
  if (!st.version_history.empty() && st.version_history.back().code == st.code) {
    st.version_history.back().outcome = VersionOutcome::kFailed;
  }
  inc->actions.push_back("stop training; the job failed");
  SetCondition(st, "Failed", true, reason, message, job_.metadata.generation, now_);
  Event(JobEventType::kWarning, "Failed", absl::StrCat("incident ", inc->id, ": ", message));
  StopAll();
}

void Decider::EvictAndActivate(const std::vector<int>& lost_slots, Incident* inc) {
  JobStatus& st = plan_.status;
  for (int index : lost_slots) {
    SlotStatus& slot = st.slots[index];
    inc->machines.push_back(slot.machine_id);
    Eviction eviction{slot.machine_id, slot.pod, inc->signal, now_};
    eviction.incident_id = inc->id;
    st.evicted.push_back(std::move(eviction));
    plan_.delete_pods.push_back(PodToDelete{slot.pod, "evicted: machine-attributed fault"});
    inc->actions.push_back(absl::StrFormat("evict machine %s (pod %s, slot %d)", slot.machine_id, slot.pod, index));
    Event(JobEventType::kWarning, "Evicted", inc->actions.back());
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
      slot.node_unready_since = ready->node_unready_since;
      slot.node_unready_step = 0;
      slot.node_unready_progress_at = 0;
      slot.observed = true;
      st.standbys.erase(ready);
      Event(JobEventType::kNormal, "StandbyActivated", inc->actions.back());
    } else {
      slot.pod = absl::StrCat(ActivePodName(job_.metadata.name, index), "-", st.next_pod_serial++);
      slot.machine_id.clear();
      slot.observed = false;
      slot.node_unready_since = 0;
      slot.node_unready_step = 0;
      slot.node_unready_progress_at = 0;
      plan_.create_pods.push_back(PodToCreate{slot.pod, PodRole::kActive, index, ActiveImage()});
      inc->actions.push_back(absl::StrFormat("no ready standby: create pod %s for slot %d", slot.pod, index));
    }

  }
  TrimFront(st.evicted, config_.max_evictions);
}

// Every rank of the job exited non-zero (no signal) in this attempt before any rank
// completed a step, and their last output lines end with the same error line (the rank
// prefix "[rankN]: " ignored; the exit code when a rank printed nothing).
std::optional<std::string> Decider::StartupFailure() const {
  const JobStatus& st = plan_.status;
  const int gpus = spec_.gpus_per_machine;
  std::optional<std::string> common;
  for (const SlotStatus& slot : st.slots) {
    const AgentObservation* a = Agent(slot.pod);
    if (a == nullptr || a->attempt != st.attempt || a->phase != AgentTrainingPhase::kExited) return std::nullopt;
    for (const auto& [rank, step] : a->rank_steps) {
      if (step > st.resume_step) return std::nullopt;
    }
    for (int r = slot.index * gpus; r < (slot.index + 1) * gpus; ++r) {
      auto e = std::find_if(a->exits.begin(), a->exits.end(), [&](const RankExit& x) { return x.global_rank == r; });
      if (e == a->exits.end() || e->exit_code == 0 || e->signal != 0) return std::nullopt;
      std::string line = absl::StrFormat("exit code %d", e->exit_code);
      for (auto it = e->last_log_lines.rbegin(); it != e->last_log_lines.rend(); ++it) {
        absl::string_view text = *it;
        if (absl::StartsWith(text, "[rank")) {
          if (size_t colon = text.find("]: "); colon != absl::string_view::npos) text.remove_prefix(colon + 3);
        }
        text = absl::StripAsciiWhitespace(text);
        if (!text.empty()) {
          line = std::string(text);
          break;
        }
      }
      if (common && *common != line) return std::nullopt;
      common = line;
    }
  }
  if (!common) return std::nullopt;
  return absl::StrFormat("every rank exited before its first step with the same error: %s", *common);
}

}  // namespace peregrine::decision_internal
