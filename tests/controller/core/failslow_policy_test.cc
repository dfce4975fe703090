#include "controller/core/failslow_policy.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <set>

#include "tests/controller/core/failslow_fixtures.h"

namespace peregrine {
namespace {

using testing::Layout;

// Profiles of `n` collectives on every TP/PP/DP group and the world: members enter at
// the same time except `late_rank` (late by 5 ms); transfers take 1 ms, or 5 ms in
// `slow_group` (kind, index).
void AddProfiles(std::vector<AgentObservation>& agents, const ParallelLayout& layout, int n,
                 const std::set<int>& late_ranks, std::optional<std::pair<GroupKind, int>> slow_group) {
  std::vector<CommGroup> groups;
  for (GroupKind k : {GroupKind::kTensor, GroupKind::kPipeline, GroupKind::kData}) {
    for (const CommGroup& g : layout.Groups(k)) groups.push_back(g);
  }
  CommGroup world;
  for (int r = 0; r < layout.world_size(); ++r) world.ranks.push_back(r);
  uint64_t id = 1000;
  for (size_t gi = 0; gi <= groups.size(); ++gi) {
    const bool is_world = gi == groups.size();
    const CommGroup& g = is_world ? world : groups[gi];
    const bool slow = !is_world && slow_group && slow_group->first == g.kind && slow_group->second == g.index;
    ++id;
    for (size_t m = 0; m < g.ranks.size(); ++m) {
      const int rank = g.ranks[m];
      CommProfileObservation p;
      p.comm_id = id;
      p.global_rank = rank;
      p.rank_in_comm = static_cast<int>(m);
      p.comm_size = static_cast<int>(g.ranks.size());
      for (int s = 0; s < n; ++s) {
        const int64_t t = kNow - 10'000 * kMs + s * 100 * kMs + static_cast<int64_t>(gi) * 7 * kMs;
        bool has_late = std::any_of(g.ranks.begin(), g.ranks.end(), [&](int r) { return late_ranks.count(r) > 0; });
        const int64_t last = t + (has_late ? 5 * kMs : 20'000 * static_cast<int64_t>(g.ranks.size()));
        const int64_t enter = late_ranks.count(rank) ? last : t + 20'000 * static_cast<int64_t>(m);
        const int64_t exit = last + (slow ? 5 : 1) * kMs;
        p.collectives.push_back(CollectiveObservation{static_cast<uint64_t>(s), "allreduce", enter, exit});
      }
      agents[layout.MachineOf(rank)].comm_profiles.push_back(p);
    }
  }
}

void AddProfiles(std::vector<AgentObservation>& agents, const ParallelLayout& layout, int n, int late_rank,
                 std::optional<std::pair<GroupKind, int>> slow_group) {
  AddProfiles(agents, layout, n, late_rank >= 0 ? std::set<int>{late_rank} : std::set<int>{}, slow_group);
}

// The policy's input with ranks `slow` (rank -> severity) reported slow.
FailSlowPolicyInput SlowInput(const ParallelLayout& layout, const std::map<int, double>& slow) {
  auto agents = Agents(layout);
  for (const auto& [rank, severity] : slow) MarkSlow(agents, layout, rank, severity);
  return Input(layout, agents);
}

// Ranks `slow` (rank -> severity) open a finding; then 12 collectives of every group are
// profiled with `late_ranks` late and `slow_group` congested, and the policy decides 1 ms
// later: the decision that localizes (or not).
FailSlowDecision LocalizeAfterProfiles(const ParallelLayout& layout, const std::map<int, double>& slow,
                                       const std::set<int>& late_ranks,
                                       std::optional<std::pair<GroupKind, int>> slow_group) {
  FailSlowPolicyInput in = SlowInput(layout, slow);
  const FailSlowDecision opened = DecideFailSlow(in, kNow);
  REQUIRE(opened.findings.size() == 1);
  in.findings = opened.findings;
  in.next_finding_id = opened.next_finding_id;
  AddProfiles(in.agents, layout, 12, late_ranks, slow_group);
  FailSlowDecision d = DecideFailSlow(in, kNow + kMs);
  REQUIRE_FALSE(d.findings.empty());
  return d;
}

TEST_CASE("FailSlowPolicy: nothing slow, nothing done", "[unit]") {
  const ParallelLayout layout = Layout();
  FailSlowDecision d = DecideFailSlow(Input(layout, Agents(layout)), kNow);
  CHECK(d.findings.empty());
  CHECK(d.mode_changes.empty());
  CHECK(d.events.empty());
}

TEST_CASE("FailSlowPolicy: a verified slowdown opens a finding and switches profiling on", "[unit]") {
  const ParallelLayout layout = Layout();
  auto agents = Agents(layout);
  MarkSlow(agents, layout, 3, 0.5);
  MarkSlow(agents, layout, 5, 0.45);
  FailSlowDecision d = DecideFailSlow(Input(layout, agents), kNow);
  REQUIRE(d.findings.size() == 1);
  const FailSlowFinding& f = d.findings[0];
  CHECK(f.id == 1);
  CHECK(d.next_finding_id == 2);
  CHECK(f.state == FailSlowState::kProfiling);
  CHECK(f.kind == FailSlowKind::kUnlocalized);
  CHECK(f.onset == kNow - 3000 * kMs + 3);  // the earliest rank's onset
  CHECK(f.detected_at == kNow);
  CHECK(f.severity == Approx(0.5));
  CHECK(f.tier == FailSlowTier::kReplace);
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].reason == "FailSlowDetected");
  REQUIRE(d.mode_changes.size() == 4);
  std::set<std::string> pods;
  for (const NcclModeChange& c : d.mode_changes) {
    CHECK(c.profiling);
    CHECK(c.command_id == "j-failslow-1-profile-on-" + c.pod);
    pods.insert(c.pod);
  }
  CHECK(pods.size() == 4);

