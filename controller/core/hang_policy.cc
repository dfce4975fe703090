#include "controller/core/hang_policy.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "diagnosis/mfu_rounds.h"
#include "diagnosis/stack_aggregation.h"
#include "diagnosis/stack_parse.h"

// How HangPolicy decides (stack aggregation, ByteRobust section 5.1).
//
// Hang (one round):
//  - detection: the attempt has completed at least one step, every slot's training
//    processes are alive (pod running, agent connected, running this attempt) and the
//    slowest rank has completed no step for
//        timeout = max(spec.faultTolerance.hangTimeoutSeconds, hang_iterations x the
//                      job's mean iteration time)
//    (default max(60 s, 10 x mean iteration)). The progress watch (attempt, step, since) is
//    persisted, so a controller restart neither forgets nor restarts the clock.
//  - capture: a capture_stacks command goes to every active pod; its id is deterministic,
//    "<ns>/<job>/<pod>/stacks-<investigation id>-<round>", so a controller restart re-sends
//    the same id and the agent answers from its memory of executed commands instead of
//    capturing twice.
//  - aggregation: when every pod has answered (success or error) or capture_deadline has
//    passed, the ranks' stacks are grouped (diagnosis/stack_aggregation.h). A pod that did
//    not answer contributes no stacks, so its ranks are "<no stack captured>" and are
//    suspects themselves, unless its answer was lost with its agent's link: the agent
//    disconnected, silent for longer than the heartbeat timeout (a half-open stream), or
//    no longer holding the command (its stream dropped and came back, the command and its
//    answer lost). Such ranks are inconclusive, not suspects; when they make up the largest
//    group no group can be taken as healthy and nothing is evicted. The dominant group is
//    healthy; when the largest groups tie or nearly tie, the ranks' activities decide (a
//    rank idling in a data loader or queue while its peers wait in collectives is the
//    suspect; stack_aggregation.h). The smallest TP/PP/DP group whose machines cover every
//    suspect's machine is chosen (the union of their machines when no group does). The
//    verdict line (the investigation's explanation, the StackVerdict event and the
//    incident's details) ends with the aggregation's confidence and its reason.
//  - verdict: kEvict with the chosen machine slots (the engine evicts them all through its
//    eviction path: warm standbys where ready, new pods for the rest, every other machine
//    restarted in place), or kReattempt when no outlier stands out (identical stacks, or
//    no healthy majority). The verdict is repeated every round until the engine has acted
//    on it (the attempt moved on), then the investigation is Evicted / Reattempted.
//  - progress resumes during the capture: kResolved (the engine closes the incident with
//    no action). Another failure (a process exit, a lost machine): kAbandoned, the
//    engine's own paths take over.
// MFU drop (rounds):
//  - detection: no investigation open, training steady, and the job's mean iteration
//    time has stayed >= mfu_drop_factor (2) x its healthy level for mfu_sustain (30 s). The
//    healthy level is an EWMA (mfu_healthy_alpha) of the iteration times seen while not
//    degraded, from mfu_warmup_steps into the attempt. Falcon-Detect owns the slowdowns it
//    is working on: no rounds while a fail-slow finding is Localized, nor while one has been
//    Profiling for less than mfu_failslow_grace (5 min); the rounds cover drops it does not
//    report or cannot localize.
//  - rounds: every mfu_round_interval (10 s) a capture round as above; each round flags
//    the group holding the most suspect machines (diagnosis/mfu_rounds.h); after
//    mfu_rounds (5) rounds the group flagged most is evicted (kEvict, kind MfuDrop) when it
//    was flagged in at least mfu_min_flags (3) rounds, so that snapshots that catch random
//    ranks in random places evict nothing; otherwise the investigation ends with no action
//    (Resolved). When a machine stops training the rounds are Abandoned; when the
//    iteration time falls back below the drop factor they are Resolved; a hang takes over
//    (the MFU investigation is Abandoned and a Hang investigation starts).
// Investigations are bounded (max_investigations, oldest dropped).

