// eud through real agents: the stand-in GPU self-test with injected faults, dcgmi's JSON
// (a dcgmi on the PATH printing a real-format document), not_present, invalid commands,
// idempotency by id, one diagnostic at a time and the timeout.
#include <fstream>

#include "tests/agent/diagnostics/diagnostics_test_util.h"

namespace peregrine::diagtest {
namespace {

using ::peregrine::testing::DescendantGuard;

TEST_CASE("eud: stand-in self-test passes on healthy GPUs and names the faulty one", "[e2e]") {
  RunningAgents agents({0, 1});
  AgentCluster& cluster = agents.cluster;
  const std::map<std::string, std::string> two_gpus = {{"gpus", "2"}, {"rank_base", "2"}};

  // Healthy.
  for (int m : {0, 1}) {
    v1::CommandResult r = cluster.Run(m, "healthy-" + std::to_string(m), "eud", two_gpus);
    CHECK(r.status().code() == 0);
    REQUIRE(r.has_diagnostic());
    CHECK(r.diagnostic().kind() == "eud");
    CHECK(r.diagnostic().passed());
    CHECK_FALSE(r.diagnostic().not_present());
    CHECK(r.diagnostic().machine_id() == std::to_string(m));
    CHECK(r.diagnostic().figures().at("gpu1_compute_slowdown") == 1.0);
    // The stand-in is an oracle of the injected faults, and says so.
    CHECK(r.diagnostic().figures().at("standin") == 1.0);
    CHECK(r.diagnostic().detail() == "every GPU passed [stand-in self-test: an oracle of the injected faults]");
    CHECK(r.diagnostic().failed_ranks_size() == 0);
    CHECK(r.diagnostic().seconds() > 0);
  }

  // Corrupt GPU 1 of machine 1 (slowed too): only that GPU fails.
  sim::RankFault corrupt = CorruptGpu();
  corrupt.compute_slowdown = 2.5;
  cluster.InjectRankFault(1, 1, corrupt);
  v1::CommandResult bad = cluster.Run(1, "corrupt", "eud", two_gpus);
  CHECK(bad.status().code() == 0);
  CHECK_FALSE(bad.diagnostic().passed());
  CHECK(bad.diagnostic().detail() ==
        "gpu1: reference GEMM digest differs (wrong values) [stand-in self-test: an oracle of the injected faults]");
  CHECK(FailedRanks(bad.diagnostic()) == std::vector<uint32_t>{3});
  CHECK(bad.diagnostic().figures().at("gpu1_compute_slowdown") == 2.5);
  CHECK(cluster.Run(0, "corrupt-other", "eud", two_gpus).diagnostic().passed());

  // The same id again: the stored result, not a new run (the fault is gone by now).
  REQUIRE(sim::ClearFaults(cluster.faults()).ok());
  REQUIRE(cluster.controller().Send(AgentCluster::Pod(1), AgentCluster::Command("corrupt", "eud", two_gpus, 0)));
  auto again = cluster.controller().WaitResult("corrupt", 1);
  REQUIRE(again.has_value());
  CHECK(again->finished_at() == bad.finished_at());
  CHECK_FALSE(again->diagnostic().passed());

  // NaN on the whole of machine 0.
  cluster.InjectRankFault(0, -1, NanGpu());
  v1::CommandResult nan_result = cluster.Run(0, "nan", "eud", {{"gpus", "2"}});
  CHECK_FALSE(nan_result.diagnostic().passed());
  CHECK(nan_result.diagnostic().detail() ==
        "gpu0: reference GEMM digest differs (NaN); gpu1: reference GEMM digest differs (NaN) "
        "[stand-in self-test: an oracle of the injected faults]");
  CHECK(FailedRanks(nan_result.diagnostic()) == std::vector<uint32_t>{0, 1});
  REQUIRE(sim::ClearFaults(cluster.faults()).ok());

  // A hung GPU: the diagnostic times out; a second one sent meanwhile waits for it.
  cluster.InjectRankFault(1, 0, HungGpu());
  REQUIRE(cluster.controller().Send(AgentCluster::Pod(1), AgentCluster::Command("hung", "eud", two_gpus, 1500)));
  REQUIRE(cluster.controller().Send(AgentCluster::Pod(1), AgentCluster::Command("after-hung", "eud", two_gpus, 0)));
  auto hung = cluster.controller().WaitResult("hung");
  REQUIRE(hung.has_value());
  CHECK(hung->status().code() == 0);
  CHECK_FALSE(hung->diagnostic().passed());
  CHECK_THAT(hung->diagnostic().detail(), Catch::StartsWith("timed out after 1500 ms"));
  CHECK_THAT(hung->diagnostic().detail(), Catch::Contains("gpu0"));
  CHECK(FailedRanks(hung->diagnostic()) == std::vector<uint32_t>{2});
  REQUIRE(sim::ClearFaults(cluster.faults()).ok());
  auto after = cluster.controller().WaitResult("after-hung");
  REQUIRE(after.has_value());
  CHECK(after->finished_at() > hung->finished_at());
}

TEST_CASE("eud: dcgmi JSON when dcgmi is installed, not_present without it or the stand-in", "[e2e]") {
  DescendantGuard guard;
  TempDir dir;
  const std::string tools = dir.path() + "/dcgm-bin";
  std::filesystem::create_directories(tools);
  {
    // A dcgmi that prints what DCGM 4.x prints for a GPU failing its software check.
    std::ofstream script(tools + "/dcgmi");
    script << "#!/bin/sh\n"
              "[ \"$*\" = \"diag -r 2 -j\" ] || { echo \"unexpected args: $*\"; exit 64; }\n"
              "cat <<'JSON'\n"
              R"({"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [)"
              R"({"name": "software", "results": [{"entity_group": "GPU", "entity_id": 0, "status": "Pass"},)"
              R"({"entity_group": "GPU", "entity_id": 1, "status": "Fail", "warnings": [{"error_id": 29,)"
              R"("warning": "Persistence mode for GPU 1 is disabled."}]}], "test_summary": {"status": "Fail"}}]}]},)"
              R"("metadata": {"version": "4.2.3"}})"
              "\nJSON\nexit 226\n";
  }
  std::filesystem::permissions(tools + "/dcgmi", std::filesystem::perms::owner_all);
  AgentCluster cluster(dir.path());
  const char* path = std::getenv("PATH");
  cluster.StartAgents({4, 5}, {{4, {{"PATH", tools + ":" + std::string(PEREGRINE_BINARY_DIR) + "/bin:" + path}}},
                               {5, {{"PEREGRINE_SIM_FAULTS", ""}, {"PEREGRINE_STANDIN_DEVICE", ""}}}});

  v1::CommandResult r = cluster.Run(4, "dcgm", "eud", {{"level", "2"}, {"gpus", "2"}, {"rank_base", "6"}});
  CHECK(r.status().code() == 0);
  CHECK_FALSE(r.diagnostic().passed());
  CHECK_FALSE(r.diagnostic().not_present());
  CHECK(FailedRanks(r.diagnostic()) == std::vector<uint32_t>{7});
  CHECK_THAT(r.diagnostic().detail(), Catch::Contains("gpu1: software failed (Persistence mode for GPU 1"));
  CHECK(r.diagnostic().figures().at("tests") == 1);

  v1::CommandResult absent = cluster.Run(5, "absent", "eud");
  CHECK(absent.status().code() == 0);
  CHECK(absent.diagnostic().not_present());
  CHECK(absent.diagnostic().passed());
}

TEST_CASE("unknown kinds and malformed params are INVALID_ARGUMENT naming them", "[e2e]") {
  RunningAgents agents({0});
  AgentCluster& cluster = agents.cluster;
  v1::CommandResult unknown = cluster.Run(0, "u", "fsck");
  CHECK(unknown.status().code() == 3);
  CHECK_THAT(unknown.status().message(), Catch::Contains("unknown diagnostic kind \"fsck\""));
  CHECK_FALSE(unknown.has_diagnostic());
  v1::CommandResult level = cluster.Run(0, "l", "eud", {{"level", "nine"}});
  CHECK(level.status().code() == 3);
  CHECK_THAT(level.status().message(), Catch::Contains("eud: param level"));
  v1::CommandResult gpus = cluster.Run(0, "g", "eud", {{"gpus", "0"}});
  CHECK(gpus.status().code() == 3);
  CHECK_THAT(gpus.status().message(), Catch::Contains("eud: param gpus"));
}

}  // namespace
}  // namespace peregrine::diagtest