  SECTION("deciding again on the applied result changes nothing") {
    FailSlowPolicyInput in = Input(layout, agents);
    in.findings = d.findings;
    in.next_finding_id = d.next_finding_id;
    for (AgentObservation& a : in.agents) a.nccl_profiling = true;
    FailSlowDecision again = DecideFailSlow(in, kNow + 200 * kMs);
    CHECK(again.findings.size() == 1);
    CHECK(again.findings[0].state == FailSlowState::kProfiling);
    CHECK(again.events.empty());
    CHECK(again.mode_changes.empty());
  }
  SECTION("a command still pending is not sent twice") {
    FailSlowPolicyInput in = Input(layout, agents);
    in.findings = d.findings;
    in.next_finding_id = d.next_finding_id;
    for (AgentObservation& a : in.agents) a.pending_command_ids.push_back("j-failslow-1-profile-on-" + a.pod);
    CHECK(DecideFailSlow(in, kNow + 200 * kMs).mode_changes.empty());
  }
}

TEST_CASE("FailSlowPolicy: GUARD tiers", "[unit]") {
  FailSlowSpec spec;
  CHECK(FailSlowTierOf(spec, 0.05) == FailSlowTier::kMonitor);
  CHECK(FailSlowTierOf(spec, 0.12) == FailSlowTier::kMitigate);
  CHECK(FailSlowTierOf(spec, 0.2) == FailSlowTier::kReplace);
  CHECK(FailSlowTierOf(spec, 1.5) == FailSlowTier::kReplace);
}

TEST_CASE("FailSlowPolicy: profiles localize a slow compute rank to its machine", "[unit]") {
  const ParallelLayout layout = Layout();
  FailSlowPolicyInput in = SlowInput(layout, {{3, 0.8}});
  FailSlowDecision opened = DecideFailSlow(in, kNow);
  REQUIRE(opened.findings.size() == 1);

  SECTION("too few collectives: keep profiling") {
    AddProfiles(in.agents, layout, 4, 3, std::nullopt);
    in.findings = opened.findings;
    FailSlowDecision d = DecideFailSlow(in, kNow + kMs);
    CHECK(d.findings[0].state == FailSlowState::kProfiling);
  }
  SECTION("a rank missing from the profiles: keep profiling") {
    AddProfiles(in.agents, layout, 12, 3, std::nullopt);
    in.agents[0].comm_profiles.clear();
    in.findings = opened.findings;
    CHECK(DecideFailSlow(in, kNow + kMs).findings[0].state == FailSlowState::kProfiling);
  }
  SECTION("enough collectives: named") {
    const FailSlowDecision d = LocalizeAfterProfiles(layout, {{3, 0.8}}, {3}, std::nullopt);
    const FailSlowFinding& f = d.findings[0];
    INFO(f.detail);
    CHECK(f.state == FailSlowState::kLocalized);
    CHECK(f.kind == FailSlowKind::kCompute);
    CHECK(f.ranks == std::vector<int>{3});
    CHECK(f.machines == std::vector<std::string>{"11"});
    CHECK(f.localized_at == kNow + kMs);
    REQUIRE(d.events.size() == 1);
    CHECK(d.events[0].reason == "FailSlowLocalized");
  }
}

TEST_CASE("FailSlowPolicy: profiles localize a congested group", "[unit]") {
  const ParallelLayout layout = Layout();
  const CommGroup slow = layout.Group(GroupKind::kData, 1);
  const FailSlowDecision d = LocalizeAfterProfiles(layout, {{0, 0.3}}, {}, std::make_pair(GroupKind::kData, 1));
  const FailSlowFinding& f = d.findings[0];
  INFO(f.detail);
  CHECK(f.state == FailSlowState::kLocalized);
  CHECK(f.kind == FailSlowKind::kCommunication);
  CHECK(f.group == "dp 1");
  std::vector<int> ranks = slow.ranks;
  std::sort(ranks.begin(), ranks.end());
  CHECK(f.ranks == ranks);
  std::set<std::string> machines;
  for (int m : layout.MachinesOfGroup(slow)) machines.insert(std::to_string(10 + m));
  CHECK(std::set<std::string>(f.machines.begin(), f.machines.end()) == machines);
}

TEST_CASE("FailSlowPolicy: two slow ranks are both named", "[unit]") {
  // Ranks 3 (slot 1) and 4 (slot 2) share no TP, PP or DP group.
  const FailSlowDecision d = LocalizeAfterProfiles(Layout(), {{3, 0.8}, {4, 0.8}}, {3, 4}, std::nullopt);
  const FailSlowFinding& f = d.findings[0];
  INFO(f.detail);
  CHECK(f.state == FailSlowState::kLocalized);
  CHECK(f.kind == FailSlowKind::kCompute);
  CHECK(f.ranks == std::vector<int>{3, 4});
  CHECK(f.group.empty());
  CHECK(std::set<std::string>(f.machines.begin(), f.machines.end()) == std::set<std::string>{"11", "12"});
  REQUIRE(d.events.size() == 1);
  CHECK_THAT(d.events[0].message, Catch::Contains("rank(s) 3,4"));
}

TEST_CASE("FailSlowPolicy: a slow rank and a congested group at once are both named", "[unit]") {
  const ParallelLayout layout = Layout();
  // DP group 0 ({0, 2}: machines 10 and 11) is congested; rank 5 (machine 12) is in none of its groups.
  REQUIRE(layout.GroupIndexOf(GroupKind::kData, 5) != 0);
  const FailSlowDecision d = LocalizeAfterProfiles(layout, {{5, 0.9}}, {5}, std::make_pair(GroupKind::kData, 0));
  const FailSlowFinding& f = d.findings[0];
  INFO(f.detail);
  CHECK(f.state == FailSlowState::kLocalized);
  CHECK(f.kind == FailSlowKind::kComputeAndCommunication);
  CHECK(f.ranks == std::vector<int>{5});
  CHECK(f.group == "dp 0");
  CHECK(std::set<std::string>(f.machines.begin(), f.machines.end()) == std::set<std::string>{"10", "11", "12"});
  CHECK_THAT(f.detail, Catch::Contains("rank 5") && Catch::Contains("dp 0"));
  REQUIRE(d.events.size() == 1);
  CHECK_THAT(d.events[0].message, Catch::Contains("rank(s) 5 and group dp 0"));
}

TEST_CASE("FailSlowPolicy: recovery ends the finding and switches profiling off", "[unit]") {
  const ParallelLayout layout = Layout();
  FailSlowPolicyInput in = SlowInput(layout, {{3, 0.8}});
  FailSlowDecision opened = DecideFailSlow(in, kNow);
  // Rank 3 reports the end; the agents have profiling on.
  for (AgentObservation& a : in.agents) {
    a.nccl_profiling = true;
    for (auto& [rank, fs] : a.fail_slow) fs.slow = false;
  }
  in.findings = opened.findings;
  in.next_finding_id = opened.next_finding_id;
  FailSlowDecision d = DecideFailSlow(in, kNow + 5000 * kMs);
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].state == FailSlowState::kRecovered);
  CHECK(d.findings[0].ended_at == kNow + 5000 * kMs);
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].reason == "FailSlowRecovered");
  REQUIRE(d.mode_changes.size() == 4);
  for (const NcclModeChange& c : d.mode_changes) {
    CHECK_FALSE(c.profiling);
    CHECK(c.command_id == "j-failslow-1-profile-off-" + c.pod);
  }
  // Once the agents acknowledged, nothing more.
  in.findings = d.findings;
  for (AgentObservation& a : in.agents) a.nccl_profiling = false;
  FailSlowDecision again = DecideFailSlow(in, kNow + 5200 * kMs);
  CHECK(again.events.empty());
  CHECK(again.mode_changes.empty());
  CHECK(again.findings[0].state == FailSlowState::kRecovered);
}