namespace peregrine {
namespace {

constexpr int64_t kNanosPerSecond = 1'000'000'000;
constexpr size_t kMaxSummaryChars = 240;

bool IsOpen(const StackInvestigation& inv) {
  switch (inv.state) {
    case InvestigationState::kCapturing:
    case InvestigationState::kWaiting:
    case InvestigationState::kDecided:
      return true;
    case InvestigationState::kEvicted:
    case InvestigationState::kReattempted:
    case InvestigationState::kResolved:
    case InvestigationState::kAbandoned:
      return false;
  }
  return false;
}

std::optional<GroupKind> KindFromName(const std::string& name) {
  for (GroupKind k : {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData}) {
    if (name == GroupKindName(k)) return k;
  }
  return std::nullopt;
}

std::string GroupName(GroupKind kind, int index) { return absl::StrCat(GroupKindName(kind), " ", index); }

class Policy {
 public:
  Policy(const HangPolicyInput& in, int64_t now, const HangPolicyOptions& options)
      : in_(in), now_(now), options_(options) {
    d_.state = in.state;
  }

  HangDecision Run() {
    StackDiagnosisStatus& st = d_.state;
    if (in_.layout == nullptr) return std::move(d_);
    WatchProgress();
    StackInvestigation* open = Open();
    if (open != nullptr && open->attempt != in_.attempt) {
      // The engine acted on the verdict (a new attempt started), or the attempt was
      // restarted for another reason while the investigation ran.
      if (open->state == InvestigationState::kDecided) {
        open->state = open->slots.empty() ? InvestigationState::kReattempted : InvestigationState::kEvicted;
      } else {
        open->state = InvestigationState::kAbandoned;
        open->explanation = absl::StrCat("attempt ", open->attempt, " ended before the verdict");
      }
      open->ended_at = now_;
      open = nullptr;
    }
    if (open != nullptr && open->state == InvestigationState::kDecided) {
      RepeatVerdict(*open);
      return std::move(d_);
    }
    if (open != nullptr && in_.other_failure) {
      open->state = InvestigationState::kAbandoned;
      open->ended_at = now_;
      open->explanation = "another failure (a process exit or a lost machine) took over";
      if (open->kind == InvestigationKind::kHang) {
        d_.verdict = HangVerdict::kAbandoned;
        d_.kind = open->kind;
      }
      return std::move(d_);
    }
    if (open != nullptr && open->kind == InvestigationKind::kHang && st.progress_at > open->started_at) {
      open->state = InvestigationState::kResolved;
      open->ended_at = now_;
      open->explanation = absl::StrFormat("training progressed again (step %d) before the verdict", st.progress_step);
      d_.verdict = HangVerdict::kResolved;
      d_.kind = open->kind;
      Event(JobEventType::kNormal, "HangResolved", absl::StrCat("investigation ", open->id, ": ", open->explanation));
      return std::move(d_);
    }
    if ((open == nullptr || open->kind == InvestigationKind::kMfuDrop) && MaybeDetectHang(open)) return std::move(d_);
    if (open == nullptr) {
      WatchMfu();
      return std::move(d_);
    }
    if (open->kind == InvestigationKind::kMfuDrop && !AllAlive()) {  // a machine finished, left or is restarting
      open->state = InvestigationState::kAbandoned;
      open->ended_at = now_;
      open->explanation = "training is no longer running on every machine";
      return std::move(d_);
    }
    if (open->kind == InvestigationKind::kMfuDrop && MfuRecovered()) {
      open->state = InvestigationState::kResolved;
      open->ended_at = now_;
      open->explanation = absl::StrFormat("iteration time %.3f s is back below %.1f x the healthy %.3f s",
                                          in_.recent_iteration_seconds, options_.mfu_drop_factor,
                                          st.healthy_iteration_seconds);
      st.degraded_since = 0;
      Event(JobEventType::kNormal, "MfuRecovered", absl::StrCat("investigation ", open->id, ": ", open->explanation));
      return std::move(d_);
    }
    if (open->state == InvestigationState::kWaiting) {
      if (now_ < open->next_round_at) {
        Wake(open->next_round_at);
        return std::move(d_);
      }
      open->state = InvestigationState::kCapturing;
      open->rounds.push_back(StackRound{});
      open->rounds.back().started_at = now_;
    }
    Capture(*open);
    return std::move(d_);
  }

