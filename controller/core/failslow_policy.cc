#include "controller/core/failslow_policy.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/core/failslow_mitigation.h"
#include "controller/core/failslow_peers.h"
#include "controller/core/failslow_validation.h"
#include "controller/core/microbatch_mitigation.h"
#include "diagnosis/group_comparison.h"

// How FailSlowPolicy works (Falcon-Detect, section 4). Flow, level-based (deciding again
// on the applied result changes nothing):
//  - tracking: each agent runs BOCD + verification per rank and reports verified changes
//    (AgentObservation::fail_slow). When any rank of the current attempt is slow and no
//    fail-slow is open, a finding opens (state Profiling, onset = the earliest slow
//    iteration, severity = the largest reported) and profiling is switched on for every
//    active agent (set_nccl_mode commands, deterministic ids). The peer view
//    (failslow_peers.h) calls a slowdown most ranks share job-wide, and names persistent
//    stragglers (far above the ranks' median iteration time; with stragglers_are_slow
//    they open and hold a finding too);
//  - profiling: once every rank of the layout has sent comm profiles and every TP/PP/DP
//    communicator has at least min_collectives collectives seen by all its members, the
//    collectives are joined across ranks by (communicator, sequence) and compared by the
//    time each member spent in them (exit - enter, one host's clock each; no times of
//    different hosts are compared: CompareGroups, diagnosis/group_comparison.h).
//    Communication suspects (a group whose transfer time exceeds suspiciousGroupRatio x
//    the median of its kind, by at least min_excess_transfer_fraction of a healthy
//    iteration) and compute suspects (ranks that arrive last in every group they belong
//    to) are all named (a job-wide slowdown too: one slow rank delays all in synchronous
//    training; with no suspect it stays job-wide, on no machine): only suspect groups make a "communication" finding (ranks = the
//    groups' ranks), only suspect ranks a "compute" finding (ranks = every slow rank),
//    both a "compute+communication" finding (ranks = the slow ranks, group = the
//    congested groups); machines = the machines of the slow ranks and groups. Without a
//    verdict the comparison is retried on the next profiles;
//  - recovery: when no rank is slow any more the finding ends (Recovered; ended_at = the
//    latest recovery onset the agents reported, `now` when none is usable) and profiling
//    is switched off.
// The GUARD tier of a finding: severity < mitigateThreshold "monitor", < replaceThreshold
// "mitigate", else "replace" (a label). Mitigation is the ladder's (failslow_mitigation.h),
// run by ApplyFailSlowPolicy after the validation. Findings are bounded
// (kMaxFailSlowFindings, oldest dropped).