TEST_CASE("FailSlowPolicy: disabled, stale attempts, standbys and disconnected agents are ignored", "[unit]") {
  const ParallelLayout layout = Layout();
  FailSlowPolicyInput in = SlowInput(layout, {{3, 0.8}});
  SECTION("disabled") {
    in.spec.enabled = false;
    CHECK(DecideFailSlow(in, kNow).findings.empty());
  }
  SECTION("an older attempt") {
    in.attempt = 2;
    CHECK(DecideFailSlow(in, kNow).findings.empty());
  }
  SECTION("disconnected") {
    in.agents[1].connected = false;
    CHECK(DecideFailSlow(in, kNow).findings.empty());
  }
}

TEST_CASE("FailSlowPolicy: garbage profiles neither crash nor localize", "[unit]") {
  const ParallelLayout layout = Layout();
  FailSlowPolicyInput in = SlowInput(layout, {{3, 0.8}});
  in.findings = DecideFailSlow(in, kNow).findings;
  for (int r = 0; r < layout.world_size(); ++r) {
    CommProfileObservation p;
    p.comm_id = 77;
    p.global_rank = r;
    p.rank_in_comm = r % 3 == 0 ? 9 : r;  // out of range for some
    p.comm_size = 4;
    p.collectives.push_back(CollectiveObservation{1, "allreduce", kNow, kNow - kMs});  // exit before enter
    p.collectives.push_back(CollectiveObservation{2, "allreduce", kNow, kNow + kMs});
    in.agents[layout.MachineOf(r)].comm_profiles.push_back(p);
    CommProfileObservation bad;
    bad.comm_id = 0;
    bad.global_rank = r;
    in.agents[layout.MachineOf(r)].comm_profiles.push_back(bad);
  }
  FailSlowDecision d = DecideFailSlow(in, kNow + kMs);
  REQUIRE(d.findings.size() == 1);
  CHECK(d.findings[0].state == FailSlowState::kProfiling);
}