 private:
  StackInvestigation* Open() {
    auto& v = d_.state.investigations;
    return (!v.empty() && IsOpen(v.back())) ? &v.back() : nullptr;
  }

  void Event(JobEventType type, const std::string& reason, const std::string& message) {
    d_.events.push_back(JobEvent{type, reason, message});
  }

  void Wake(int64_t at) {
    if (at > now_ && (d_.wake_at == 0 || at < d_.wake_at)) d_.wake_at = at;
  }

  bool AllAlive() const {
    if (in_.slots.empty()) return false;
    return std::all_of(in_.slots.begin(), in_.slots.end(), [](const HangPolicySlot& s) { return s.training_alive; });
  }

  void WatchProgress() {
    StackDiagnosisStatus& st = d_.state;
    if (st.progress_attempt != in_.attempt) {
      st.progress_attempt = in_.attempt;
      st.progress_step = in_.last_completed_step;
      st.progress_at = now_;
      st.healthy_iteration_seconds = 0;
      st.degraded_since = 0;
      return;
    }
    if (in_.last_completed_step != st.progress_step || in_.held) {
      st.progress_step = in_.last_completed_step;
      st.progress_at = now_;
    }
  }

  StackInvestigation& Start(InvestigationKind kind, int rounds, const std::string& signal) {
    StackDiagnosisStatus& st = d_.state;
    StackInvestigation inv;
    inv.id = st.next_id++;
    inv.kind = kind;
    inv.state = InvestigationState::kCapturing;
    inv.attempt = in_.attempt;
    inv.signal = signal;
    inv.started_at = now_;
    inv.rounds_planned = rounds;
    inv.rounds.push_back(StackRound{});
    inv.rounds.back().started_at = now_;
    st.investigations.push_back(std::move(inv));
    if (st.investigations.size() > options_.max_investigations) {
      st.investigations.erase(st.investigations.begin(),
                              st.investigations.begin() +
                                  static_cast<long>(st.investigations.size() - options_.max_investigations));
    }
    return st.investigations.back();
  }

  bool MaybeDetectHang(StackInvestigation* mfu) {
    const StackDiagnosisStatus& st = d_.state;
    if (!in_.steady && mfu == nullptr) return false;
    if (in_.held) return false;
    if (!AllAlive() || in_.last_completed_step <= in_.resume_step || in_.other_failure) return false;
    const int64_t timeout = HangTimeoutNanos(in_.hang_timeout_seconds, in_.mean_iteration_seconds, options_);
    const int64_t silent = now_ - st.progress_at;
    if (silent < timeout) {
      Wake(st.progress_at + timeout);
      return false;
    }
    if (mfu != nullptr) {
      mfu->state = InvestigationState::kAbandoned;
      mfu->ended_at = now_;
      mfu->explanation = "training hung: a hang investigation took over";
    }
    const std::string signal = absl::StrFormat(
        "the slowest rank completed no step for %.1f s (last step %d; timeout %.1f s) while every training process "
        "is alive",
        static_cast<double>(silent) / kNanosPerSecond, st.progress_step,
        static_cast<double>(timeout) / kNanosPerSecond);
    StackInvestigation& inv = Start(InvestigationKind::kHang, 1, signal);
    d_.verdict = HangVerdict::kHangDetected;
    d_.kind = InvestigationKind::kHang;
    d_.signal = signal;
    d_.hold_until = now_ + options_.capture_deadline_ns;
    d_.silent_seconds = static_cast<double>(silent) / kNanosPerSecond;
    Event(JobEventType::kWarning, "StackCapture",
          absl::StrFormat("investigation %d: capturing the stacks of every training process on %d machines",
                          inv.id, in_.slots.size()));
    Capture(inv);
    return true;
  }

