// peregrinectl analyze on traces captured from a real GPU run (testdata/h200_pytorch2.11:
// PyTorch 2.11 and NCCL 2.28.9 on an H200, one rank; see the README there). The other
// fixtures follow the published formats; these are what the current releases really write.
#include <string>

#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;

std::string Real(const std::string& name) { return analyze_test::Fixture("h200_pytorch2.11/" + name); }

TEST_CASE("analyze on real GPU traces: NCCL 2.28 debug log of PyTorch 2.11", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Real("nccl_debug_rank0.log"), "--json"}).Json();
  CHECK(j["format"] == "nccl-debug-log");
  REQUIRE(j["streams"].size() == 1);
  const nlohmann::json& s = j["streams"][0];
  CHECK(s["rank"] == 0);
  // 10 rounds of all_reduce, broadcast, all_gather, reduce_scatter and barrier (an
  // all_reduce of one element; the reduce_scatter of one rank never reaches NCCL's log),
  // then 4 profiled steps of all_reduce and all_gather: 40 + 8 calls. INIT lines are not calls.
  CHECK(s["calls"] == 48);
  CHECK(s["period"] == 4);
  CHECK(s["iterationSource"] == "NCCL call timestamps");
  CHECK(s["pattern"][0].get<std::string>().rfind("AllReduce comm=", 0) == 0);
  CHECK(s["pattern"][3].get<std::string>().find("count=1 ") != std::string::npos);
}

TEST_CASE("analyze on real GPU traces: torch.profiler trace with CUDA kernels, gzip", "[unit]") {
  const nlohmann::json j = Analyze({"nccl", Real("kineto_rank0.json.gz"), "--json"}).Json();
  CHECK(j["format"] == "kineto-trace");
  REQUIRE(j["streams"].size() == 1);
  const nlohmann::json& s = j["streams"][0];
  CHECK(s["calls"] == 8);  // 4 ProfilerSteps of one all_reduce and one all_gather
  CHECK(s["period"] == 2);
  CHECK(s["iterationSource"] == "ProfilerStep annotations");
  CHECK(s["pattern"][0].get<std::string>().rfind("AllReduce", 0) == 0);
  CHECK(s["pattern"][1].get<std::string>().rfind("AllGather", 0) == 0);
}

TEST_CASE("analyze on real GPU traces: the flight recorder dump PyTorch 2.11 writes", "[unit]") {
  testing::TempDir dir;
  testing::WriteFile(dir.Path("rank0.pkl"), testing::ReadFile(Real("fr_rank0.pkl")));
  const nlohmann::json j = Analyze({"fr", dir.path(), "--json"}).Json();
  REQUIRE(j["dumps"].size() == 1);
  const nlohmann::json& d = j["dumps"][0];
  CHECK(d["version"] == "2.10");
  CHECK(d["commLibVersion"] == "2.28.9");
  CHECK(d["entries"] == 50);
  CHECK(d["skippedEntries"] == 0);
  REQUIRE(j["groups"].size() == 1);
  const nlohmann::json& g = j["groups"][0];
  CHECK(g["desc"] == "default_pg");
  CHECK(g["verdict"] == "healthy");
  CHECK(g["rankStates"][0]["lastSeq"] == 50);
  CHECK(g["rankStates"][0]["lastOp"] == "nccl:all_reduce_barrier");
  CHECK(g["rankStates"][0]["lastState"] == "completed");
}

TEST_CASE("analyze on real GPU traces: the dump the NCCL watchdog wrote on a collective timeout", "[unit]") {
  // PyTorch's own file name (TORCH_NCCL_DEBUG_INFO_TEMP_FILE's default prefix + rank).
  const nlohmann::json j = Analyze({"fr", Real("watchdog_timeout"), "--json"}).Json();
  REQUIRE(j["dumps"].size() == 1);
  CHECK(j["dumps"][0]["rank"] == 0);
  CHECK(j["dumps"][0]["entries"] == 11);
  REQUIRE(j["groups"].size() == 1);
  const nlohmann::json& g = j["groups"][0];
  CHECK(g["verdict"] == "all-stuck");
  REQUIRE(g["stuckCollective"].is_object());
  CHECK(g["stuckCollective"].dump().find("nccl:all_reduce") != std::string::npos);
  CHECK(g["waitingRanks"] == nlohmann::json::array({0}));
  CHECK(g["rankStates"][0]["lastSeq"] == 11);
  CHECK(g["rankStates"][0]["lastState"] == "scheduled");
}

}  // namespace
}  // namespace peregrine
