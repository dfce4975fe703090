// Point-to-point matching in the fail-slow policy: pipeline send/recv between 4 stages,
// issued as grouped batches (batch_isend_irecv) in a different order on every stage, so
// that per-communicator call numbers differ between ranks. Each send pairs with its
// peer's recv by (sender, receiver, n-th between them); a congested pipeline group is
// named, its healthy twin is not.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "controller/core/failslow_policy.h"
#include "tests/controller/core/failslow_fixtures.h"

namespace peregrine {
namespace {

using testing::Layout;

struct Profiles {
  // (global rank, comm id) -> profile
  std::map<std::pair<int, uint64_t>, CommProfileObservation> by_rank_comm;
  CommProfileObservation& Of(int rank, uint64_t comm, int rank_in_comm, int size) {
    CommProfileObservation& p = by_rank_comm[{rank, comm}];
    p.comm_id = comm;
    p.global_rank = rank;
    p.rank_in_comm = rank_in_comm;
    p.comm_size = size;
    return p;
  }
};

// Each host's clock is offset from the others by rank * 3 ms (only durations count).
int64_t Clock(int rank) { return kNow - 60'000 * kMs + rank * 3 * kMs; }

TEST_CASE("FailSlowPolicy pairs pipeline sends with their recvs across 4 stages and grouped batches", "[unit]") {
  const ParallelLayout layout = Layout(/*t=*/1, /*p=*/4, /*d=*/2, /*g=*/2);
  constexpr int kIterations = 12;
  const int congested_pp = 1;
  Profiles profiles;
  std::map<int, std::map<int, uint64_t>> sends_between;  // (sender, receiver) in comm -> count
  for (const CommGroup& g : layout.Groups(GroupKind::kPipeline)) {
    const uint64_t comm = 500 + static_cast<uint64_t>(g.index);
    const int n = static_cast<int>(g.ranks.size());
    REQUIRE(n == 4);
    std::map<std::pair<int, int>, uint64_t> pair_seq;
    const int64_t transfer = (g.index == congested_pp ? 5 : 1) * kMs;
    for (int it = 0; it < kIterations; ++it) {
      // Forward activations s -> s+1, then gradients s+1 -> s; a receiver arrives 2 ms
      // before its sender and waits. Each stage issues its batch in its own order.
      for (int dir = 0; dir < 2; ++dir) {
        for (int s = 0; s + 1 < n; ++s) {
          const int from = dir == 0 ? s : s + 1;
          const int to = dir == 0 ? s + 1 : s;
          const uint64_t k = pair_seq[{from, to}]++;
          const int64_t t = static_cast<int64_t>(it) * 100 * kMs + (dir * 10 + s) * 7 * kMs;
          const int sender = g.ranks[static_cast<size_t>(from)];
          const int receiver = g.ranks[static_cast<size_t>(to)];
          profiles.Of(sender, comm, from, n)
              .collectives.push_back({k, "send", Clock(sender) + t, Clock(sender) + t + transfer, to});
          profiles.Of(receiver, comm, to, n)
              .collectives.push_back(
                  {k, "recv", Clock(receiver) + t - 2 * kMs, Clock(receiver) + t + transfer, from});
        }
      }
    }
    // Reverse the order of every odd stage's records: the calls' order on a rank does
    // not matter, only (peer, n-th with that peer).
    for (int s = 1; s < n; s += 2) {
      auto& c = profiles.Of(g.ranks[static_cast<size_t>(s)], comm, s, n).collectives;
      std::reverse(c.begin(), c.end());
    }
  }
  // Data-parallel all-reduces (2 ranks each), everyone on time.
  for (const CommGroup& g : layout.Groups(GroupKind::kData)) {
    const uint64_t comm = 600 + static_cast<uint64_t>(g.index);
    for (size_t m = 0; m < g.ranks.size(); ++m) {
      for (int it = 0; it < kIterations; ++it) {
        const int64_t t = static_cast<int64_t>(it) * 100 * kMs + 90 * kMs;
        profiles.Of(g.ranks[m], comm, static_cast<int>(m), static_cast<int>(g.ranks.size()))
            .collectives.push_back({static_cast<uint64_t>(it), "allreduce", Clock(g.ranks[m]) + t,
                                    Clock(g.ranks[m]) + t + 3 * kMs, -1});
      }
    }
  }

  FailSlowPolicyInput in = Input(layout, Agents(layout));
  for (AgentObservation& a : in.agents) a.nccl_profiling = true;
  const CommGroup slow = layout.Group(GroupKind::kPipeline, congested_pp);
  MarkSlow(in.agents, layout, slow.ranks[0], 0.4, kNow - 3000 * kMs);
  for (auto& [key, p] : profiles.by_rank_comm) {
    in.agents[static_cast<size_t>(layout.MachineOf(key.first))].comm_profiles.push_back(p);
  }

  FailSlowDecision d = DecideFailSlow(in, kNow);
  REQUIRE(d.findings.size() == 1);
  const FailSlowFinding& f = d.findings[0];
  INFO(f.detail);
  CHECK(f.state == FailSlowState::kLocalized);
  CHECK(f.kind == FailSlowKind::kCommunication);
  CHECK(f.group == "pp 1");
  std::vector<int> ranks = slow.ranks;
  std::sort(ranks.begin(), ranks.end());
  CHECK(f.ranks == ranks);
  // The transfer is the pair's shortest stay (the sender's, 5 ms), not the receiver's wait.
  CHECK(f.detail.find("transfer 5.00 ms = 5.00x") != std::string::npos);
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

TEST_CASE("FailSlowPolicy ends a finding at the recovery onset the agents reported", "[unit]") {
  const ParallelLayout layout = Layout(/*t=*/2, /*p=*/1, /*d=*/2, /*g=*/2);
  FailSlowPolicyInput in = Input(layout, Agents(layout));
  REQUIRE(layout.MachineOf(2) == 1);
  MarkSlow(in.agents, layout, 2, 0.5, kNow - 60'000 * kMs);
  FailSlowDecision opened = DecideFailSlow(in, kNow - 50'000 * kMs);
  REQUIRE(opened.findings.size() == 1);
  in.findings = opened.findings;
  in.next_finding_id = opened.next_finding_id;

  struct Case {
    const char* name;
    int64_t reported_end;
    int64_t want_end;
  };
  const Case cases[] = {
      {"reported onset", kNow - 20'000 * kMs, kNow - 20'000 * kMs},
      {"none reported", 0, kNow},
      {"before the onset (bad input)", kNow - 70'000 * kMs, kNow},
      {"in the future (bad input)", kNow + 1, kNow},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    FailSlowPolicyInput recovered = in;
    RankFailSlowObservation& r = recovered.agents[1].fail_slow[2];
    r.slow = false;
    r.ended_at = c.reported_end;
    FailSlowDecision d = DecideFailSlow(recovered, kNow);
    REQUIRE(d.findings.size() == 1);
    CHECK(d.findings[0].state == FailSlowState::kRecovered);
    CHECK(d.findings[0].ended_at == c.want_end);
  }
}

}  // namespace
}  // namespace peregrine