TEST_CASE("FailSlowPolicy: findings are bounded", "[unit]") {
  const ParallelLayout layout = Layout();
  FailSlowPolicyInput in = SlowInput(layout, {{3, 0.8}});
  for (uint64_t i = 1; i <= kMaxFailSlowFindings; ++i) {
    FailSlowFinding f;
    f.id = i;
    f.state = FailSlowState::kRecovered;
    f.ended_at = kNow - 1;
    in.findings.push_back(f);
  }
  in.next_finding_id = kMaxFailSlowFindings + 1;
  FailSlowDecision d = DecideFailSlow(in, kNow);
  CHECK(d.findings.size() == kMaxFailSlowFindings);
  CHECK(d.findings.back().id == kMaxFailSlowFindings + 1);
  CHECK(d.findings.front().id == 2);
}

// The peer view (failslow_peers.h) in the policy.

TEST_CASE("FailSlowPolicy: a slowdown every rank shares is job-wide, and stays attributed to no machine when the profiles name no one", "[unit]") {
  const ParallelLayout layout = Layout();
  std::map<int, double> all;
  for (int r = 0; r < layout.world_size(); ++r) all[r] = 0.4;
  FailSlowPolicyInput in = SlowInput(layout, all);
  const FailSlowDecision opened = DecideFailSlow(in, kNow);
  REQUIRE(opened.findings.size() == 1);
  REQUIRE(opened.events.size() == 1);
  INFO(opened.events[0].message);
  CHECK(opened.events[0].message.find("job-wide: 8 of 8 ranks slowed together (median +40%), a change of the job") !=
        std::string::npos);
  CHECK(opened.events[0].message.find("on rank(s)") == std::string::npos);
  CHECK(opened.findings[0].detail.find("job-wide") == 0);
  CHECK(opened.mode_changes.size() == 4);  // profiled all the same: one slow rank delays all

  // Profiles where every member arrives together and no group is congested.
  in.findings = opened.findings;
  in.next_finding_id = opened.next_finding_id;
  for (AgentObservation& a : in.agents) a.nccl_profiling = true;
  AddProfiles(in.agents, layout, 12, -1, std::nullopt);
  const FailSlowDecision d = DecideFailSlow(in, kNow + kMs);
  const FailSlowFinding& f = d.findings.back();
  CHECK(f.kind == FailSlowKind::kUnlocalized);
  CHECK(f.machines.empty());
  CHECK(f.ranks.empty());
  CHECK(f.detail.find("job-wide, attributed to no rank or machine") != std::string::npos);
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].reason == "FailSlowJobWide");
  // Level-based: deciding again says nothing new.
  in.findings = d.findings;
  CHECK(DecideFailSlow(in, kNow + 2 * kMs).events.empty());

  SECTION("a rank that the profiles show holding the others back is still localized") {
    FailSlowPolicyInput late = SlowInput(layout, all);
    late.findings = opened.findings;
    late.next_finding_id = opened.next_finding_id;
    AddProfiles(late.agents, layout, 12, 6, std::nullopt);
    const FailSlowDecision l = DecideFailSlow(late, kNow + kMs);
    CHECK(l.findings.back().kind == FailSlowKind::kCompute);
    CHECK(l.findings.back().ranks == std::vector<int>{6});
  }
}

