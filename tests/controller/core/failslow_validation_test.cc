// Validation while paused (controller/failslow_validation.h): the link plan, the suspect
// groups, and the state machine driven to the end with agents answering like real ones
// (trap acknowledgements, gemm and p2p_rounds results with figures).
#include "controller/core/failslow_validation.h"

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/testing/layout.h"

namespace peregrine {
namespace {

using testing::Layout;

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kT0 = 1'700'000'000'000'000'000;

struct Parsed {
  std::vector<std::vector<std::pair<int, int>>> rounds;
};

Parsed ParseRounds(const std::string& text) {
  Parsed p;
  for (absl::string_view round : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    std::vector<absl::string_view> head = absl::StrSplit(round, ':');
    REQUIRE(head.size() == 2);
    REQUIRE(head[0] == absl::StrCat("r", p.rounds.size()));
    std::vector<std::pair<int, int>> transfers;
    for (absl::string_view t : absl::StrSplit(head[1], ',', absl::SkipEmpty())) {
      std::vector<absl::string_view> sd = absl::StrSplit(t, '>');
      REQUIRE(sd.size() == 2);
      int s = 0, d = 0;
      REQUIRE(absl::SimpleAtoi(sd[0], &s));
      REQUIRE(absl::SimpleAtoi(sd[1], &d));
      transfers.push_back({s, d});
    }
    p.rounds.push_back(transfers);
  }
  return p;
}

TEST_CASE("PlanValidationLinks: every ring link of every group of each kind once, no rank twice a round",
          "[unit]") {
  for (auto [t, p, d] : {std::tuple{2, 2, 2}, std::tuple{2, 3, 3}, std::tuple{4, 1, 5}, std::tuple{1, 7, 2},
                         std::tuple{3, 2, 4}}) {
    const ParallelLayout layout = Layout(t, p, d, 1);
    INFO(layout.DebugString());
    std::vector<GroupKind> kinds = {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData,
                                    GroupKind::kData /* duplicates are ignored */};
    auto plan = PlanValidationLinks(layout, kinds);
    REQUIRE(plan.ok());
    const Parsed parsed = ParseRounds(plan->rounds);
    CHECK(static_cast<int>(parsed.rounds.size()) == plan->round_count);
    // Expected: each group's ring links i -> i+1.
    std::map<std::pair<int, int>, GroupKind> want;
    int want_rounds = 0;
    for (GroupKind k : {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData}) {
      const int n = layout.GroupSize(k);
      if (n < 2) continue;
      want_rounds += n % 2 == 0 ? 2 : 3;
      for (const CommGroup& g : layout.Groups(k)) {
        for (int i = 0; i < n; ++i) want[{g.ranks[i], g.ranks[(i + 1) % n]}] = k;
      }
    }
    CHECK(plan->round_count == want_rounds);
    CHECK(plan->link_kind == want);
    std::map<std::pair<int, int>, int> seen;
    for (const auto& round : parsed.rounds) {
      std::set<int> busy;
      for (auto [s, dst] : round) {
        CHECK(busy.insert(s).second);
        CHECK(busy.insert(dst).second);
        ++seen[{s, dst}];
      }
    }
    CHECK(seen.size() == want.size());
    for (const auto& [link, n] : seen) CHECK(n == 1);
  }
  // Kinds of size 1 have no links.
  auto none = PlanValidationLinks(Layout(1, 1, 4, 1), {GroupKind::kTensor, GroupKind::kPipeline});
  REQUIRE(none.ok());
  CHECK(none->round_count == 0);
  CHECK(none->rounds.empty());
}

TEST_CASE("SuspectGroups: a slow rank's groups and the named groups, bad names are errors", "[unit]") {
  const ParallelLayout layout = Layout();
  FailSlowFinding f;
  f.kind = FailSlowKind::kCompute;
  f.ranks = {3};
  auto g = SuspectGroups(layout, f);
  REQUIRE(g.ok());
  REQUIRE(g->size() == 3);
  for (const CommGroup& c : *g) CHECK(std::count(c.ranks.begin(), c.ranks.end(), 3) == 1);
  f.kind = FailSlowKind::kCommunication;
  f.ranks = {0, 1, 2, 3};
  f.group = "dp 0, dp 1";
  g = SuspectGroups(layout, f);
  REQUIRE(g.ok());
  REQUIRE(g->size() == 2);
  CHECK(g->at(0).kind == GroupKind::kData);
  CHECK(g->at(1).index == 1);
  f.group = "dp 9";
  CHECK_THAT(std::string(SuspectGroups(layout, f).status().message()), Catch::Contains("dp 9"));
  f.group = "xx 0";
  CHECK_FALSE(SuspectGroups(layout, f).ok());
  f.kind = FailSlowKind::kCompute;
  f.group = "";
  f.ranks = {99};
  CHECK_THAT(std::string(SuspectGroups(layout, f).status().message()), Catch::Contains("99"));
}

// A job of 4 machines (slot s = machine "1s", pod "j-ms") and a finding to validate.
struct Harness {
  ParallelLayout layout = Layout();
  FailSlowValidationInput in;
  int64_t now = kT0;