  void WatchMfu() {
    StackDiagnosisStatus& st = d_.state;
    if (!in_.steady || !AllAlive() || in_.recent_iteration_seconds <= 0 ||
        in_.last_completed_step < in_.resume_step + options_.mfu_warmup_steps) {
      return;
    }
    const double recent = in_.recent_iteration_seconds;
    if (st.healthy_iteration_seconds <= 0) st.healthy_iteration_seconds = recent;
    if (recent < options_.mfu_drop_factor * st.healthy_iteration_seconds) {
      st.healthy_iteration_seconds += options_.mfu_healthy_alpha * (recent - st.healthy_iteration_seconds);
      st.degraded_since = 0;
      return;
    }
    if (st.degraded_since == 0) st.degraded_since = now_;
    // Falcon-Detect named the cause (its ladder acts), or is still locating it.
    if (in_.fail_slow_localized) return;
    if (in_.fail_slow_profiling_since != 0 && now_ - in_.fail_slow_profiling_since < options_.mfu_failslow_grace_ns) {
      Wake(in_.fail_slow_profiling_since + options_.mfu_failslow_grace_ns);
      return;
    }
    if (now_ - st.degraded_since < options_.mfu_sustain_ns) {
      Wake(st.degraded_since + options_.mfu_sustain_ns);
      return;
    }
    const std::string signal = absl::StrFormat(
        "iteration time %.3f s is %.1f x the healthy %.3f s for %.0f s without a fail-slow localization", recent,
        recent / st.healthy_iteration_seconds, st.healthy_iteration_seconds,
        static_cast<double>(now_ - st.degraded_since) / kNanosPerSecond);
    StackInvestigation& inv = Start(InvestigationKind::kMfuDrop, std::max(1, options_.mfu_rounds), signal);
    Event(JobEventType::kWarning, "MfuDrop",
          absl::StrFormat("investigation %d: %s; %d stack rounds %.0f s apart", inv.id, signal, inv.rounds_planned,
                          static_cast<double>(options_.mfu_round_interval_ns) / kNanosPerSecond));
    Capture(inv);
  }

  bool MfuRecovered() const {
    const StackDiagnosisStatus& st = d_.state;
    return in_.recent_iteration_seconds > 0 && st.healthy_iteration_seconds > 0 &&
           in_.recent_iteration_seconds < options_.mfu_drop_factor * st.healthy_iteration_seconds;
  }

  // Sends what is missing of the current round; finishes it when every pod answered or
  // the deadline passed.
  void Capture(StackInvestigation& inv) {
    const int round = static_cast<int>(inv.rounds.size());
    StackRound& r = inv.rounds.back();
    bool all_answered = true;
    for (const HangPolicySlot& slot : in_.slots) {
      const std::string id = StackCaptureCommandId(in_.command_prefix, slot.pod, inv.id, round);
      if (in_.replies.count(id)) continue;
      all_answered = false;
      if (!in_.pending.count(id)) d_.captures.push_back(StackCaptureRequest{slot.pod, id});
    }
    const int64_t deadline = r.started_at + options_.capture_deadline_ns;
    if (!all_answered && now_ < deadline) {
      Wake(deadline);
      return;
    }
    FinishRound(inv, round);
  }

