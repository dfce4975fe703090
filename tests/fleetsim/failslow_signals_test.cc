// The simulated agents' fail-slow signals: comm profiles, replica speeds and the
// validation's oracle diagnostics.
#include "fleetsim/failslow_signals.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace peregrine::fleetsim {
namespace {

// 4 machines x 4 GPUs: TP 4 inside a machine, PP 2, DP 2.
ParallelLayout Layout() { return *ParallelLayout::Create(4, 2, 2, 4); }

int64_t Stay(const CollectiveObservation& c) { return c.exit - c.enter; }

// rank -> (comm id, sequence, op, peer) -> time spent.
std::map<int, std::map<std::string, int64_t>> Stays(const std::vector<std::vector<CommProfileObservation>>& slots) {
  std::map<int, std::map<std::string, int64_t>> out;
  for (const auto& slot : slots) {
    for (const CommProfileObservation& p : slot) {
      for (const CollectiveObservation& c : p.collectives) {
        // A send and the matching recv share the key (the same exchange).
        const int a = c.op == "recv" ? c.peer : p.rank_in_comm;
        const int b = c.op == "recv" ? p.rank_in_comm : c.peer;
        out[p.global_rank][std::to_string(p.comm_id) + "/" + std::to_string(c.sequence) + "/" + std::to_string(a) +
                           ">" + std::to_string(b)] = Stay(c);
      }
    }
  }
  return out;
}

TEST_CASE("profiles: every rank reports each of its communicators and a slow GPU's rank arrives last in all of them", "[unit]") {
  const ParallelLayout layout = Layout();
  std::vector<SlotSlowState> slots(4);
  slots[2].slow_gpu = 1;  // rank 9
  slots[2].compute = 0.5;
  const FailSlowSignalOptions options;
  const auto profiles = SynthesizeCommProfiles(layout, slots, {}, 10, options);
  REQUIRE(profiles.size() == 4);
  for (const auto& slot : profiles) {
    CHECK(slot.size() == 4 * 3);  // 4 ranks x (TP, PP, DP)
    for (const CommProfileObservation& p : slot) {
      CHECK(p.comm_id != 0);
      CHECK(p.comm_size >= 2);
      CHECK(p.collectives.size() >= static_cast<size_t>(options.collectives));
    }
  }
  // In every collective of rank 9, it stays the shortest (the others wait for it).
  const auto stays = Stays(profiles);
  int compared = 0;
  for (const auto& [key, mine] : stays.at(9)) {
    for (const auto& [rank, theirs] : stays) {
      if (rank == 9 || !theirs.count(key)) continue;
      CHECK(mine < theirs.at(key));
      ++compared;
    }
  }
  CHECK(compared > 0);
}

TEST_CASE("profiles: a congested machine's data-parallel groups transfer slower, no rank is late", "[unit]") {
  const ParallelLayout layout = Layout();
  std::vector<SlotSlowState> healthy(4);
  std::vector<SlotSlowState> slots(4);
  slots[1].link = 0.4;
  const auto base = SynthesizeCommProfiles(layout, healthy, {}, 10, {});
  const auto slow = SynthesizeCommProfiles(layout, slots, {}, 10, {});
  // Rank 4 (machine 1): its DP group's shortest stay (the transfer) grows by 0.4 x the
  // step; a rank whose DP group has no member on machine 1 sees no change.
  auto dp_min = [](const std::vector<std::vector<CommProfileObservation>>& p, int rank) {
    int64_t best = INT64_MAX;
    for (const CommProfileObservation& x : p[static_cast<size_t>(rank / 4)]) {
      if (x.global_rank != rank || (x.comm_id >> 32) != 3) continue;  // DP
      for (const CollectiveObservation& c : x.collectives) best = std::min(best, Stay(c));
    }
    return best;
  };
  CHECK(dp_min(slow, 4) - dp_min(base, 4) == Approx(4e9).epsilon(0.01));
  int other = -1;
  for (int r = 0; r < layout.world_size() && other < 0; ++r) {
    const CommGroup g = layout.Group(GroupKind::kData, layout.GroupIndexOf(GroupKind::kData, r));
    if (std::none_of(g.ranks.begin(), g.ranks.end(), [&](int x) { return layout.MachineOf(x) == 1; })) other = r;
  }
  REQUIRE(other >= 0);
  CHECK(dp_min(slow, other) == dp_min(base, other));
}

TEST_CASE("replica step factors: the slowest GPU sets its replica, a plan moves the load", "[unit]") {
  const ParallelLayout layout = Layout();  // replica of rank r: its dp coordinate
  std::vector<SlotSlowState> slots(4);
  slots[0].compute = 0.5;
  slots[0].slow_gpu = 0;
  const FailSlowSignalOptions options;  // 16 micro-batches a replica
  const std::vector<double> even = ReplicaStepFactors(layout, slots, {}, options);
  REQUIRE(even.size() == 2);
  const int slow_replica = layout.Coordinates(0).dp;
  CHECK(even[static_cast<size_t>(slow_replica)] == Approx(1.5));
  CHECK(even[static_cast<size_t>(1 - slow_replica)] == Approx(1.0));
  CHECK(JobSlowdown(even, slots) == Approx(0.5));
  std::vector<uint32_t> plan(2, 19);
  plan[static_cast<size_t>(slow_replica)] = 13;
  const std::vector<double> planned = ReplicaStepFactors(layout, slots, plan, options);
  CHECK(JobSlowdown(planned, slots) == Approx(19.5 / 16 - 1));
  slots[3].link = 0.4;  // a congested link is not helped by the plan
  CHECK(JobSlowdown(planned, slots) == Approx(0.4));
}

TEST_CASE("validation oracle: GEMM names the slow GPU and the link rounds the congested machine's links", "[unit]") {
  const ParallelLayout layout = Layout();
  std::vector<SlotSlowState> slots(4);
  slots[1].slow_gpu = 2;
  slots[1].compute = 0.25;
  slots[3].link = 0.5;
  const FailSlowSignalOptions options;
  const DiagnosticOutcome gemm = SimulatedGemm(slots[1], 4, options);
  CHECK(gemm.passed);
  CHECK(gemm.figures.at("gpu0_tflops") == options.gemm_tflops);
  CHECK(gemm.figures.at("gpu2_tflops") == Approx(options.gemm_tflops / 1.25));
  CHECK(gemm.detail.find("oracle") != std::string::npos);

  LinkRoundsCache cache;
  const auto& links = cache.Links("r0:12>4,4>12,0>1,bad,5>x;r1:1>0,4>5");
  CHECK(links == std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {4, 5}, {4, 12}, {12, 4}});
  const DiagnosticOutcome m1 = SimulatedLinkRounds(layout, 1, slots, links, options);
  CHECK(m1.figures.size() == 2);  // the links machine 1 (ranks 4..7) sends on
  CHECK(m1.figures.at("link_4_5_gbps") == options.intra_link_gbps);
  CHECK(m1.figures.at("link_4_12_gbps") == Approx(options.inter_link_gbps / (1 + 0.5 / options.dp_transfer_fraction)));
  const DiagnosticOutcome m0 = SimulatedLinkRounds(layout, 0, slots, links, options);
  CHECK(m0.figures.at("link_0_1_gbps") == options.intra_link_gbps);
  CHECK(SimulatedLinkRounds(layout, 9, slots, links, options).figures.empty());  // no such slot
}

TEST_CASE("tracking latency: the detector's iterations at the slowed step plus a heartbeat", "[unit]") {
  const FailSlowSignalOptions options;
  CHECK(TrackingLatencySeconds(options, 10, 0.5) == Approx(8 * 15 + 1));
  CHECK(TrackingLatencySeconds(options, 10, 0) == Approx(81));
}

}  // namespace
}  // namespace peregrine::fleetsim