  FailSlowValidationOptions options;

  explicit Harness(FailSlowFinding f) {
    options.passes = 1;  // one pass unless a test says otherwise
    in.job_name = "j";
    in.layout = &layout;
    f.id = 7;
    f.state = FailSlowState::kLocalized;
    in.finding = f;
    for (int s = 0; s < layout.machines(); ++s) {
      in.slot_machines.push_back(absl::StrCat(10 + s));
      in.slot_addresses.push_back("127.0.0.1");
      ValidationAgent a;
      a.pod = absl::StrCat("j-m", s);
      a.slot = s;
      a.active = true;
      a.profiling = true;
      in.agents.push_back(a);
    }
    in.candidate_port = 40123;
  }

  ValidationAgent& Agent(const std::string& pod) {
    for (ValidationAgent& a : in.agents) {
      if (a.pod == pod) return a;
    }
    FAIL("no agent " << pod);
    return in.agents[0];
  }

  // Decides, persists the state and marks the commands pending at their agents.
  FailSlowValidationDecision Step(int64_t advance = kSec) {
    now += advance;
    FailSlowValidationDecision d = DecideFailSlowValidation(in, now, options);
    in.finding.validation = d.validation;
    for (const ValidationCommand& c : d.commands) Agent(c.pod).pending_command_ids.push_back(c.id);
    return d;
  }

  // Starts the validation and has every agent acknowledge its trap; returns the decision
  // that follows (GEMM sent).
  FailSlowValidationDecision StepPastTrap();

