// all_to_all, all_gather and alignment through real agents, peregrine-nccl-check and
// sim-trainer --reference-step over the stand-in NCCL, healthy and with one machine's GPU
// injected with corrupt or nan.
#include "agent/diagnostics/diagnostic_invocation.h"
#include "base/free_port.h"
#include "tests/agent/diagnostics/diagnostics_test_util.h"

namespace peregrine::diagtest {
namespace {

std::map<std::string, std::string> Merge(std::map<std::string, std::string> a,
                                         const std::map<std::string, std::string>& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

TEST_CASE("all_to_all: verified and timed on healthy machines, the corrupt GPU named", "[e2e]") {
  RunningAgents agents({0, 1});
  AgentCluster& cluster = agents.cluster;
  const std::map<int, std::map<std::string, std::string>> params = {
      {0, {{"gpus", "3"}, {"rank_base", "0"}, {"bytes", "65536"}}},
      {1, {{"gpus", "3"}, {"rank_base", "3"}, {"bytes", "65536"}}}};

  auto healthy = cluster.RunAll("healthy", "all_to_all", params);
  for (auto& [m, r] : healthy) {
    INFO("machine " << m << ": " << r.diagnostic().detail());
    CHECK(r.status().code() == 0);
    CHECK(r.diagnostic().passed());
    CHECK(r.diagnostic().figures().at("algbw_gbps") > 0);
    CHECK(r.diagnostic().figures().at("busbw_gbps") > 0);
    CHECK(r.diagnostic().failed_ranks_size() == 0);
  }

  cluster.InjectRankFault(1, 2, CorruptGpu());
  auto faulty = cluster.RunAll("corrupt", "all_to_all", params);
  CHECK(faulty[0].diagnostic().passed());
  CHECK_FALSE(faulty[1].diagnostic().passed());
  CHECK(FailedRanks(faulty[1].diagnostic()) == std::vector<uint32_t>{5});
  CHECK_THAT(faulty[1].diagnostic().detail(), Catch::Contains("contents from rank 2"));
  CHECK_THAT(faulty[1].diagnostic().detail(), Catch::Contains("arrived wrong"));

  cluster.InjectRankFault(1, 2, NanGpu());
  v1::CommandResult nan_result = cluster.Run(1, "nan", "all_to_all", params.at(1));
  CHECK_FALSE(nan_result.diagnostic().passed());
  CHECK(FailedRanks(nan_result.diagnostic()) == std::vector<uint32_t>{5});
  CHECK_THAT(nan_result.diagnostic().detail(), Catch::Contains("NaN"));
  REQUIRE(sim::ClearFaults(cluster.faults()).ok());

  // A bandwidth floor no machine reaches.
  v1::CommandResult slow = cluster.Run(0, "floor", "all_to_all", Merge(params.at(0), {{"min_gbps", "1000000"}}));
  CHECK_FALSE(slow.diagnostic().passed());
  CHECK_THAT(slow.diagnostic().detail(), Catch::Contains("below min_gbps"));
}

TEST_CASE("all_gather: a group of machines passes, a corrupt machine is named by its own agent", "[e2e]") {
  RunningAgents agents({0, 1, 2});
  AgentCluster& cluster = agents.cluster;
  auto group_params = [](int port) {
    std::map<int, std::map<std::string, std::string>> params;
    for (int m = 0; m < 3; ++m) {
      params[m] = {{"gpus", "2"},           {"rank_base", std::to_string(2 * m)}, {"master_addr", "127.0.0.1"},
                   {"master_port", std::to_string(port)}, {"machines", "3"}, {"machine_index", std::to_string(m)},
                   {"bytes", "32768"},      {"group", "dp0"}};
    }
    return params;
  };
  absl::StatusOr<int> port = PickFreePort();
  REQUIRE(port.ok());
  auto healthy = cluster.RunAll("healthy", "all_gather", group_params(*port));
  for (auto& [m, r] : healthy) {
    INFO("machine " << m << ": " << r.diagnostic().detail());
    CHECK(r.status().code() == 0);
    CHECK(r.diagnostic().passed());
    CHECK(r.diagnostic().figures().at("busbw_gbps") > 0);
  }

  cluster.InjectRankFault(2, 0, CorruptGpu());
  port = PickFreePort();
  REQUIRE(port.ok());
  auto faulty = cluster.RunAll("corrupt", "all_gather", group_params(*port));
  for (auto& [m, r] : faulty) {
    INFO("machine " << m << ": " << r.diagnostic().detail());
    CHECK_FALSE(r.diagnostic().passed());
    CHECK_THAT(r.diagnostic().detail(), Catch::Contains("group dp0"));
    CHECK_THAT(r.diagnostic().detail(), Catch::Contains("rank 4 (machine_index 2 gpu0)"));
  }
  CHECK(faulty[0].diagnostic().failed_ranks_size() == 0);
  CHECK(faulty[1].diagnostic().failed_ranks_size() == 0);
  CHECK(FailedRanks(faulty[2].diagnostic()) == std::vector<uint32_t>{4});
}

TEST_CASE("alignment: healthy machines agree bit for bit, corrupt and NaN machines differ", "[e2e]") {
  RunningAgents agents({0, 1, 2});
  AgentCluster& cluster = agents.cluster;
  const std::map<int, std::map<std::string, std::string>> params = {
      {0, {{"gpus", "2"}}}, {1, {{"gpus", "2"}}}, {2, {{"gpus", "2"}}}};
  auto healthy = cluster.RunAll("healthy", "alignment", params);
  for (auto& [m, r] : healthy) {
    INFO("machine " << m << ": " << r.diagnostic().detail());
    CHECK(r.status().code() == 0);
    CHECK(r.diagnostic().passed());
    CHECK(r.diagnostic().digest().size() == 16);
    CHECK(r.diagnostic().digest() == healthy[0].diagnostic().digest());
  }
  // Another seed is another reference.
  v1::CommandResult other = cluster.Run(0, "seed", "alignment", {{"gpus", "2"}, {"seed", "99"}});
  CHECK(other.diagnostic().passed());
  CHECK(other.diagnostic().digest() != healthy[0].diagnostic().digest());

  cluster.InjectRankFault(1, 1, CorruptGpu());
  cluster.InjectRankFault(2, 0, NanGpu());
  auto faulty = cluster.RunAll("faulty", "alignment", params);
  CHECK(faulty[0].diagnostic().passed());
  CHECK(faulty[0].diagnostic().digest() == healthy[0].diagnostic().digest());
  CHECK(faulty[1].diagnostic().passed());  // ran fine, but computed something else
  CHECK(faulty[1].diagnostic().digest() != healthy[0].diagnostic().digest());
  CHECK_FALSE(faulty[2].diagnostic().passed());
  CHECK_THAT(faulty[2].diagnostic().detail(), Catch::Contains("NaN"));
  CHECK(faulty[2].diagnostic().digest() != healthy[0].diagnostic().digest());
  CHECK(faulty[2].diagnostic().digest() != faulty[1].diagnostic().digest());
}

}  // namespace
}  // namespace peregrine::diagtest