  void FinishRound(StackInvestigation& inv, int round) {
    StackRound& r = inv.rounds.back();
    r.finished_at = now_;
    const ParallelLayout& layout = *in_.layout;
    const int gpus = layout.gpus_per_machine();
    std::vector<RankStacks> ranks;
    std::vector<std::string> failures;
    std::set<int> link_lost_ranks;
    std::vector<int> link_lost_slots;
    for (const HangPolicySlot& slot : in_.slots) {
      const std::string id = StackCaptureCommandId(in_.command_prefix, slot.pod, inv.id, round);
      auto it = in_.replies.find(id);
      if (it == in_.replies.end() && LinkLost(slot, id)) {
        link_lost_slots.push_back(slot.index);
        for (int rank = slot.index * gpus; rank < (slot.index + 1) * gpus; ++rank) link_lost_ranks.insert(rank);
        failures.push_back(absl::StrFormat("slot %d (pod %s): inconclusive, agent link lost (%s): not a suspect",
                                           slot.index, slot.pod, LinkLostReason(slot)));
        continue;
      }
      if (it == in_.replies.end() || !it->second.ok) {
        r.unanswered_slots.push_back(slot.index);
        failures.push_back(it == in_.replies.end()
                               ? absl::StrFormat("slot %d (pod %s) did not answer in time", slot.index, slot.pod)
                               : absl::StrFormat("slot %d (pod %s) failed: %s", slot.index, slot.pod,
                                                 it->second.error));
        continue;
      }
      for (const auto& [rank, processes] : it->second.stacks) {
        if (rank < slot.index * gpus || rank >= (slot.index + 1) * gpus || rank >= layout.world_size()) continue;
        if (processes.empty()) continue;
        ranks.push_back(RankStacks{rank, processes});
      }
    }
    absl::StatusOr<StackAggregation> agg = AggregateStacks(layout, ranks);
    if (!agg.ok()) {  // cannot happen after the filtering above; keep the verdict safe
      r.explanation = absl::StrCat("aggregation failed: ", agg.status().message());
    } else {
      for (size_t i = 0; i < agg->groups.size(); ++i) {
        const StackGroup& g = agg->groups[i];
        std::string summary = g.summary;
        if (summary.size() > kMaxSummaryChars) summary = summary.substr(0, kMaxSummaryChars) + "...";
        r.groups.push_back(absl::StrFormat("ranks %s%s: %s [%s]", absl::StrJoin(g.ranks, ","),
                                           static_cast<int>(i) == agg->dominant_group ? " (healthy)" : "", summary,
                                           FrameKindName(g.kind)));
      }
      if (!link_lost_ranks.empty()) ExcludeLinkLost(layout, link_lost_ranks, link_lost_slots, &*agg);
      r.suspect_ranks = agg->suspect_ranks;
      r.explanation = agg->explanation;
    }
    if (!failures.empty()) {  // into the first line, which is the verdict
      const size_t eol = std::min(r.explanation.find('\n'), r.explanation.size());
      r.explanation.insert(eol, absl::StrCat(" (", absl::StrJoin(failures, "; "), ")"));
    }

    if (inv.kind == InvestigationKind::kHang) {
      DecideFromAggregation(inv, agg.ok() ? &*agg : nullptr);
      return;
    }
    // MFU rounds.
    if (agg.ok()) {
      if (std::optional<FlaggedGroup> f = GroupWithMostOutliers(layout, agg->suspect_ranks)) {
        r.flagged_kind = GroupKindName(f->kind);
        r.flagged_index = f->index;
      }
    }
    if (static_cast<int>(inv.rounds.size()) < inv.rounds_planned) {
      inv.state = InvestigationState::kWaiting;
      inv.next_round_at = r.started_at + options_.mfu_round_interval_ns;
      Wake(std::max(inv.next_round_at, now_ + 1));
      return;
    }
    MfuDropRounds series(layout, inv.rounds_planned);
    for (const StackRound& past : inv.rounds) {
      std::optional<FlaggedGroup> flagged;
      if (std::optional<GroupKind> k = KindFromName(past.flagged_kind); k && past.flagged_index >= 0) {
        flagged = FlaggedGroup{*k, past.flagged_index};
      }
      series.RecordRound(flagged);
    }
    std::optional<MfuVerdict> verdict = series.Decide();
    if (!verdict || !verdict->group || verdict->machines_to_evict.empty() ||
        verdict->flags < options_.mfu_min_flags) {
      inv.state = InvestigationState::kResolved;
      inv.ended_at = now_;
      inv.explanation = !verdict ? "no verdict"
                        : verdict->group
                            ? absl::StrFormat("%s flagged in only %d of %d rounds (at least %d needed): no action",
                                              GroupName(verdict->group->kind, verdict->group->index), verdict->flags,
                                              inv.rounds_planned, options_.mfu_min_flags)
                            : verdict->explanation;
      Event(JobEventType::kNormal, "MfuDropNoOutlier", absl::StrCat("investigation ", inv.id, ": ", inv.explanation));
      return;
    }
    inv.state = InvestigationState::kDecided;
    inv.chosen_group = GroupName(verdict->group->kind, verdict->group->index);
    inv.slots = verdict->machines_to_evict;
    inv.explanation = absl::StrFormat("%s flagged in %d of %d rounds: %s", inv.chosen_group, verdict->flags,
                                      inv.rounds_planned, verdict->explanation);
    RecordMachines(inv);
    Event(JobEventType::kWarning, "StackVerdict", absl::StrCat("investigation ", inv.id, ": ", inv.explanation));
    RepeatVerdict(inv);
  }

