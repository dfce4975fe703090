// gemm and p2p_rounds (fail-slow validation) through real agents: the stand-in GPUs'
// GEMM throughput with one GPU slowed, and the O(1) link rounds with one slow link.
#include "agent/diagnostics/diagnostic_invocation.h"
#include "base/free_port.h"
#include "tests/agent/diagnostics/diagnostics_test_util.h"

namespace peregrine::diagtest {
namespace {

TEST_CASE("gemm: every stand-in GPU measured, the slowed GPU flagged", "[e2e]") {
  RunningAgents agents({0, 1});
  AgentCluster& cluster = agents.cluster;
  // The stand-in's time is CPU time, so other load on the machine does not skew the ratios;
  // min_ratio 0.5 against a 4x slowdown leaves a wide margin either way.
  const std::map<int, std::map<std::string, std::string>> params = {
      {0, {{"gpus", "3"}, {"rank_base", "0"}, {"size", "96"}, {"min_ratio", "0.5"}}},
      {1, {{"gpus", "3"}, {"rank_base", "3"}, {"size", "96"}, {"min_ratio", "0.5"}, {"dtype", "bf16"}}}};
  auto healthy = cluster.RunAll("healthy", "gemm", params);
  for (auto& [m, r] : healthy) {
    INFO("machine " << m << ": " << r.diagnostic().detail());
    CHECK(r.status().code() == 0);
    CHECK(r.diagnostic().passed());
    CHECK_FALSE(r.diagnostic().not_present());
    for (int g = 0; g < 3; ++g) CHECK(r.diagnostic().figures().at("gpu" + std::to_string(g) + "_tflops") > 0);
  }

  sim::RankFault slow;
  slow.compute_slowdown = 4;
  cluster.InjectRankFault(1, 2, slow);
  auto faulty = cluster.RunAll("slow", "gemm", params);
  CHECK(faulty[0].diagnostic().passed());
  CHECK_FALSE(faulty[1].diagnostic().passed());
  CHECK(FailedRanks(faulty[1].diagnostic()) == std::vector<uint32_t>{5});
  CHECK_THAT(faulty[1].diagnostic().detail(), Catch::Contains("gpu2: "));
  CHECK(faulty[1].diagnostic().figures().at("gpu2_tflops") < faulty[1].diagnostic().figures().at("gpu0_tflops"));
}

TEST_CASE("p2p_rounds: each machine reports the links it received on, a capped link stands out", "[e2e]") {
  RunningAgents agents({0, 1});
  AgentCluster& cluster = agents.cluster;
  // 4 communicator ranks: machine 0 holds 0 and 1, machine 1 holds 2 and 3; the ring's links
  // in two rounds.
  auto params = [](int port) {
    std::map<int, std::map<std::string, std::string>> p;
    for (int m = 0; m < 2; ++m) {
      p[m] = {{"gpus", "2"}, {"master_addr", "127.0.0.1"}, {"master_port", std::to_string(port)},
              {"ranks", "4"}, {"rank_base", std::to_string(2 * m)}, {"bytes", "65536"},
              {"rounds", "r0:0>1,2>3;r1:1>2,3>0"}};
    }
    return p;
  };
  absl::StatusOr<int> port = PickFreePort();
  REQUIRE(port.ok());
  auto healthy = cluster.RunAll("healthy", "p2p_rounds", params(*port));
  for (auto& [m, r] : healthy) {
    INFO("machine " << m << ": " << r.status().message() << r.diagnostic().detail());
    CHECK(r.status().code() == 0);
    CHECK(r.diagnostic().passed());
    CHECK(r.diagnostic().failed_ranks_size() == 0);
    CHECK(r.diagnostic().figures().size() == 2);
  }
  CHECK(healthy[0].diagnostic().figures().count("link_0_1_gbps") == 1);
  CHECK(healthy[0].diagnostic().figures().count("link_3_0_gbps") == 1);
  CHECK(healthy[1].diagnostic().figures().count("link_1_2_gbps") == 1);
  CHECK(healthy[1].diagnostic().figures().count("link_2_3_gbps") == 1);

  // Machine 0 -> machine 1 capped at 1 MB/s: the link 1>2 crosses it.
  sim::LinkFault cap;
  cap.bandwidth_bytes_per_s = 1e6;
  REQUIRE(sim::SetLinkFault(cluster.faults(), 0, 1, cap).ok());
  port = PickFreePort();
  REQUIRE(port.ok());
  auto slow = cluster.RunAll("capped", "p2p_rounds", params(*port));
  REQUIRE(slow[1].diagnostic().passed());
  const auto& f = slow[1].diagnostic().figures();
  CHECK(f.at("link_1_2_gbps") < 0.002);  // 65536 bytes at 1 MB/s take at least 65 ms
  CHECK(f.at("link_1_2_gbps") < f.at("link_2_3_gbps"));
}

}  // namespace
}  // namespace peregrine::diagtest