  // Every pending command whose id contains `part` gets its answer.
  int Answer(const std::string& part, const std::function<ValidationCommandOutcome(const ValidationAgent&)>& answer) {
    int n = 0;
    for (ValidationAgent& a : in.agents) {
      std::vector<std::string> keep;
      for (const std::string& id : a.pending_command_ids) {
        if (id.find(part) == std::string::npos) {
          keep.push_back(id);
          continue;
        }
        a.results[id] = answer(a);
        ++n;
      }
      a.pending_command_ids = keep;
    }
    return n;
  }
};

ValidationCommandOutcome Ok() {
  ValidationCommandOutcome o;
  o.ok = true;
  o.passed = true;
  return o;
}

FailSlowValidationDecision Harness::StepPastTrap() {
  Step();
  Answer("trap-on", [](const ValidationAgent&) { return Ok(); });
  return Step();
}

// A finding of `kind` naming `ranks` (and, for communication, the groups `group`).
FailSlowFinding Finding(FailSlowKind kind, std::vector<int> ranks, std::string group = "") {
  FailSlowFinding f;
  f.kind = kind;
  f.ranks = std::move(ranks);
  f.group = std::move(group);
  return f;
}

// DP groups 0 and 1 congested: the link between machines 10 and 11.
FailSlowFinding CongestedDpFinding() { return Finding(FailSlowKind::kCommunication, {0, 1, 2, 3}, "dp 0, dp 1"); }

// GEMM figures: 2 TFLOP/s per GPU, `slow` global ranks at 0.7.
std::function<ValidationCommandOutcome(const ValidationAgent&)> Gemm(const ParallelLayout& layout,
                                                                     std::set<int> slow) {
  return [&layout, slow](const ValidationAgent& a) {
    ValidationCommandOutcome o = Ok();
    const std::vector<int> ranks = layout.RanksOfMachine(a.slot);
    for (size_t i = 0; i < ranks.size(); ++i) o.figures[absl::StrCat("gpu", i, "_tflops")] = slow.count(ranks[i]) ? 0.7 : 2.0;
    return o;
  };
}

// Link figures for the links the machine receives on: 10 GB/s, `slow` links 1 GB/s.
std::function<ValidationCommandOutcome(const ValidationAgent&)> Links(const ParallelLayout& layout,
                                                                      const std::string& rounds,
                                                                      std::set<std::pair<int, int>> slow) {
  return [&layout, rounds, slow](const ValidationAgent& a) {
    ValidationCommandOutcome o = Ok();
    const Parsed p = ParseRounds(rounds);
    for (const auto& round : p.rounds) {
      for (auto [s, d] : round) {
        if (layout.MachineOf(d) != a.slot) continue;
        o.figures[absl::StrCat("link_", s, "_", d, "_gbps")] = slow.count({s, d}) ? 1.0 : 10.0;
      }
    }
    return o;
  };
}

std::set<std::string> Pods(const std::vector<ValidationCommand>& cs) {
  std::set<std::string> out;
  for (const ValidationCommand& c : cs) out.insert(c.pod);
  return out;
}

TEST_CASE("FailSlowValidation: a slow GPU is confirmed by GEMM, then training is released", "[unit]") {
  Harness h(Finding(FailSlowKind::kCompute, {3}));
  h.options.gemm_every_machine = false;  // the suspect groups' machines only

  // Start: trap every agent, profiling kept on.
  FailSlowValidationDecision d = h.Step();
  CHECK(d.validation.state == ValidationState::kPausing);
  CHECK(d.trap_wanted);
  CHECK(d.validation.started_at == h.now);
  CHECK(d.validation.master_port == 40123);
  CHECK(d.validation.link_kinds == "tp,pp,dp");
  // Rank 3 (slot 1): TP {2,3} on slot 1, PP {3,7} on slots 1 and 3, DP {1,3} on slots 0 and 1.
  CHECK(d.validation.machines == std::vector<std::string>{"10", "11", "13"});
  REQUIRE(d.commands.size() == 4);
  for (const ValidationCommand& c : d.commands) {
    CHECK(c.kind == ValidationCommand::Kind::kSetNcclMode);
    CHECK(c.trap);
    CHECK(c.profiling);
    CHECK(c.id == "j-failslow-7-trap-on-" + c.pod);
  }
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].reason == "FailSlowValidationStarted");