TEST_CASE("FailSlowPolicy: a minority of slow ranks is not job-wide", "[unit]") {
  const ParallelLayout layout = Layout();
  const FailSlowDecision d = DecideFailSlow(SlowInput(layout, {{2, 0.3}, {3, 0.3}}), kNow);
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].message.find("on rank(s) 2,3, verified change point") != std::string::npos);
  CHECK(d.events[0].message.find("job-wide") == std::string::npos);
}

TEST_CASE("FailSlowPolicy: a persistent straggler by the peer rule opens a finding without a change point when counted", "[unit]") {
  const ParallelLayout layout = Layout();
  std::vector<AgentObservation> agents = Agents(layout);
  auto set_times = [&](double rank5_seconds) {
    for (int r = 0; r < layout.world_size(); ++r) {
      agents[static_cast<size_t>(layout.MachineOf(r))].rank_iterations[r] =
          RankIterationObservation{100, r == 5 ? rank5_seconds : 0.100 + 0.0005 * (r % 3), 0};
    }
  };
  set_times(0.150);
  FailSlowPolicyInput in = Input(layout, agents);
  // By default stragglers are named only (one round's heartbeat means are not aligned by step).
  CHECK(DecideFailSlow(in, kNow).findings.empty());
  FailSlowPolicyInput with_change = in;
  MarkSlow(with_change.agents, layout, 2, 0.3);
  const FailSlowDecision named = DecideFailSlow(with_change, kNow);
  REQUIRE(named.events.size() == 1);
  CHECK(named.events[0].message.find("on rank(s) 2, verified change point; rank 5: iteration 150.0 ms") !=
        std::string::npos);
  FailSlowPolicyOptions counted;
  counted.peers.stragglers_are_slow = true;
  const FailSlowDecision d = DecideFailSlow(in, kNow, counted);
  REQUIRE(d.findings.size() == 1);
  const FailSlowFinding& f = d.findings[0];
  CHECK(f.onset == kNow);
  CHECK(f.severity == Approx(0.5).margin(0.02));
  CHECK(f.healthy_iteration_seconds == Approx(0.1005).margin(0.001));
  CHECK(f.detail.find("rank 5: iteration 150.0 ms") == 0);
  REQUIRE(d.events.size() == 1);
  CHECK(d.events[0].message.find("persistent straggler(s) by the peer rule: rank 5") != std::string::npos);
  CHECK(d.mode_changes.size() == 4);

  // 1.04x is within the rule's minimum excess: no finding; and when rank 5 is back with its
  // peers the open finding ends.
  set_times(0.104);
  CHECK(DecideFailSlow(Input(layout, agents), kNow, counted).findings.empty());
  FailSlowPolicyInput back = Input(layout, agents);
  back.findings = d.findings;
  back.next_finding_id = d.next_finding_id;
  const FailSlowDecision ended = DecideFailSlow(back, kNow + 1000 * kMs, counted);
  CHECK(ended.findings[0].state == FailSlowState::kRecovered);
}

}  // namespace
}  // namespace peregrine
