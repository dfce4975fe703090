#include "controller/core/failslow_validation.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "diagnosis/link_plan.h"
#include "diagnosis/link_rounds.h"

// How a fail-slow validation runs (Falcon section 4.3; "pause by trapping NCCL calls;
// validate: GEMM on each GPU, O(1) rounds of P2P transfers over the group's ring/tree
// links").
//
// Once a fail-slow finding is localized, its suspects are checked by measurement:
//  1. Pausing: every active agent gets set_nccl_mode(trap, profiling kept) with id
//     "<job>-failslow-<finding>-trap-on-<pod>"; training stops at its next NCCL call.
//  2. Gemm (all traps acknowledged): a `gemm` diagnostic (params dtype, size, iterations)
//     on every machine of the job (gemm_every_machine, the default), or only on the
//     machines of the suspect groups (each slow rank's TP, PP and DP groups and the named
//     congested groups). Every machine by default because the trap already stalls every
//     GPU of the job, so measuring all of them in parallel adds no time and gives a
//     job-wide median, and profiling can miss a second slow GPU (its groups' lateness is
//     masked by the first one's victims). Id "<job>-failslow-<finding>-gemm-<pod>".
//     Judging (the rule of peregrine-linkcheck / JudgeLinkTimes, on time per GEMM =
//     1 / throughput): a GPU is slow when its time exceeds gemm_slow_ratio (1.2) x the
//     median over every GPU measured.
//  3. Links: a `p2p_rounds` diagnostic on every machine of the job, one communicator over
//     the whole job (communicator rank = global rank, rank_base = slot x gpusPerMachine,
//     rendezvous at slot 0's address and the port recorded when validation started). The
//     rounds cover the ring links of EVERY group of each suspect kind (the suspects' peers
//     are the baseline): per kind, RingValidationRounds of each group, merged round by
//     round (groups of a kind are disjoint), kinds one after the other. Judged per kind
//     (intra-machine TP links are not compared with inter-machine DP links): a link is
//     slow when its time (bytes / measured rate) exceeds link_slow_ratio (1.5) x the
//     median of its kind (JudgeLinkTimes' median). Id "<job>-failslow-<finding>-links-<pod>".
//     Both measurements run `passes` (2) times in a row and each GPU's and link's best
//     result counts: a measurement disturbed once by other load on the host does not make
//     a GPU or link slow, a slow one is slow every time. Each link pass rendezvouses on
//     the candidate port observed when it starts (recorded in the status).
//  4. Resuming: set_nccl_mode(trap off) on every active agent (id "...-trap-off-<pod>");
//     Done when all acknowledged (or their agents are gone).
// Verdict: "confirmed" when a GPU or a link was found slow, "not confirmed" when all
// measured normal, "failed" (with the reason in detail) when an agent cannot trap, a
// diagnostic fails with an error, results are missing at a phase's deadline, or the
// attempt changes underneath; every failure path still goes through Resuming, so
// training always continues without a restart. A diagnostic that reports not_present
// counts as measured nothing (it never makes a GPU slow).