  // Nothing answered yet: deciding again sends nothing new.
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kPausing);
  CHECK(d.commands.empty());
  CHECK(d.events.empty());

  // Trapped everywhere: GEMM on the three machines.
  REQUIRE(h.Answer("trap-on", [](const ValidationAgent&) { return Ok(); }) == 4);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kGemm);
  CHECK(d.trap_wanted);
  REQUIRE(d.commands.size() == 3);
  CHECK(Pods(d.commands) == std::set<std::string>{"j-m0", "j-m1", "j-m3"});
  for (const ValidationCommand& c : d.commands) {
    CHECK(c.kind == ValidationCommand::Kind::kRunDiagnostic);
    CHECK(c.diagnostic == DiagnosticKind::kGemm);
    CHECK(c.params.at("dtype") == "fp32");
    CHECK(c.timeout_ms > 0);
  }

  // Rank 3 computes at a third of its peers' rate: the link rounds follow.
  REQUIRE(h.Answer("gemm", Gemm(h.layout, {3})) == 3);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kLinks);
  CHECK(d.validation.slow_gpus == std::vector<int>{3});
  CHECK_THAT(d.validation.detail, Catch::Contains("rank 3"));
  REQUIRE(d.commands.size() == 4);
  std::string rounds;
  for (const ValidationCommand& c : d.commands) {
    CHECK(c.diagnostic == DiagnosticKind::kP2pRounds);
    CHECK(c.params.at("ranks") == "8");
    CHECK(c.params.at("master_port") == "40123");
    CHECK(c.params.at("master_addr") == "127.0.0.1");
    CHECK(c.params.at("rank_base") == absl::StrCat(2 * (c.pod.back() - '0')));
    if (rounds.empty()) rounds = c.params.at("rounds");
    CHECK(c.params.at("rounds") == rounds);  // the same plan on every machine
  }
  CHECK(ParseRounds(rounds).rounds.size() == 6);  // tp, pp, dp: 2 rounds each

  // Every link healthy: confirmed by GEMM alone; trap released.
  REQUIRE(h.Answer("links", Links(h.layout, rounds, {})) == 4);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kResuming);
  CHECK_FALSE(d.trap_wanted);
  CHECK(d.validation.verdict == ValidationVerdict::kConfirmed);
  CHECK(d.validation.slow_links.empty());
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].reason == "FailSlowValidated");
  CHECK_THAT(d.events[0].message, Catch::Contains("slow GPU rank(s) 3"));
  REQUIRE(d.commands.size() == 4);
  for (const ValidationCommand& c : d.commands) {
    CHECK_FALSE(c.trap);
    CHECK(c.profiling);
    CHECK(c.id == "j-failslow-7-trap-off-" + c.pod);
  }
  REQUIRE(h.Answer("trap-off", [](const ValidationAgent&) { return Ok(); }) == 4);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kDone);
  CHECK(d.validation.ended_at == h.now);
  CHECK(d.commands.empty());
  // Done is final: nothing more, whatever happens.
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kDone);
  CHECK(d.commands.empty());
  CHECK(d.events.empty());
}

TEST_CASE("FailSlowValidation: a congested link is confirmed by the link rounds of its kind", "[unit]") {
  Harness h(CongestedDpFinding());
  h.in.spec.mitigation = FailSlowMitigation::kMonitorOnly;  // Auto without S3 defers it (below)
  FailSlowValidationDecision d = h.Step();
  CHECK(d.validation.link_kinds == "dp");
  // GEMM on every machine by default: the whole job is paused anyway.
  CHECK(d.validation.machines == std::vector<std::string>{"10", "11", "12", "13"});
  h.Answer("trap-on", [](const ValidationAgent&) { return Ok(); });
  d = h.Step();
  REQUIRE(d.validation.state == ValidationState::kGemm);
  CHECK(Pods(d.commands) == std::set<std::string>{"j-m0", "j-m1", "j-m2", "j-m3"});
  h.Answer("gemm", Gemm(h.layout, {}));
  d = h.Step();
  REQUIRE(d.validation.state == ValidationState::kLinks);
  CHECK(d.validation.slow_gpus.empty());
  REQUIRE_FALSE(d.commands.empty());
  const std::string rounds = d.commands[0].params.at("rounds");
  CHECK(ParseRounds(rounds).rounds.size() == 2);  // dp only
  // The link between machines 10 and 11 carries DP groups 0 ({0,2}) and 1 ({1,3}).
  h.Answer("links", Links(h.layout, rounds, {{0, 2}, {2, 0}, {1, 3}, {3, 1}}));
  d = h.Step();
  CHECK(d.validation.verdict == ValidationVerdict::kConfirmed);
  CHECK(std::set<std::string>(d.validation.slow_links.begin(), d.validation.slow_links.end()) ==
        std::set<std::string>{"dp 0->2", "dp 2->0", "dp 1->3", "dp 3->1"});
  CHECK_THAT(d.validation.detail, Catch::Contains("dp links (8, best of 1)"));
  CHECK(d.validation.state == ValidationState::kResuming);
}

TEST_CASE("FailSlowValidation: GEMM on every machine names a slow GPU the profile missed", "[unit]") {
  // The profile named rank 4 only; rank 3 (slot 1, in none of 4's groups) is slow too.
  Harness h(Finding(FailSlowKind::kCompute, {4}));
  h.StepPastTrap();
  REQUIRE(h.Answer("gemm", Gemm(h.layout, {3, 4})) == 4);
  FailSlowValidationDecision d = h.Step();
  CHECK(d.validation.slow_gpus == std::vector<int>{3, 4});
}