  // Whether `slot`'s missing answer to capture `id` was lost with its agent's link.
  bool LinkLost(const HangPolicySlot& slot, const std::string& id) const {
    return !slot.agent_connected || now_ - slot.agent_last_seen > in_.heartbeat_timeout_ns || !in_.pending.count(id);
  }

  std::string LinkLostReason(const HangPolicySlot& slot) const {
    if (!slot.agent_connected) return "agent disconnected";
    if (now_ - slot.agent_last_seen > in_.heartbeat_timeout_ns) {
      return absl::StrFormat("agent silent for %d s", (now_ - slot.agent_last_seen) / kNanosPerSecond);
    }
    return "the command and its answer were lost with a dropped stream";
  }

  // Takes the ranks whose answers were lost with their agents' links out of the suspects
  // and plans the over-eviction again for the rest; their group cannot be the healthy one.
  static void ExcludeLinkLost(const ParallelLayout& layout, const std::set<int>& lost_ranks,
                              const std::vector<int>& lost_slots, StackAggregation* agg) {
    const std::string groups_text = agg->explanation.substr(std::min(agg->explanation.find('\n'), agg->explanation.size()));
    const std::string lost = absl::StrCat("slot(s) ", absl::StrJoin(lost_slots, ","), " (ranks ",
                                          absl::StrJoin(lost_ranks, ","), ")");
    const std::string confidence = absl::StrCat(" Confidence: ", VerdictConfidenceName(agg->confidence), " (",
                                                agg->confidence_reason, ").");
    bool dominant_lost = false;
    if (agg->dominant_group >= 0) {
      for (int rank : agg->groups[static_cast<size_t>(agg->dominant_group)].ranks) {
        dominant_lost = dominant_lost || lost_ranks.count(rank) > 0;
      }
    }
    std::vector<int> suspects;
    if (!dominant_lost) {
      for (int rank : agg->suspect_ranks) {
        if (!lost_ranks.count(rank)) suspects.push_back(rank);
      }
    }
    agg->suspect_ranks = suspects;
    agg->chosen_group.reset();
    agg->machines_to_evict.clear();
    if (dominant_lost) {
      agg->dominant_group = -1;
      agg->explanation = absl::StrCat("no verdict: the largest stack group is ", lost,
                                      ", whose answers were lost with their agents' links, so no group can be taken "
                                      "as healthy; nothing evicted.",
                                      confidence, groups_text);
      return;
    }
    if (suspects.empty()) {
      agg->explanation = absl::StrCat("no suspect once ", lost,
                                      ", whose answers were lost with their agents' links, are left out: nothing "
                                      "evicted.",
                                      confidence, groups_text);
      return;
    }
    OverEvictionChoice choice = ChooseOverEviction(layout, suspects);
    agg->chosen_group = choice.group;
    agg->machines_to_evict = choice.machines;
    agg->explanation = absl::StrFormat(
        "%d suspect rank(s) [%s] besides %s, whose answers were lost with their agents' links; %s; evict machines "
        "[%s].%s%s",
        suspects.size(), absl::StrJoin(suspects, ","), lost, choice.reason, absl::StrJoin(agg->machines_to_evict, ","),
        confidence, groups_text);
  }

  void DecideFromAggregation(StackInvestigation& inv, const StackAggregation* agg) {
    inv.state = InvestigationState::kDecided;
    if (agg != nullptr && !agg->machines_to_evict.empty()) {
      inv.slots = agg->machines_to_evict;
      if (agg->chosen_group) inv.chosen_group = GroupName(agg->chosen_group->kind, agg->chosen_group->index);
    }
    const std::string& full = inv.rounds.back().explanation;  // its first line is the verdict
    inv.explanation = full.substr(0, full.find('\n'));
    RecordMachines(inv);
    Event(JobEventType::kWarning, "StackVerdict", absl::StrCat("investigation ", inv.id, ": ", inv.explanation));
    RepeatVerdict(inv);
  }

  void RecordMachines(StackInvestigation& inv) {
    inv.machines.clear();
    for (int s : inv.slots) {
      std::string m;
      for (const HangPolicySlot& slot : in_.slots) {
        if (slot.index == s) m = slot.machine_id;
      }
      inv.machines.push_back(m.empty() ? absl::StrCat("slot-", s) : m);
    }
  }