namespace peregrine {
namespace {

constexpr int64_t kMitigationRequeueNs = 100'000'000;  // 100 ms

constexpr GroupKind kKinds[] = {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData};

bool CurrentActive(const AgentObservation& a, uint64_t attempt) {
  return a.connected && !a.registered_as_standby && attempt > 0 && a.attempt == attempt;
}

std::string MachineOfRank(const FailSlowPolicyInput& in, int rank) {
  const int slot = in.layout->MachineOf(rank);
  if (slot >= 0 && slot < static_cast<int>(in.slot_machines.size()) && !in.slot_machines[slot].empty()) {
    return in.slot_machines[slot];
  }
  return absl::StrCat("slot-", slot);
}

std::vector<std::string> MachinesOfRanks(const FailSlowPolicyInput& in, const std::vector<int>& ranks) {
  std::vector<std::string> out;
  for (int r : ranks) {
    std::string m = MachineOfRank(in, r);
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(std::move(m));
  }
  return out;
}

// The layout group whose member set is exactly `members`, if any.
std::optional<CommGroup> MatchGroup(const ParallelLayout& layout, std::vector<int> members) {
  std::sort(members.begin(), members.end());
  if (members.empty() || members.front() < 0 || members.back() >= layout.world_size()) return std::nullopt;
  for (GroupKind kind : kKinds) {
    CommGroup g = layout.Group(kind, layout.GroupIndexOf(kind, members.front()));
    std::vector<int> ranks = g.ranks;
    std::sort(ranks.begin(), ranks.end());
    if (ranks == members) return g;
  }
  return std::nullopt;
}

struct Localization {
  bool ready = false;  // enough profiles to compare
  FailSlowKind kind = FailSlowKind::kUnlocalized;  // when the comparison named no suspect
  std::vector<int> ranks;          // the slow ranks (compute), else the slow groups' ranks
  std::vector<int> machine_ranks;  // ranks whose machines are named (slow ranks and groups)
  std::string group;
  std::string detail;
};

Localization Localize(const FailSlowPolicyInput& in, const std::vector<AgentObservation>& agents,
                      const FailSlowPolicyOptions& options, double healthy_seconds) {
  Localization out;
  const ParallelLayout& layout = *in.layout;
  // comm id -> rank_in_comm -> (global rank, timings). Collectives are keyed by their
  // sequence on the communicator; point-to-point calls by (send or recv, peer, n-th with
  // that peer), so the k-th send from a to b pairs with b's k-th recv from a.
  enum P2p { kCollective = 0, kSend = 1, kRecv = 2 };
  using TimingKey = std::tuple<int, int, uint64_t>;  // (P2p, peer rank in comm, sequence)
  struct Member {
    int global_rank = -1;
    std::map<TimingKey, std::pair<int64_t, int64_t>> timings;
  };
  std::map<uint64_t, std::map<int, Member>> comms;
  std::map<uint64_t, int> comm_size;
  std::set<int> profiled_ranks;
  for (const AgentObservation& a : agents) {
    if (!CurrentActive(a, in.attempt)) continue;
    for (const CommProfileObservation& p : a.comm_profiles) {
      if (p.comm_id == 0 || p.comm_size <= 0 || p.rank_in_comm < 0 || p.rank_in_comm >= p.comm_size) continue;
      profiled_ranks.insert(p.global_rank);
      comm_size[p.comm_id] = p.comm_size;
      Member& m = comms[p.comm_id][p.rank_in_comm];
      m.global_rank = p.global_rank;
      for (const CollectiveObservation& c : p.collectives) {
        if (c.exit < c.enter) continue;
        const int kind = c.op == "send" ? kSend : c.op == "recv" ? kRecv : kCollective;
        if (kind != kCollective && (c.peer < 0 || c.peer >= p.comm_size)) continue;
        m.timings[TimingKey{kind, kind == kCollective ? -1 : c.peer, c.sequence}] = {c.enter, c.exit};
      }
    }
  }
  for (int r = 0; r < layout.world_size(); ++r) {
    if (!profiled_ranks.count(r)) return out;  // not every rank has reported yet
  }
  std::vector<CollectiveTiming> collectives;
  std::map<std::pair<GroupKind, int>, int> per_group;
  for (const auto& [id, members] : comms) {
    const int size = comm_size[id];
    if (static_cast<int>(members.size()) != size) continue;
    std::vector<int> globals;
    for (const auto& [r, m] : members) globals.push_back(m.global_rank);
    std::optional<CommGroup> group = MatchGroup(layout, globals);
    if (!group || size < 2) continue;  // the world communicator, or unknown
    int complete = 0;
    for (const auto& [key, first] : members.begin()->second.timings) {
      if (std::get<0>(key) != kCollective) continue;
      CollectiveTiming t;
      t.kind = group->kind;
      t.group_index = group->index;
      for (const auto& [r, m] : members) {
        auto it = m.timings.find(key);
        if (it == m.timings.end()) break;
        t.members.push_back(MemberTiming{m.global_rank, it->second.first, it->second.second});
      }
      if (static_cast<int>(t.members.size()) != size) continue;
      collectives.push_back(std::move(t));
      ++complete;
    }
    // Point-to-point: each send with the matching recv of its peer.
    for (const auto& [sender, sm] : members) {
      for (const auto& [key, send] : sm.timings) {
        const auto& [kind, peer, seq] = key;
        if (kind != kSend || peer == sender) continue;
        auto receiver = members.find(peer);
        if (receiver == members.end()) continue;
        auto recv = receiver->second.timings.find(TimingKey{kRecv, sender, seq});
        if (recv == receiver->second.timings.end()) continue;
        CollectiveTiming t;
        t.kind = group->kind;
        t.group_index = group->index;
        t.members.push_back(MemberTiming{sm.global_rank, send.first, send.second});
        t.members.push_back(MemberTiming{receiver->second.global_rank, recv->second.first, recv->second.second});
        collectives.push_back(std::move(t));
        ++complete;
      }
    }
    per_group[{group->kind, group->index}] += complete;
  }
  for (GroupKind kind : kKinds) {
    if (layout.GroupSize(kind) < 2) continue;
    for (int i = 0; i < layout.GroupCount(kind); ++i) {
      if (per_group[{kind, i}] < options.min_collectives) return out;
    }
  }
  out.ready = true;
  GroupComparisonOptions cmp;
  cmp.slow_ratio = in.spec.suspicious_group_ratio > 1.0 ? in.spec.suspicious_group_ratio : 1.1;
  cmp.min_late_fraction = options.min_late_fraction;
  cmp.min_imposed_wait_fraction = options.min_imposed_wait_fraction;
  absl::StatusOr<FailSlowSuspects> suspects = CompareGroups(collectives, cmp);
  if (!suspects.ok()) {
    out.detail = std::string(suspects.status().message());
    return out;
  }
  // A congested group must also matter: its excess transfer time per collective is a
  // noticeable fraction of a healthy iteration (not microseconds of noise over a fast
  // median).
  std::vector<CommunicationSuspect> congested;
  const double min_excess_ns = options.min_excess_transfer_fraction * healthy_seconds * 1e9;
  for (const CommunicationSuspect& s : suspects->communication) {
    if (s.mean_transfer_ns - s.median_of_kind_ns >= min_excess_ns) congested.push_back(s);
  }
  // Every compute suspect is named (two slow GPUs are two suspects), and so is every
  // congested group: a slow GPU and a congested link at once make one finding naming both.
  std::vector<std::string> numbers;
  std::set<int> compute_ranks;
  for (const ComputeSuspect& s : suspects->compute) {
    compute_ranks.insert(s.rank);
    numbers.push_back(absl::StrFormat(
        "rank %d arrives last in %.0f%% of its %d collectives (at least %.0f%% in each of its groups), "
        "imposing %.2f ms per collective",
        s.rank, s.late_fraction * 100, s.collectives, s.min_late_fraction * 100, s.mean_imposed_wait_ns / 1e6));
  }
  std::vector<std::string> names;
  std::set<int> group_ranks;
  for (const CommunicationSuspect& s : congested) {
    names.push_back(absl::StrCat(GroupKindName(s.kind), " ", s.group_index));
    group_ranks.insert(s.ranks.begin(), s.ranks.end());
    numbers.push_back(absl::StrFormat("%s %d: transfer %.2f ms = %.2fx the median of its kind (%.2f ms)",
                                      GroupKindName(s.kind), s.group_index, s.mean_transfer_ns / 1e6, s.ratio,
                                      s.median_of_kind_ns / 1e6));
  }
  if (!compute_ranks.empty() || !congested.empty()) {
    out.kind = compute_ranks.empty() ? FailSlowKind::kCommunication
               : congested.empty()   ? FailSlowKind::kCompute
                                     : FailSlowKind::kComputeAndCommunication;
    out.ranks.assign(compute_ranks.empty() ? group_ranks.begin() : compute_ranks.begin(),
                     compute_ranks.empty() ? group_ranks.end() : compute_ranks.end());
    out.group = absl::StrJoin(names, ", ");
    out.machine_ranks = out.ranks;
    out.machine_ranks.insert(out.machine_ranks.end(), group_ranks.begin(), group_ranks.end());
    out.detail = absl::StrJoin(numbers, "; ");
    return out;
  }
  out.detail = absl::StrFormat("no group or rank stands out (%d collectives compared)",
                               static_cast<int>(collectives.size()));
  return out;
}

std::string FormatRanks(const std::vector<int>& ranks) { return absl::StrJoin(ranks, ","); }

}  // namespace

FailSlowTier FailSlowTierOf(const FailSlowSpec& spec, double severity) {
  if (severity >= spec.replace_threshold) return FailSlowTier::kReplace;
  if (severity >= spec.mitigate_threshold) return FailSlowTier::kMitigate;
  return FailSlowTier::kMonitor;
}

namespace {

// DecideFailSlow on `agents` in place of in.agents (ApplyFailSlowPolicy reads the
// observation's agents where they are, without copying them).
FailSlowDecision DecideFailSlowOn(const FailSlowPolicyInput& in, const std::vector<AgentObservation>& agents,
                                  int64_t now, const FailSlowPolicyOptions& options) {
  FailSlowDecision d;
  d.findings = in.findings;
  d.next_finding_id = std::max<uint64_t>(in.next_finding_id, 1);
  if (in.layout == nullptr) return d;

  // Slow ranks of the current attempt.
  std::vector<int> slow_ranks;
  int64_t onset = 0;
  int64_t recovery = 0;  // the latest recovery onset the agents reported
  double severity = 0, healthy = 0, slow_level = 0;
  for (const AgentObservation& a : agents) {
    if (!CurrentActive(a, in.attempt)) continue;
    for (const auto& [rank, fs] : a.fail_slow) {
      if (!fs.slow) {
        recovery = std::max(recovery, fs.ended_at);
        continue;
      }
      slow_ranks.push_back(rank);
      if (onset == 0 || (fs.onset != 0 && fs.onset < onset)) onset = fs.onset;
      if (fs.severity >= severity) {
        severity = fs.severity;
        healthy = fs.before_seconds;
        slow_level = fs.after_seconds;
      }
    }
  }
  // The peer view: a slowdown most ranks share is job-wide; persistent stragglers are slow
  // too when counted (their excess over the ranks' median is their severity).
  const PeerSlowdownClassification peers =
      ClassifyAgentSlowdowns(agents, in.attempt, in.layout->world_size(), options.peers);
  const bool counted = options.peers.stragglers_are_slow;
  const bool only_stragglers = counted && slow_ranks.empty() && !peers.stragglers.empty();
  for (size_t i = 0; counted && i < peers.stragglers.size(); ++i) {
    if (std::find(slow_ranks.begin(), slow_ranks.end(), peers.stragglers[i]) != slow_ranks.end()) continue;
    slow_ranks.push_back(peers.stragglers[i]);
    if (peers.straggler_excess[i] >= severity) {
      severity = peers.straggler_excess[i];
      healthy = peers.median_seconds;
      slow_level = peers.median_seconds * (1 + peers.straggler_excess[i]);
    }
  }
  std::sort(slow_ranks.begin(), slow_ranks.end());

  FailSlowFinding* open = nullptr;
  if (!d.findings.empty() && d.findings.back().ended_at == 0) open = &d.findings.back();

  if (open == nullptr && !slow_ranks.empty() && in.spec.enabled) {
    FailSlowFinding f;
    f.id = d.next_finding_id++;
    f.state = FailSlowState::kProfiling;
    f.onset = onset != 0 ? onset : now;
    f.detected_at = now;
    f.severity = severity;
    f.tier = FailSlowTierOf(in.spec, severity);
    f.healthy_iteration_seconds = healthy;
    f.slow_iteration_seconds = slow_level;
    d.findings.push_back(f);
    if (d.findings.size() > kMaxFailSlowFindings) d.findings.erase(d.findings.begin());
    open = &d.findings.back();
    open->detail = peers.detail;
    std::string what;
    if (peers.job_wide) {
      what = absl::StrCat(peers.detail, ", a change of the job, not of one rank");
    } else if (only_stragglers) {
      what = absl::StrCat("persistent straggler(s) by the peer rule: ", peers.detail);
    } else {
      what = absl::StrCat("on rank(s) ", FormatRanks(slow_ranks), ", verified change point",
                          peers.detail.empty() ? "" : "; ", peers.detail);
    }
    d.events.push_back(JobEvent{
        JobEventType::kWarning, "FailSlowDetected",
        absl::StrFormat("fail-slow #%d: iteration time %.1f ms -> %.1f ms (+%.0f%%, tier %s) %s; profiling the "
                        "communication groups",
                        f.id, healthy * 1e3, slow_level * 1e3, severity * 100, ToString(f.tier), what)});
  } else if (open != nullptr && !slow_ranks.empty()) {
    if (severity > open->severity) {
      open->severity = severity;
      open->tier = FailSlowTierOf(in.spec, severity);
      open->slow_iteration_seconds = slow_level;
    }
  } else if (open != nullptr && slow_ranks.empty()) {
    // The end is when the iterations recovered (the agents' change point), not when the
    // controller heard of it; `now` only when no rank reported a usable recovery onset.
    open->ended_at = recovery > open->onset && recovery <= now ? recovery : now;
    open->state = FailSlowState::kRecovered;
    d.events.push_back(JobEvent{
        JobEventType::kNormal, "FailSlowRecovered",
        absl::StrFormat("fail-slow #%d ended: iteration time back to the healthy level after %.1f s%s", open->id,
                        static_cast<double>(open->ended_at - open->onset) / 1e9,
                        open->kind == FailSlowKind::kUnlocalized
                            ? " (never localized)"
                            : absl::StrCat(" (", ToString(open->kind), ": ",
                                                          open->kind == FailSlowKind::kCommunication
                                                              ? open->group
                                                              : absl::StrCat("rank ", FormatRanks(open->ranks),
                                                                             open->group.empty() ? "" : ", ",
                                                                             open->group),
                                                          ")"))});
    open = nullptr;
  }

  // Localization while profiling.
  if (open != nullptr && open->state == FailSlowState::kProfiling) {
    Localization loc = Localize(in, agents, options, open->healthy_iteration_seconds);
    if (loc.ready && loc.kind != FailSlowKind::kUnlocalized) {
      open->state = FailSlowState::kLocalized;
      open->kind = loc.kind;
      open->ranks = loc.ranks;
      open->group = loc.group;
      open->machines = MachinesOfRanks(in, loc.machine_ranks);
      open->localized_at = now;
      open->detail = loc.detail;
      std::string where;
      if (loc.kind != FailSlowKind::kCommunication) {
        where = absl::StrCat("rank(s) ", FormatRanks(loc.ranks));
        if (loc.kind == FailSlowKind::kCompute) absl::StrAppend(&where, " on machine(s) ", absl::StrJoin(open->machines, ","));
      }
      if (loc.kind != FailSlowKind::kCompute) {
        absl::StrAppend(&where, where.empty() ? "" : " and ", "group ", loc.group, " (machines ",
                        absl::StrJoin(open->machines, ","), ")");
      }
      d.events.push_back(JobEvent{JobEventType::kWarning, "FailSlowLocalized",
                                  absl::StrFormat("fail-slow #%d is %s: %s; %s (+%.0f%%, tier %s)", open->id, ToString(loc.kind),
                                                  where, loc.detail, open->severity * 100, ToString(open->tier))});
    } else if (loc.ready) {
      // Nothing stands out in the profiles: a job-wide slowdown stays the job's.
      std::string detail = loc.detail;
      if (peers.job_wide) {
        detail = absl::StrCat(peers.detail, "; ", loc.detail, ": job-wide, attributed to no rank or machine");
        if (open->detail.find("attributed to no rank") == std::string::npos) {
          d.events.push_back(JobEvent{JobEventType::kNormal, "FailSlowJobWide",
                                      absl::StrFormat("fail-slow #%d is job-wide: %s", open->id, detail)});
        }
      }
      open->detail = detail;
    }
  }

  // Profiling on while a finding is open, off otherwise (only agents that have it on).
  // While a validation holds NCCL trapped (or is releasing it), the validation owns the
  // NCCL mode: its set_nccl_mode commands carry the profiling flag too.
  if (!d.findings.empty() && ValidationInProgress(d.findings.back().validation)) return d;
  // An S2 plan in force is checked against the replicas' measured speeds, which come from
  // the profiles: profiling stays on until it is withdrawn (microbatch_mitigation.cc).
  bool plan_in_force = false;
  for (const FailSlowFinding& f : d.findings) plan_in_force = plan_in_force || PlanInForce(f.mitigation.microbatch_plan);
  const bool want = open != nullptr || plan_in_force;
  const uint64_t id = open != nullptr ? open->id : (d.findings.empty() ? 0 : d.findings.back().id);
  for (const AgentObservation& a : agents) {
    if (!CurrentActive(a, in.attempt)) continue;
    if (a.nccl_profiling == want) continue;
    if (!want && id == 0) continue;
    NcclModeChange c;
    c.pod = a.pod;
    c.profiling = want;
    c.command_id = absl::StrCat(in.job_name, "-failslow-", id, want ? "-profile-on-" : "-profile-off-", a.pod);
    if (std::find(a.pending_command_ids.begin(), a.pending_command_ids.end(), c.command_id) !=
        a.pending_command_ids.end()) {
      continue;
    }
    if (a.failed_commands.count(c.command_id)) continue;  // the agent has no hook
    d.mode_changes.push_back(std::move(c));
  }
  return d;
}

}  // namespace

FailSlowDecision DecideFailSlow(const FailSlowPolicyInput& in, int64_t now, const FailSlowPolicyOptions& options) {
  return DecideFailSlowOn(in, in.agents, now, options);
}

void ApplyFailSlowPolicy(const TrainingJob& job, const JobObservation& observation, int64_t now, JobPlan* plan,
                         const FailSlowPolicyOptions& options, const FailSlowValidationOptions& validation_options) {
  const TrainingJobSpec& spec = job.spec;
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Create(
      spec.parallelism.tensor, spec.parallelism.pipeline, spec.parallelism.data, spec.gpus_per_machine);
  if (!layout.ok()) return;
  const std::vector<AgentObservation>& agents = observation.agents;
  JobStatus& status = plan->status;
  FailSlowPolicyInput in;
  in.job_name = job.metadata.name;
  in.spec = spec.fail_slow;
  in.layout = &*layout;
  in.attempt = status.attempt;
  in.findings = status.fail_slows;
  in.next_finding_id = status.next_fail_slow_id;
  in.slot_machines.resize(static_cast<size_t>(layout->machines()));
  std::map<std::string, int> slot_of_pod;
  std::vector<std::string> slot_addresses(static_cast<size_t>(layout->machines()), "127.0.0.1");
  for (const SlotStatus& slot : status.slots) {
    if (slot.index < 0 || slot.index >= layout->machines()) continue;
    in.slot_machines[slot.index] = slot.machine_id;
    slot_of_pod[slot.pod] = slot.index;
    if (!observation.rendezvous_domain.empty()) {
      slot_addresses[slot.index] = absl::StrCat(slot.pod, ".", observation.rendezvous_domain);
    }
  }
  FailSlowDecision d = DecideFailSlowOn(in, agents, now, options);
  status.fail_slows = std::move(d.findings);
  status.next_fail_slow_id = d.next_finding_id;
  for (const NcclModeChange& c : d.mode_changes) {
    CommandToSend cmd;
    cmd.pod = c.pod;
    cmd.id = c.command_id;
    cmd.kind = CommandKind::kSetNcclMode;
    cmd.nccl_profiling = c.profiling;
    plan->commands.push_back(std::move(cmd));
  }
  for (JobEvent& e : d.events) plan->events.push_back(std::move(e));
  if (status.fail_slows.empty()) return;

  // Validation while paused, on the newest finding.
  FailSlowValidationInput v;
  v.job_name = job.metadata.name;
  v.layout = &*layout;
  v.spec = spec.fail_slow;
  v.finding = status.fail_slows.back();
  v.slot_machines = in.slot_machines;
  v.slot_addresses = slot_addresses;
  v.candidate_port = observation.candidate_master_port;
  const std::string validation_prefix = absl::StrCat(job.metadata.name, "-failslow-", v.finding.id, "-");
  for (const AgentObservation& a : agents) {
    ValidationAgent va;
    va.pod = a.pod;
    auto slot = slot_of_pod.find(a.pod);
    va.slot = slot == slot_of_pod.end() ? -1 : slot->second;
    va.active = CurrentActive(a, status.attempt);
    va.profiling = a.nccl_profiling;
    // The validation looks up only its own commands ("<job>-failslow-<finding>-..."): the
    // agents' other results (up to their bound each) are not copied.
    for (const std::string& id : a.pending_command_ids) {
      if (absl::StartsWith(id, validation_prefix)) va.pending_command_ids.push_back(id);
    }
    for (auto r_it = a.command_results.lower_bound(validation_prefix);
         r_it != a.command_results.end() && absl::StartsWith(r_it->first, validation_prefix); ++r_it) {
      const auto& [id, r] = *r_it;
      ValidationCommandOutcome o;
      o.ok = r.ok;
      o.error = r.message;
      if (r.diagnostic) {
        o.passed = r.diagnostic->passed;
        o.not_present = r.diagnostic->not_present;
        o.detail = r.diagnostic->detail;
        o.figures = r.diagnostic->figures;
      }
      va.results[id] = std::move(o);
    }
    v.agents.push_back(std::move(va));
  }
  // S3 (remap) has no delivery path in this version: the ladder skips it, and a
  // communication-only finding's validation is deferred (failslow_validation.h).
  StrategyAvailability remap;
  remap.unavailable_reason =
      "the trainer cannot be handed a new rank-to-slot mapping in this version (no delivery path)";
  v.remap_available = remap.available;
  auto validate = [&]() {
    FailSlowValidationDecision vd = DecideFailSlowValidation(v, now, validation_options);
    status.fail_slows.back().validation = vd.validation;
    for (const ValidationCommand& c : vd.commands) {
      CommandToSend cmd;
      cmd.pod = c.pod;
      cmd.id = c.id;
      if (c.kind == ValidationCommand::Kind::kSetNcclMode) {
        cmd.kind = CommandKind::kSetNcclMode;
        cmd.nccl_profiling = c.profiling;
        cmd.nccl_trap = c.trap;
      } else {
        cmd.kind = CommandKind::kRunDiagnostic;
        cmd.diagnostic.kind = c.diagnostic;
        cmd.diagnostic.params = c.params;
        cmd.diagnostic.timeout_ms = c.timeout_ms;
      }
      plan->commands.push_back(std::move(cmd));
    }
    for (JobEvent& e : vd.events) plan->events.push_back(std::move(e));
  };
  validate();

  // The mitigation ladder on each finding (failslow_mitigation.h); S4 is carried out by
  // the decision engine's next round (PendingFailSlowReplacement).
  std::vector<std::string> job_machines;
  for (const SlotStatus& slot : status.slots) {
    if (!slot.machine_id.empty()) job_machines.push_back(slot.machine_id);
  }
  const bool finished = status.phase == JobPhase::kSucceeded || status.phase == JobPhase::kFailed;
  // S2's measurements (microbatch_mitigation.h): the replicas' speeds now, the switch time
  // the job's last plan took (its measured cost), the next plan id.
  const MicroBatchMitigationOptions mb_options;
  ReplicaSpeeds speeds = MeasureReplicaSpeeds(*layout, status.attempt, agents, mb_options);
  if (speeds.ok && ValidationInProgress(status.fail_slows.back().validation)) {
    speeds.ok = false;  // training is paused: its collectives measure the pause
    speeds.why = "the validation (training paused) is in progress";
  }
  // The agents summarise a rank's iterations once per heartbeat: for a while after the
  // validation released training, a summary still covers the step that spanned the pause
  // (seconds long) and would make that replica look slow. Wait the delivery bound (one
  // heartbeat and a round) plus two slow iterations after the release. Seen in the local
  // e2e: a plan solved on such a summary moved micro-batches off a healthy replica.
  if (speeds.ok) {
    const FailSlowFinding& newest = status.fail_slows.back();
    const int64_t released = newest.validation.ended_at;
    const double settle_s = mb_options.delivery_seconds + 2 * std::max(0.0, newest.slow_iteration_seconds);
    if (released > 0 && now < released + static_cast<int64_t>(settle_s * 1e9)) {
      speeds.ok = false;
      speeds.why = absl::StrFormat(
          "the ranks' iteration summaries may still cover the validation's pause (released %.1f s ago, settling "
          "for %.1f s)",
          static_cast<double>(now - released) / 1e9, settle_s);
    }
  }
  double switch_seconds = 0;
  uint64_t next_plan_id = 1;
  for (const FailSlowFinding& f : status.fail_slows) {
    const MicroBatchPlanRecord& p = f.mitigation.microbatch_plan;
    next_plan_id = std::max(next_plan_id, p.plan_id + 1);
    if (p.decided_at > 0 && p.in_force_at > p.decided_at) switch_seconds = static_cast<double>(p.in_force_at - p.decided_at) / 1e9;
  }
  for (FailSlowFinding& f : status.fail_slows) {
    if (finished) break;
    FailSlowMitigationInput m;
    m.spec = spec.fail_slow;
    m.finding = f;
    for (const std::vector<int>* ranks : {&f.ranks, &f.validation.slow_gpus}) {
      for (int r : *ranks) {
        if (r < 0 || r >= layout->world_size()) continue;
        const int slot = layout->MachineOf(r);
        m.rank_machines[r] = slot < static_cast<int>(in.slot_machines.size()) ? in.slot_machines[slot] : "";
      }
    }
    m.job_machines = job_machines;
    m.redistribute = RedistributionAvailability(spec.fail_slow, *layout, speeds, switch_seconds, mb_options);
    const MicroBatchPlanRecord& s2 = f.mitigation.microbatch_plan;
    if (f.mitigation.strategy == MitigationStrategy::kRedistribute && PlanInForce(s2) && s2.in_force_at != 0 &&
        speeds.ok && speeds.micro_batches == s2.counts) {
      m.measured_iteration_seconds = speeds.iteration_seconds;
    }
    m.remap = remap;
    m.restart_cost = MeasureRestartCost(status, f.healthy_iteration_seconds);
    m.evidence_max_age_ns = options.evidence_max_age_ns;
    FailSlowMitigationDecision md = DecideFailSlowMitigation(m, now);
    f.mitigation = std::move(md.record);
    for (JobEvent& e : md.events) plan->events.push_back(std::move(e));
    // The evidence gate (failslow_mitigation.cc). Only the newest finding can be open.
    if (md.gemm_wanted && &f == &status.fail_slows.back()) {
      v.finding = f;
      v.gemm_requested = true;
      validate();
    }
    if (md.refuted && f.ended_at == 0) {
      f.ended_at = now;
      f.state = FailSlowState::kRecovered;
      f.detail = absl::StrCat(f.detail, "; closed: ", md.refuted_reason);
      plan->events.push_back(JobEvent{JobEventType::kNormal, "FailSlowRecovered",
                                      absl::StrFormat("fail-slow #%d closed: %s; if the job is still slow, a new "
                                                      "finding is localized from scratch",
                                                      f.id, md.refuted_reason)});
    }
    // S4: look again at once so the decision engine opens its incident.
    if (!md.actions.empty() && (plan->requeue_after_ns == 0 || plan->requeue_after_ns > kMitigationRequeueNs)) {
      plan->requeue_after_ns = kMitigationRequeueNs;
    }
  }
  if (finished) return;

  // S2: the newest finding keeps a plan while its ladder is on S2 (Auto); a plan of an
  // older finding still in force is handed over to it then, else kept until withdrawn.
  FailSlowFinding& newest = status.fail_slows.back();
  const bool wanted = spec.fail_slow.mitigation == FailSlowMitigation::kAuto && newest.ended_at == 0 &&
                      newest.mitigation.strategy == MitigationStrategy::kRedistribute;
  for (FailSlowFinding& f : status.fail_slows) {
    MicroBatchPlanRecord& p = f.mitigation.microbatch_plan;
    if (&f == &newest || !wanted || !PlanInForce(p)) continue;
    if (!PlanInForce(newest.mitigation.microbatch_plan)) {
      const int plans = newest.mitigation.microbatch_plan.plans;
      newest.mitigation.microbatch_plan = p;
      newest.mitigation.microbatch_plan.plans = plans;
    }
    p.cleared_at = now;
    p.cleared_reason = absl::StrFormat("handed over to fail-slow #%d", newest.id);
  }
  // The record holding the job's newest plan id (the newest such finding: a handed-over
  // plan has the same id in both) keeps sending its empty plan once withdrawn.
  const FailSlowFinding* latest = nullptr;
  for (const FailSlowFinding& f : status.fail_slows) {
    const uint64_t id = f.mitigation.microbatch_plan.plan_id;
    if (id != 0 && (latest == nullptr || id >= latest->mitigation.microbatch_plan.plan_id)) latest = &f;
  }
  for (FailSlowFinding& f : status.fail_slows) {
    const bool mine = &f == &newest && wanted;
    if (!mine && !PlanInForce(f.mitigation.microbatch_plan) && &f != latest) continue;
    MicroBatchPlanInput mi;
    mi.job_name = job.metadata.name;
    mi.spec = spec.fail_slow;
    mi.finding_id = f.id;
    mi.attempt = status.attempt;
    mi.wanted = mine;
    mi.record = f.mitigation.microbatch_plan;
    mi.next_plan_id = next_plan_id;
    mi.speeds = speeds;
    mi.agents = agents;
    MicroBatchPlanDecision pd = DecideMicroBatchPlan(mi, now, mb_options);
    f.mitigation.microbatch_plan = std::move(pd.record);
    next_plan_id = std::max(next_plan_id, f.mitigation.microbatch_plan.plan_id + 1);
    for (CommandToSend& c : pd.commands) plan->commands.push_back(std::move(c));
    for (JobEvent& e : pd.events) plan->events.push_back(std::move(e));
  }
}

}  // namespace peregrine