TEST_CASE("FailSlowValidation: the best of two passes counts, each link pass on a fresh port", "[unit]") {
  Harness h(CongestedDpFinding());
  h.in.remap_available = true;  // Auto with S3: validated at once
  h.options.passes = 2;
  FailSlowValidationDecision d = h.StepPastTrap();
  REQUIRE(d.commands.size() == 4);
  for (const ValidationCommand& c : d.commands) CHECK(c.id == "j-failslow-7-gemm1-" + c.pod);
  // Pass 1: rank 6 was disturbed (slow), rank 3 is slow.
  REQUIRE(h.Answer("gemm1", Gemm(h.layout, {3, 6})) == 4);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kGemm);
  CHECK(d.validation.pass == 2);
  REQUIRE(d.commands.size() == 4);
  for (const ValidationCommand& c : d.commands) CHECK(c.id == "j-failslow-7-gemm2-" + c.pod);
  // Pass 2: only rank 3 is slow again.
  REQUIRE(h.Answer("gemm2", Gemm(h.layout, {3})) == 4);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kLinks);
  CHECK(d.validation.slow_gpus == std::vector<int>{3});
  CHECK_THAT(d.validation.detail, Catch::Contains("best of 2"));
  REQUIRE(d.commands.size() == 4);
  const std::string rounds = d.commands[0].params.at("rounds");
  CHECK(d.commands[0].params.at("master_port") == "40123");
  // Link pass 1: 0->2 disturbed once; the congested 1->3 / 3->1 slow.
  REQUIRE(h.Answer("links1", Links(h.layout, rounds, {{0, 2}, {1, 3}, {3, 1}})) == 4);
  h.in.candidate_port = 40200;
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kLinks);
  CHECK(d.validation.pass == 2);
  CHECK(d.validation.master_port == 40200);
  REQUIRE(d.commands.size() == 4);
  for (const ValidationCommand& c : d.commands) {
    CHECK(c.id == "j-failslow-7-links2-" + c.pod);
    CHECK(c.params.at("master_port") == "40200");
  }
  REQUIRE(h.Answer("links2", Links(h.layout, rounds, {{1, 3}, {3, 1}})) == 4);
  d = h.Step();
  CHECK(d.validation.verdict == ValidationVerdict::kConfirmed);
  CHECK(std::set<std::string>(d.validation.slow_links.begin(), d.validation.slow_links.end()) ==
        std::set<std::string>{"dp 1->3", "dp 3->1"});
  CHECK(d.validation.state == ValidationState::kResuming);
}

TEST_CASE("FailSlowValidation: all normal is 'not confirmed', not_present measures nothing", "[unit]") {
  Harness h(Finding(FailSlowKind::kCompute, {5}));
  h.StepPastTrap();
  h.Answer("gemm", [](const ValidationAgent&) {
    ValidationCommandOutcome o = Ok();
    o.not_present = true;
    return o;
  });
  FailSlowValidationDecision d = h.Step();
  REQUIRE(d.validation.state == ValidationState::kLinks);
  CHECK_THAT(d.validation.detail, Catch::Contains("nothing to compare"));
  const std::string rounds = d.commands.at(0).params.at("rounds");
  h.Answer("links", Links(h.layout, rounds, {}));
  d = h.Step();
  CHECK(d.validation.verdict == ValidationVerdict::kNotConfirmed);
  CHECK(d.validation.slow_gpus.empty());
  CHECK(d.validation.slow_links.empty());
}