  void RepeatVerdict(const StackInvestigation& inv) {
    d_.kind = inv.kind;
    d_.signal = inv.signal;
    d_.verdict = inv.slots.empty() ? HangVerdict::kReattempt : HangVerdict::kEvict;
    d_.evict_slots = inv.slots;
    if (inv.slots.empty()) {
      d_.reason = absl::StrCat("stack aggregation found no outlier (", inv.explanation, "): reattempt in place");
    } else {
      d_.reason = absl::StrFormat("stack aggregation (investigation %d): %s over-evicted (machines %s)", inv.id,
                                  inv.chosen_group.empty() ? "the outliers' machines" : inv.chosen_group,
                                  absl::StrJoin(inv.machines, ", "));
    }
    d_.details.clear();
    for (size_t i = 0; i < inv.rounds.size(); ++i) {
      const StackRound& r = inv.rounds[i];
      const std::string prefix = inv.rounds.size() > 1 ? absl::StrFormat("round %d: ", i + 1) : "";
      for (const std::string& g : r.groups) d_.details.push_back(absl::StrCat(prefix, "stack group ", g));
      if (!r.suspect_ranks.empty()) {
        d_.details.push_back(absl::StrCat(prefix, "suspect ranks ", absl::StrJoin(r.suspect_ranks, ","),
                                          r.flagged_kind.empty() ? ""
                                                                 : absl::StrCat(" (flagged ", r.flagged_kind, " ",
                                                                                r.flagged_index, ")")));
      }
      if (!r.unanswered_slots.empty()) {
        d_.details.push_back(
            absl::StrCat(prefix, "no stacks from slot(s) ", absl::StrJoin(r.unanswered_slots, ","), " (suspects)"));
      }
    }
    d_.details.push_back(absl::StrCat("verdict: ", inv.explanation));
  }