namespace peregrine {
namespace {

constexpr GroupKind kKinds[] = {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData};

std::optional<GroupKind> KindFromName(absl::string_view name) {
  for (GroupKind k : kKinds) {
    if (name == GroupKindName(k)) return k;
  }
  return std::nullopt;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size();
  return m % 2 == 1 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

class Validator {
 public:
  Validator(const FailSlowValidationInput& in, int64_t now, const FailSlowValidationOptions& options)
      : in_(in), now_(now), options_(options), base_(absl::StrCat(in.job_name, "-failslow-", in.finding.id, "-")) {
    d_.validation = in.finding.validation;
    for (const ValidationAgent& a : in.agents) {
      if (a.active && a.slot >= 0 && a.slot < in.layout->machines()) by_slot_[a.slot] = &a;
    }
    ratio_ = in.spec.suspicious_group_ratio > 1.0 ? in.spec.suspicious_group_ratio : 1.1;
  }

  FailSlowValidationDecision Run() {
    FailSlowValidation& v = d_.validation;
    // One state may lead to the next within the round: each step runs on the state the
    // previous one left.
    if (in_.gemm_requested && (v.state == ValidationState::kNotStarted || v.state == ValidationState::kDone)) {
      if (!Start(/*gemm_only=*/true)) return std::move(d_);
    } else if (v.state == ValidationState::kNotStarted && !Start(/*gemm_only=*/false)) {
      return std::move(d_);
    }
    if (v.state == ValidationState::kPausing) Pausing();
    if (v.state == ValidationState::kGemm) Gemm();
    if (v.state == ValidationState::kLinks) Links();
    if (v.state == ValidationState::kResuming) Resuming();
    d_.trap_wanted = v.state == ValidationState::kPausing || v.state == ValidationState::kGemm ||
                     v.state == ValidationState::kLinks;
    return std::move(d_);
  }

 private:
  FailSlowValidation& v() { return d_.validation; }
  const FailSlowValidation& v() const { return d_.validation; }

  std::string MachineOfSlot(int slot) const {
    if (slot >= 0 && slot < static_cast<int>(in_.slot_machines.size()) && !in_.slot_machines[slot].empty()) {
      return in_.slot_machines[slot];
    }
    return absl::StrCat("slot-", slot);
  }

  void Enter(ValidationState state) {
    v().state = state;
    v().phase_started_at = now_;
  }

  // Ends the measurements without a verdict from them; training is released next.
  void Fail(const std::string& why) {
    v().verdict = ValidationVerdict::kFailed;
    v().detail = v().detail.empty() ? why : absl::StrCat(v().detail, "; ", why);
    d_.events.push_back(JobEvent{JobEventType::kWarning, "FailSlowValidationFailed",
                                 absl::StrFormat("fail-slow #%d: validation failed: %s; releasing training",
                                                 in_.finding.id, why)});
    Enter(ValidationState::kResuming);
  }

  bool Overdue(int64_t deadline_ns) const { return now_ - v().phase_started_at > deadline_ns; }

  // The outcome of command `id` on `agent`, emitting the command when it has none and is
  // not pending.
  const ValidationCommandOutcome* ResultOrSend(const ValidationAgent& agent, ValidationCommand command) {
    if (auto it = agent.results.find(command.id); it != agent.results.end()) return &it->second;
    if (std::find(agent.pending_command_ids.begin(), agent.pending_command_ids.end(), command.id) ==
        agent.pending_command_ids.end()) {
      command.pod = agent.pod;
      d_.commands.push_back(std::move(command));
    }
    return nullptr;
  }

  ValidationCommand NcclMode(const ValidationAgent& a, bool trap) const {
    ValidationCommand c;
    c.kind = ValidationCommand::Kind::kSetNcclMode;
    c.id = absl::StrCat(Prefix(), trap ? "trap-on-" : "trap-off-", a.pod);
    c.profiling = a.profiling;
    c.trap = trap;
    return c;
  }

  // The command ids' prefix: the finding's, plus "c<started_at>-" for a run after an
  // earlier one (its ended_at kept while it runs; see the header).
  std::string Prefix() const {
    if (v().ended_at != 0 && v().started_at > v().ended_at) return absl::StrCat(base_, "c", v().started_at, "-");
    return base_;
  }

  // Starts a run: the full validation, or (gemm_only) the GEMM of a (re-)confirmation.
  bool Start(bool gemm_only) {
    const FailSlowFinding& f = in_.finding;
    if (f.state != FailSlowState::kLocalized || f.ended_at != 0 || !in_.spec.enabled) return false;
    if (!gemm_only && f.kind == FailSlowKind::kCommunication && in_.spec.mitigation == FailSlowMitigation::kAuto &&
        !in_.remap_available) {
      // Deferred (header): recorded once, training not paused.
      const std::string why =
          "not run: a communication-only finding can lead to no action now (S3 remap unavailable, a congested link "
          "names no machine to evict); the GEMM runs if the ladder reaches S4's break-even";
      if (v().detail != why) {
        v().detail = why;
        d_.events.push_back(JobEvent{JobEventType::kNormal, "FailSlowValidationDeferred",
                                     absl::StrFormat("fail-slow #%d: validation %s", f.id, why)});
      }
      return false;
    }
    absl::StatusOr<std::vector<CommGroup>> groups = SuspectGroups(*in_.layout, f);
    if (gemm_only) {
      // A new run: the earlier one's results are replaced; its ended_at stays until this
      // one ends (Prefix).
      const int64_t previous_end = v().ended_at;
      v() = FailSlowValidation{};
      v().ended_at = previous_end;
    }
    v().started_at = now_;
    if (!groups.ok()) {
      Fail(std::string(groups.status().message()));
      return true;
    }
    std::set<int> slots;
    std::vector<std::string> kinds;
    for (GroupKind k : kKinds) {
      bool any = false;
      for (const CommGroup& g : *groups) {
        if (g.kind != k) continue;
        any = true;
        for (int s : in_.layout->MachinesOfGroup(g)) slots.insert(s);
      }
      if (any) kinds.push_back(GroupKindName(k));
    }
    for (int r : f.ranks) {
      if (r >= 0 && r < in_.layout->world_size()) slots.insert(in_.layout->MachineOf(r));
    }
    if (options_.gemm_every_machine) {
      for (int s = 0; s < in_.layout->machines(); ++s) slots.insert(s);
    }
    v().machines.clear();
    for (int s : slots) v().machines.push_back(MachineOfSlot(s));
    v().link_kinds = gemm_only ? std::string() : absl::StrJoin(kinds, ",");
    v().master_addr = in_.slot_addresses.empty() || in_.slot_addresses[0].empty() ? "127.0.0.1" : in_.slot_addresses[0];
    v().master_port = in_.candidate_port;
    Enter(ValidationState::kPausing);
    if (gemm_only) {
      d_.events.push_back(JobEvent{
          JobEventType::kNormal, "FailSlowValidationStarted",
          absl::StrFormat("fail-slow #%d: pausing training (NCCL trap) for a GEMM confirmation before S4: GEMM on "
                          "machine(s) %s, no link rounds",
                          f.id, absl::StrJoin(v().machines, ","))});
      return true;
    }
    d_.events.push_back(JobEvent{
        JobEventType::kNormal, "FailSlowValidationStarted",
        absl::StrFormat("fail-slow #%d: pausing training (NCCL trap) to validate: GEMM on machine(s) %s, link rounds "
                        "over the %s groups",
                        f.id, absl::StrJoin(v().machines, ","), v().link_kinds.empty() ? "(no)" : v().link_kinds)});
    return true;
  }

  // Every slot has an active agent (the attempt is intact).
  bool AllSlotsActive(std::string* missing) const {
    std::vector<std::string> gone;
    for (int s = 0; s < in_.layout->machines(); ++s) {
      if (!by_slot_.count(s)) gone.push_back(MachineOfSlot(s));
    }
    *missing = absl::StrJoin(gone, ",");
    return gone.empty();
  }

  void Pausing() {
    std::string missing;
    if (!AllSlotsActive(&missing)) return Fail(absl::StrCat("no active agent on machine(s) ", missing));
    std::vector<std::string> waiting;
    for (const auto& [slot, a] : by_slot_) {
      const ValidationCommandOutcome* r = ResultOrSend(*a, NcclMode(*a, true));
      if (r == nullptr) {
        waiting.push_back(a->pod);
      } else if (!r->ok) {
        return Fail(absl::StrCat("cannot pause ", a->pod, ": ", r->error));
      }
    }
    if (waiting.empty()) return Enter(ValidationState::kGemm);
    if (Overdue(options_.pause_deadline_ns)) {
      Fail(absl::StrCat("timed out pausing ", absl::StrJoin(waiting, ",")));
    }
  }

  const ValidationAgent* AgentOfMachine(const std::string& machine, int* slot) const {
    for (const auto& [s, a] : by_slot_) {
      if (MachineOfSlot(s) == machine) {
        *slot = s;
        return a;
      }
    }
    return nullptr;
  }

  // Gemm and Links run their diagnostic `passes` times in a row (v.pass counts from 1);
  // the verdict uses each GPU's best throughput and each link's best rate over the
  // passes, so a measurement disturbed once by other load on the host does not make a GPU
  // or link slow, while a slow one is slow every time.
  void Gemm() {
    if (v().pass < 1) v().pass = 1;
    std::map<int, double> best;  // global rank -> best TFLOP/s
    std::vector<std::string> not_present;
    for (int pass = 1; pass <= v().pass; ++pass) {
      std::vector<std::string> waiting;
      for (const std::string& machine : v().machines) {
        int slot = -1;
        const ValidationAgent* a = AgentOfMachine(machine, &slot);
        if (a == nullptr) return Fail(absl::StrCat("no active agent on machine ", machine, " for GEMM"));
        ValidationCommand c;
        c.kind = ValidationCommand::Kind::kRunDiagnostic;
        c.id = absl::StrCat(Prefix(), "gemm", pass, "-", a->pod);
        c.diagnostic = DiagnosticKind::kGemm;
        c.params = {{"dtype", options_.gemm_dtype}};
        if (options_.gemm_size > 0) c.params["size"] = absl::StrCat(options_.gemm_size);
        if (options_.gemm_iterations > 0) c.params["iterations"] = absl::StrCat(options_.gemm_iterations);
        c.timeout_ms = options_.gemm_timeout_ms;
        const ValidationCommandOutcome* r = ResultOrSend(*a, std::move(c));
        if (r == nullptr) {
          waiting.push_back(machine);
          continue;
        }
        if (!r->ok) return Fail(absl::StrCat("GEMM on machine ", machine, ": ", r->error));
        if (r->not_present) {
          if (pass == 1) not_present.push_back(machine);
          continue;
        }
        const std::vector<int> ranks = in_.layout->RanksOfMachine(slot);
        for (size_t i = 0; i < ranks.size(); ++i) {
          auto it = r->figures.find(absl::StrCat("gpu", i, "_tflops"));
          if (it != r->figures.end() && std::isfinite(it->second) && it->second > 0) {
            best[ranks[i]] = std::max(best[ranks[i]], it->second);
          }
        }
      }
      if (!waiting.empty()) {
        if (Overdue(static_cast<int64_t>(options_.gemm_timeout_ms) * 1'000'000 + options_.phase_margin_ns)) {
          Fail(absl::StrCat("GEMM results missing from machine(s) ", absl::StrJoin(waiting, ",")));
        }
        return;
      }
      if (pass == v().pass && pass < options_.passes) {
        ++v().pass;  // the next pass's commands go out now
        v().phase_started_at = now_;
      }
    }
    std::string text;
    if (best.size() >= 2) {
      std::vector<double> times;
      for (const auto& [rank, tflops] : best) times.push_back(1.0 / tflops);
      const double median = Median(times);
      const double ratio = std::max(options_.gemm_slow_ratio, 1.0 + 1e-9);
      std::vector<std::string> slow;
      v().slow_gpus.clear();
      for (const auto& [rank, tflops] : best) {
        const double t = 1.0 / tflops;
        if (t > ratio * median) {
          v().slow_gpus.push_back(rank);
          slow.push_back(absl::StrFormat("rank %d %.3g TFLOP/s = %.2fx the median time", rank, tflops, t / median));
        }
      }
      text = absl::StrFormat("GEMM on %d GPUs (best of %d), median %.3g TFLOP/s: %s", static_cast<int>(best.size()),
                             v().pass, 1.0 / median,
                             slow.empty() ? "none slow" : absl::StrCat("slow ", absl::StrJoin(slow, "; ")));
    } else {
      text = absl::StrFormat("GEMM measured %d GPU(s): nothing to compare", static_cast<int>(best.size()));
    }
    if (!not_present.empty()) absl::StrAppend(&text, " (no GEMM on ", absl::StrJoin(not_present, ","), ")");
    v().detail = text;
    v().pass = 1;
    v().master_port = in_.candidate_port;  // the first link pass's rendezvous
    Enter(ValidationState::kLinks);
  }

  void Links() {
    if (v().pass < 1) v().pass = 1;
    std::vector<GroupKind> kinds;
    for (absl::string_view name : absl::StrSplit(v().link_kinds, ',', absl::SkipEmpty())) {
      if (auto k = KindFromName(name)) kinds.push_back(*k);
    }
    absl::StatusOr<ValidationLinkPlan> plan = PlanValidationLinks(*in_.layout, kinds);
    if (!plan.ok()) return Fail(std::string(plan.status().message()));
    if (plan->round_count == 0) return Judge({});
    if (v().master_port == 0) return Fail("no free port for the link rounds' rendezvous");
    std::string missing;
    if (!AllSlotsActive(&missing)) return Fail(absl::StrCat("no active agent on machine(s) ", missing));
    const int gpus = in_.layout->gpus_per_machine();
    std::map<std::pair<int, int>, double> best;  // link -> best GB/s over the passes
    for (int pass = 1; pass <= v().pass; ++pass) {
      std::map<std::pair<int, int>, double> gbps;
      std::vector<std::string> waiting;
      for (const auto& [slot, a] : by_slot_) {
        ValidationCommand c;
        c.kind = ValidationCommand::Kind::kRunDiagnostic;
        c.id = absl::StrCat(Prefix(), "links", pass, "-", a->pod);
        c.diagnostic = DiagnosticKind::kP2pRounds;
        c.params = {{"master_addr", v().master_addr},
                    {"master_port", absl::StrCat(v().master_port)},
                    {"ranks", absl::StrCat(in_.layout->world_size())},
                    {"rank_base", absl::StrCat(slot * gpus)},
                    {"bytes", absl::StrCat(options_.link_bytes)},
                    {"rounds", plan->rounds}};
        c.timeout_ms = options_.links_timeout_ms;
        const ValidationCommandOutcome* r = ResultOrSend(*a, std::move(c));
        if (r == nullptr) {
          waiting.push_back(MachineOfSlot(slot));
          continue;
        }
        if (!r->ok) return Fail(absl::StrCat("link rounds on machine ", MachineOfSlot(slot), ": ", r->error));
        for (const auto& [name, value] : r->figures) {
          // link_<s>_<d>_gbps
          std::vector<std::string> parts = absl::StrSplit(name, '_');
          int s = 0, dst = 0;
          if (parts.size() == 4 && parts[0] == "link" && parts[3] == "gbps" && absl::SimpleAtoi(parts[1], &s) &&
              absl::SimpleAtoi(parts[2], &dst) && std::isfinite(value) && value > 0) {
            gbps[{s, dst}] = value;
          }
        }
      }
      if (!waiting.empty()) {
        if (Overdue(static_cast<int64_t>(options_.links_timeout_ms) * 1'000'000 + options_.phase_margin_ns)) {
          Fail(absl::StrCat("link-round results missing from machine(s) ", absl::StrJoin(waiting, ",")));
        }
        return;
      }
      std::vector<std::string> unmeasured;
      for (const auto& [link, kind] : plan->link_kind) {
        if (!gbps.count(link)) unmeasured.push_back(absl::StrCat(link.first, "->", link.second));
      }
      if (!unmeasured.empty()) {
        return Fail(absl::StrCat("the link rounds reported no rate for link(s) ", absl::StrJoin(unmeasured, ",")));
      }
      for (const auto& [link, rate] : gbps) best[link] = std::max(best[link], rate);
      if (pass == v().pass && pass < options_.passes) {
        // The next pass, on a fresh rendezvous port (the last one may still be held).
        if (in_.candidate_port == 0) return Fail("no free port for the link rounds' rendezvous");
        ++v().pass;
        v().master_port = in_.candidate_port;
        v().phase_started_at = now_;
      }
    }
    Judge(best, &*plan);
  }

  void Judge(const std::map<std::pair<int, int>, double>& gbps, const ValidationLinkPlan* plan = nullptr) {
    std::vector<std::string> texts;
    v().slow_links.clear();
    if (plan != nullptr) {
      for (GroupKind kind : kKinds) {
        std::vector<LinkTime> times;
        for (const auto& [link, k] : plan->link_kind) {
          if (k != kind) continue;
          times.push_back(LinkTime{link.first, link.second,
                                   static_cast<double>(options_.link_bytes) / (gbps.at(link) * 1e9)});
        }
        if (times.empty()) continue;
        const double link_ratio = std::max(options_.link_slow_ratio, ratio_);
        absl::StatusOr<LinkVerdict> verdict = JudgeLinkTimes(times, link_ratio);
        if (!verdict.ok()) return Fail(std::string(verdict.status().message()));
        std::vector<std::string> slow;
        for (const LinkTime& t : times) {
          if (t.seconds > link_ratio * verdict->median_seconds) {
            v().slow_links.push_back(absl::StrCat(GroupKindName(kind), " ", t.sender, "->", t.receiver));
            slow.push_back(absl::StrFormat("%d->%d %.3g GB/s = %.2fx the median time", t.sender, t.receiver,
                                           gbps.at({t.sender, t.receiver}),
                                           t.seconds / verdict->median_seconds));
          }
        }
        texts.push_back(absl::StrFormat("%s links (%d, best of %d), median %.3g GB/s: %s", GroupKindName(kind),
                                        static_cast<int>(times.size()), v().pass,
                                        static_cast<double>(options_.link_bytes) / verdict->median_seconds / 1e9,
                                        slow.empty() ? "none slow" : absl::StrCat("slow ", absl::StrJoin(slow, "; "))));
      }
    }
    if (!texts.empty()) v().detail = absl::StrCat(v().detail, "; ", absl::StrJoin(texts, "; "));
    const bool confirmed = !v().slow_gpus.empty() || !v().slow_links.empty();
    v().verdict = confirmed ? ValidationVerdict::kConfirmed : ValidationVerdict::kNotConfirmed;
    std::vector<std::string> named;
    if (!v().slow_gpus.empty()) named.push_back(absl::StrCat("slow GPU rank(s) ", absl::StrJoin(v().slow_gpus, ",")));
    if (!v().slow_links.empty()) named.push_back(absl::StrCat("slow link(s) ", absl::StrJoin(v().slow_links, ", ")));
    d_.events.push_back(JobEvent{
        confirmed ? JobEventType::kWarning : JobEventType::kNormal, "FailSlowValidated",
        absl::StrFormat("fail-slow #%d validation %s: %s (%s); releasing training", in_.finding.id, ToString(v().verdict),
                        named.empty() ? "every GPU and link measured like its peers" : absl::StrJoin(named, "; "),
                        v().detail)});
    Enter(ValidationState::kResuming);
  }

  void Resuming() {
    bool all = true;
    for (const auto& [slot, a] : by_slot_) {
      if (ResultOrSend(*a, NcclMode(*a, false)) == nullptr) all = false;
    }
    if (all || Overdue(options_.pause_deadline_ns)) {
      v().state = ValidationState::kDone;
      v().ended_at = now_;
    }
  }

  const FailSlowValidationInput& in_;
  const int64_t now_;
  const FailSlowValidationOptions& options_;
  const std::string base_;
  double ratio_ = 1.1;
  std::map<int, const ValidationAgent*> by_slot_;
  FailSlowValidationDecision d_;
};

}  // namespace

bool ValidationInProgress(const FailSlowValidation& v) {
  switch (v.state) {
    case ValidationState::kPausing:
    case ValidationState::kGemm:
    case ValidationState::kLinks:
    case ValidationState::kResuming:
      return true;
    case ValidationState::kNotStarted:
    case ValidationState::kDone:
      return false;
  }
  return false;
}

absl::StatusOr<std::vector<CommGroup>> SuspectGroups(const ParallelLayout& layout, const FailSlowFinding& finding) {
  std::vector<CommGroup> out;
  auto add = [&](GroupKind kind, int index) {
    if (layout.GroupSize(kind) < 2) return;
    for (const CommGroup& g : out) {
      if (g.kind == kind && g.index == index) return;
    }
    out.push_back(layout.Group(kind, index));
  };
  if (finding.kind == FailSlowKind::kCompute || finding.kind == FailSlowKind::kComputeAndCommunication) {
    for (int r : finding.ranks) {
      if (r < 0 || r >= layout.world_size()) {
        return absl::InvalidArgumentError(absl::StrCat("finding names rank ", r, " outside the layout"));
      }
      for (GroupKind k : kKinds) add(k, layout.GroupIndexOf(k, r));
    }
  }
  for (absl::string_view item : absl::StrSplit(finding.group, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::vector<absl::string_view> parts = absl::StrSplit(item, ' ', absl::SkipEmpty());
    int index = -1;
    std::optional<GroupKind> kind = parts.size() == 2 ? KindFromName(parts[0]) : std::nullopt;
    if (!kind || !absl::SimpleAtoi(parts[1], &index) || index < 0 || index >= layout.GroupCount(*kind)) {
      return absl::InvalidArgumentError(absl::StrCat("finding names group '", item, "' that the layout does not have"));
    }
    add(*kind, index);
  }
  return out;
}

absl::StatusOr<ValidationLinkPlan> PlanValidationLinks(const ParallelLayout& layout,
                                                       const std::vector<GroupKind>& kinds) {
  ValidationLinkPlan plan;
  ValidationRounds rounds;  // over global ranks
  std::set<GroupKind> seen;
  for (GroupKind kind : kinds) {
    if (!seen.insert(kind).second || layout.GroupSize(kind) < 2) continue;
    absl::StatusOr<ValidationRounds> ring = RingValidationRounds(layout.GroupSize(kind));
    if (!ring.ok()) return ring.status();
    for (const std::vector<LinkTransfer>& round : *ring) {
      std::vector<LinkTransfer>& transfers = rounds.emplace_back();
      for (const CommGroup& g : layout.Groups(kind)) {
        for (const LinkTransfer& t : round) {
          const int s = g.ranks[t.sender], d = g.ranks[t.receiver];
          transfers.push_back(LinkTransfer{s, d});
          plan.link_kind[{s, d}] = kind;
        }
      }
    }
  }
  plan.round_count = static_cast<int>(rounds.size());
  plan.rounds = FormatLinkRoundsPlan(rounds);
  return plan;
}

FailSlowValidationDecision DecideFailSlowValidation(const FailSlowValidationInput& in, int64_t now,
                                                    const FailSlowValidationOptions& options) {
  if (in.layout == nullptr) {
    FailSlowValidationDecision d;
    d.validation = in.finding.validation;
    return d;
  }
  return Validator(in, now, options).Run();
}

}  // namespace peregrine