TEST_CASE("FailSlowValidation: failures release training with the reason", "[unit]") {
  const FailSlowFinding f = Finding(FailSlowKind::kCompute, {3});
  SECTION("an agent cannot trap (no NCCL hook)") {
    Harness h(f);
    h.Step();
    h.Answer("trap-on", [](const ValidationAgent& a) {
      ValidationCommandOutcome o;
      o.ok = a.pod != "j-m2";
      o.error = o.ok ? "" : "no NCCL hook in this pod";
      return o;
    });
    FailSlowValidationDecision d = h.Step();
    CHECK(d.validation.verdict == ValidationVerdict::kFailed);
    CHECK_THAT(d.validation.detail, Catch::Contains("j-m2") && Catch::Contains("no NCCL hook"));
    CHECK(d.validation.state == ValidationState::kResuming);
    CHECK_FALSE(d.trap_wanted);
    CHECK(d.commands.size() == 4);  // trap off everywhere
    REQUIRE_FALSE(d.events.empty());
    CHECK(d.events[0].reason == "FailSlowValidationFailed");
  }
  SECTION("GEMM results never come") {
    Harness h(f);
    h.StepPastTrap();
    FailSlowValidationDecision d = h.Step(30 * kSec);
    CHECK(d.validation.state == ValidationState::kGemm);  // within the diagnostics' timeout + margin
    d = h.Step(100 * kSec);
    CHECK(d.validation.verdict == ValidationVerdict::kFailed);
    CHECK_THAT(d.validation.detail, Catch::Contains("GEMM results missing"));
    CHECK(d.validation.state == ValidationState::kResuming);
  }
  SECTION("the attempt changes underneath (an agent is gone)") {
    Harness h(f);
    h.Step();
    h.in.agents[1].active = false;
    FailSlowValidationDecision d = h.Step();
    CHECK(d.validation.verdict == ValidationVerdict::kFailed);
    CHECK_THAT(d.validation.detail, Catch::Contains("11"));
    // The remaining agents are released; the gone one needs nothing.
    h.Answer("trap-off", [](const ValidationAgent&) { return Ok(); });
    d = h.Step();
    CHECK(d.validation.state == ValidationState::kDone);
  }
  SECTION("a link diagnostic error") {
    Harness h(f);
    h.StepPastTrap();
    h.Answer("gemm", Gemm(h.layout, {}));
    h.Step();
    h.Answer("links", [](const ValidationAgent& a) {
      ValidationCommandOutcome o = Ok();
      if (a.slot == 2) {
        o.ok = false;
        o.error = "p2p_rounds: timed out after 120000 ms";
      }
      return o;
    });
    FailSlowValidationDecision d = h.Step();
    CHECK(d.validation.verdict == ValidationVerdict::kFailed);
    CHECK_THAT(d.validation.detail, Catch::Contains("12") && Catch::Contains("timed out"));
  }
}

TEST_CASE("FailSlowValidation: only a localized, ongoing finding starts one", "[unit]") {
  Harness h(Finding(FailSlowKind::kCompute, {3}));
  h.in.finding.state = FailSlowState::kProfiling;
  FailSlowValidationDecision d = h.Step();
  CHECK(d.validation.state == ValidationState::kNotStarted);
  CHECK(d.commands.empty());
  h.in.finding.state = FailSlowState::kRecovered;
  h.in.finding.ended_at = h.now;
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kNotStarted);
  h.in.finding.state = FailSlowState::kLocalized;
  h.in.finding.ended_at = 0;
  h.in.spec.enabled = false;
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kNotStarted);
  CHECK_FALSE(ValidationInProgress(d.validation));
}

TEST_CASE("FailSlowValidation: with Auto and S3 unavailable a communication-only finding is recorded, not paused for", "[unit]") {
  Harness h(CongestedDpFinding());
  h.in.spec.mitigation = FailSlowMitigation::kAuto;
  h.in.remap_available = false;
  FailSlowValidationDecision d = h.Step();
  CHECK(d.validation.state == ValidationState::kNotStarted);
  CHECK(d.validation.started_at == 0);
  CHECK_FALSE(d.trap_wanted);
  CHECK(d.commands.empty());
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].reason == "FailSlowValidationDeferred");
  CHECK_THAT(d.validation.detail, Catch::Contains("S3 remap unavailable"));
  // Level-based: recorded once.
  d = h.Step();
  CHECK(d.commands.empty());
  CHECK(d.events.empty());
  // A finding with a slow rank (compute+communication) can lead to S4: validated.
  Harness both(Finding(FailSlowKind::kComputeAndCommunication, {3}, "dp 0"));
  CHECK(both.Step().validation.state == ValidationState::kPausing);
  // With S3 available, or MonitorOnly (which measures what Auto would meet): validated.
  Harness remap(CongestedDpFinding());
  remap.in.remap_available = true;
  CHECK(remap.Step().validation.state == ValidationState::kPausing);
  Harness monitor(CongestedDpFinding());
  monitor.in.spec.mitigation = FailSlowMitigation::kMonitorOnly;
  CHECK(monitor.Step().validation.state == ValidationState::kPausing);
  // The ladder asks for its GEMM at S4's break-even: GEMM only, no link rounds.
  h.in.gemm_requested = true;
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kPausing);
  CHECK(d.validation.link_kinds.empty());
  for (const ValidationCommand& c : d.commands) CHECK(c.id == "j-failslow-7-trap-on-" + c.pod);
}