  const HangPolicyInput& in_;
  const int64_t now_;
  const HangPolicyOptions& options_;
  HangDecision d_;
};

}  // namespace

int64_t HangTimeoutNanos(int hang_timeout_seconds, double mean_iteration_seconds, const HangPolicyOptions& options) {
  const double floor_s = static_cast<double>(std::max(1, hang_timeout_seconds));
  const double adaptive_s = std::max(0.0, mean_iteration_seconds) * options.hang_iterations;
  return static_cast<int64_t>(std::max(floor_s, adaptive_s) * kNanosPerSecond);
}

std::string StackCaptureCommandId(const std::string& command_prefix, const std::string& pod, uint64_t id,
                                  int round) {
  return absl::StrCat(command_prefix, "/", pod, "/stacks-", id, "-", round);
}

HangPolicyInput MakeHangPolicyInput(const TrainingJob& job, const JobStatus& status, const JobObservation& obs,
                                    const ParallelLayout* layout, bool steady, bool other_failure) {
  HangPolicyInput in;
  in.command_prefix = absl::StrCat(job.metadata.namespace_, "/", job.metadata.name);
  in.layout = layout;
  in.hang_timeout_seconds = job.spec.fault_tolerance.hang_timeout_seconds;
  in.heartbeat_timeout_ns = static_cast<int64_t>(job.spec.fault_tolerance.heartbeat_timeout_seconds) * kNanosPerSecond;
  in.attempt = status.attempt;
  in.resume_step = status.resume_step;
  in.last_completed_step = status.last_completed_step;
  in.mean_iteration_seconds = status.mean_iteration_seconds;
  in.steady = steady;
  in.other_failure = other_failure;
  in.state = status.stack_diagnosis;
  for (const FailSlowFinding& f : status.fail_slows) {
    if (f.validation.state != ValidationState::kNotStarted && f.validation.state != ValidationState::kDone) {
      in.held = true;
    }
    if (f.ended_at != 0) continue;
    if (f.state == FailSlowState::kLocalized) {
      in.fail_slow_localized = true;
    } else if (in.fail_slow_profiling_since == 0 || f.detected_at < in.fail_slow_profiling_since) {
      in.fail_slow_profiling_since = f.detected_at;
    }
  }
  std::unordered_map<std::string_view, const PodObservation*> pods;
  for (const PodObservation& p : obs.pods) pods[p.name] = &p;
  std::unordered_map<std::string_view, const AgentObservation*> agents;
  for (const AgentObservation& a : obs.agents) agents[a.pod] = &a;
  // DecideHang reads the replies of the newest investigation while it is open and of one
  // it starts this round (ids from next_id) only: older investigations' replies, which the
  // agents keep up to their bound, are not parsed or copied.
  const std::vector<StackInvestigation>& investigations = status.stack_diagnosis.investigations;
  uint64_t first_investigation = status.stack_diagnosis.next_id;
  if (!investigations.empty() && IsOpen(investigations.back())) {
    first_investigation = std::min(first_investigation, investigations.back().id);
  }
  const int gpus = job.spec.gpus_per_machine;
  double iter_sum = 0;
  int iter_n = 0;
  for (const SlotStatus& slot : status.slots) {
    HangPolicySlot s;
    s.index = slot.index;
    s.pod = slot.pod;
    s.machine_id = slot.machine_id;
    auto p = pods.find(slot.pod);
    auto a = agents.find(slot.pod);
    const AgentObservation* agent = a == agents.end() ? nullptr : a->second;
    s.training_alive = p != pods.end() && p->second->running && !p->second->failed && agent != nullptr &&
                       agent->connected && !agent->registered_as_standby && agent->attempt == status.attempt &&
                       agent->phase == AgentTrainingPhase::kRunning;
    s.agent_connected = agent != nullptr && agent->connected;
    s.agent_last_seen = agent != nullptr ? agent->last_seen : 0;
    in.slots.push_back(s);
    if (agent == nullptr) continue;
    if (agent->attempt == status.attempt && agent->mean_iteration_seconds > 0) {
      iter_sum += agent->mean_iteration_seconds;
      ++iter_n;
    }
    const std::string own = absl::StrCat(in.command_prefix, "/", slot.pod, "/stacks-");
    for (const std::string& id : agent->pending_command_ids) {
      if (id.rfind(own, 0) == 0) in.pending.insert(id);
    }
    for (auto r_it = agent->command_results.lower_bound(own);
         r_it != agent->command_results.end() && absl::StartsWith(r_it->first, own); ++r_it) {
      const auto& [id, result] = *r_it;
      // "<own><investigation>-<round>": an id that does not parse is kept.
      const absl::string_view rest = absl::string_view(id).substr(own.size());
      uint64_t investigation = 0;
      if (absl::SimpleAtoi(rest.substr(0, rest.find('-')), &investigation) && investigation < first_investigation) {
        continue;
      }
      StackCaptureReply reply;
      reply.ok = result.ok;
      reply.error = result.message;
      std::vector<ProcessStack> not_a_rank;
      for (const auto& [rank, captured] : result.stacks) {
        for (const CapturedProcessStack& c : captured) {
          ProcessStack stack = c.stack;
          if (stack.threads.empty() && !c.raw.empty()) {
            // An agent that sent only the tool's text: parse it here.
            for (StackTool tool : {StackTool::kPySpy, StackTool::kEuStack, StackTool::kGdb}) {
              if (stack.tool != StackToolName(tool)) continue;
              if (auto parsed = ParseStackText(tool, c.raw, stack.pid); parsed.ok() && !parsed->empty()) {
                stack.threads = (*parsed)[0].threads;
              }
            }
          }
          if (stack.threads.empty()) continue;  // nothing captured: the rank stays a suspect
          if (rank < 0) {
            not_a_rank.push_back(std::move(stack));
          } else {
            reply.stacks[rank].push_back(std::move(stack));
          }
        }
      }
      if (!not_a_rank.empty()) {
        for (int r = slot.index * gpus; r < (slot.index + 1) * gpus; ++r) {
          auto it = reply.stacks.find(r);
          if (it == reply.stacks.end()) continue;  // the rank itself was not captured
          it->second.insert(it->second.end(), not_a_rank.begin(), not_a_rank.end());
        }
      }
      in.replies[id] = std::move(reply);
    }
  }
  in.recent_iteration_seconds = iter_n > 0 ? iter_sum / iter_n : 0;
  return in;
}

HangDecision DecideHang(const HangPolicyInput& input, int64_t now, const HangPolicyOptions& options) {
  return Policy(input, now, options).Run();
}

}  // namespace peregrine