TEST_CASE("FailSlowValidation: a GEMM re-confirmation after a done validation runs GEMM only, under its own ids", "[unit]") {
  Harness h(Finding(FailSlowKind::kCompute, {3}));
  // The first validation, to the end: rank 3 slow.
  h.StepPastTrap();
  h.Answer("gemm", Gemm(h.layout, {3}));
  FailSlowValidationDecision d = h.Step();
  REQUIRE(d.validation.state == ValidationState::kLinks);
  std::string rounds;
  for (const ValidationCommand& c : d.commands) rounds = c.params.at("rounds");
  h.Answer("links", Links(h.layout, rounds, {}));
  h.Step();
  h.Answer("trap-off", [](const ValidationAgent&) { return Ok(); });
  d = h.Step();
  REQUIRE(d.validation.state == ValidationState::kDone);
  const int64_t first_end = d.validation.ended_at;
  REQUIRE(d.validation.slow_gpus == std::vector<int>{3});

  // Not requested: Done stays Done.
  d = h.Step(300 * kSec);
  CHECK(d.commands.empty());
  // Requested: a new run, ids "c<started_at>-", the earlier results not reused.
  h.in.gemm_requested = true;
  d = h.Step();
  const int64_t start = h.now;
  const std::string prefix = absl::StrCat("j-failslow-7-c", start, "-");
  CHECK(d.validation.state == ValidationState::kPausing);
  CHECK(d.validation.started_at == start);
  CHECK(d.validation.ended_at == first_end);  // kept while it runs
  CHECK(d.validation.verdict == ValidationVerdict::kNone);
  CHECK(d.validation.slow_gpus.empty());
  CHECK(d.validation.link_kinds.empty());
  CHECK(d.trap_wanted);
  REQUIRE(d.commands.size() == 4);
  for (const ValidationCommand& c : d.commands) CHECK(c.id == prefix + "trap-on-" + c.pod);
  REQUIRE(d.events.size() == 1);
  CHECK_THAT(d.events[0].message, Catch::Contains("GEMM confirmation before S4"));
  // Deciding again (still requested) while it runs: nothing new.
  d = h.Step();
  CHECK(d.commands.empty());
  CHECK(d.validation.started_at == start);
  h.in.gemm_requested = false;
  REQUIRE(h.Answer(prefix + "trap-on", [](const ValidationAgent&) { return Ok(); }) == 4);
  d = h.Step();
  REQUIRE(d.validation.state == ValidationState::kGemm);
  REQUIRE(d.commands.size() == 4);
  for (const ValidationCommand& c : d.commands) CHECK(c.id == prefix + "gemm1-" + c.pod);
  // The GPU recovered: every GPU normal; no link rounds; training released.
  REQUIRE(h.Answer(prefix + "gemm", Gemm(h.layout, {})) == 4);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kResuming);
  CHECK(d.validation.verdict == ValidationVerdict::kNotConfirmed);
  CHECK(d.validation.slow_gpus.empty());
  for (const ValidationCommand& c : d.commands) CHECK(c.id == prefix + "trap-off-" + c.pod);
  REQUIRE(h.Answer(prefix + "trap-off", [](const ValidationAgent&) { return Ok(); }) == 4);
  d = h.Step();
  CHECK(d.validation.state == ValidationState::kDone);
  CHECK(d.validation.ended_at == h.now);
  CHECK(d.commands.empty());
}

}  // namespace
}  // namespace peregrine
