// replay through real agents holding a sim-trainer assignment: reduced layouts on groups of
// machines, equal digests for healthy groups of one shape, a different one for the group
// with a corrupt machine; the agent's own assignment gives the global ranks.
#include "agent/diagnostics/diagnostic_invocation.h"
#include "base/free_port.h"
#include "tests/agent/diagnostics/diagnostics_test_util.h"

namespace peregrine::diagtest {
namespace {

using ::peregrine::testing::DescendantGuard;

const std::vector<std::string> kCommand = {"sim-trainer", "--steps", "1000", "--hidden", "64", "--micro-batches", "4"};

// Two groups {0,1} and {2,3} of the same shape (tp 2 x pp 2: 4 ranks over 2 machines).
std::map<int, std::map<std::string, std::string>> TwoGroups(const std::map<std::string, std::string>& shape) {
  std::map<int, std::map<std::string, std::string>> params;
  for (int group = 0; group < 2; ++group) {
    absl::StatusOr<int> port = PickFreePort();
    REQUIRE(port.ok());
    for (int i = 0; i < 2; ++i) {
      std::map<std::string, std::string> p = shape;
      p["master_addr"] = "127.0.0.1";
      p["master_port"] = std::to_string(*port);
      p["machines"] = "2";
      p["machine_index"] = std::to_string(i);
      params[group * 2 + i] = p;
    }
  }
  return params;
}

TEST_CASE("replay: healthy groups of one shape agree, the group with a corrupt machine differs", "[e2e]") {
  DescendantGuard guard;
  TempDir dir;
  AgentCluster cluster(dir.path());
  for (int m = 0; m < 4; ++m) cluster.controller().SetAck(AgentCluster::Pod(m), ActiveAckHolding(m, 4, 2, kCommand));
  cluster.StartAgents({0, 1, 2, 3});
  const std::map<std::string, std::string> shape = {{"tp", "2"}, {"pp", "2"}, {"dp", "1"}, {"layers", "4"},
                                                    {"steps", "3"}, {"seed", "5"}};

  auto healthy = cluster.RunAll("healthy", "replay", TwoGroups(shape));
  for (auto& [m, r] : healthy) {
    INFO("machine " << m << ": " << r.status().message() << " " << r.diagnostic().detail());
    CHECK(r.status().code() == 0);
    CHECK(r.diagnostic().passed());
    CHECK(r.diagnostic().figures().at("steps") == 3);
    CHECK(r.diagnostic().digest() == healthy[0].diagnostic().digest());
  }

  // Another shape (more layers) replays a different model.
  std::map<std::string, std::string> deeper = shape;
  deeper["layers"] = "6";
  auto other = cluster.RunAll("deeper", "replay", TwoGroups(deeper));
  CHECK(other[0].diagnostic().passed());
  CHECK(other[0].diagnostic().digest() == other[3].diagnostic().digest());
  CHECK(other[0].diagnostic().digest() != healthy[0].diagnostic().digest());

  cluster.InjectRankFault(3, 1, CorruptGpu());
  auto faulty = cluster.RunAll("corrupt", "replay", TwoGroups(shape));
  CHECK(faulty[0].diagnostic().digest() == healthy[0].diagnostic().digest());
  CHECK(faulty[1].diagnostic().digest() == healthy[0].diagnostic().digest());
  CHECK(faulty[2].diagnostic().digest() != healthy[0].diagnostic().digest());
  CHECK(faulty[2].diagnostic().digest() == faulty[3].diagnostic().digest());

  cluster.InjectRankFault(3, 1, NanGpu());
  auto nan_run = cluster.RunAll("nan", "replay", TwoGroups(shape));
  CHECK(nan_run[0].diagnostic().passed());
  CHECK_FALSE(nan_run[2].diagnostic().passed());
  CHECK_THAT(nan_run[2].diagnostic().detail(), Catch::Contains("NaN"));

  // A layout that does not fit the group is refused, naming the param.
  v1::CommandResult bad = cluster.Run(0, "bad-layout", "replay",
                                      {{"master_addr", "127.0.0.1"}, {"master_port", "1"}, {"machines", "2"},
                                       {"machine_index", "0"}, {"tp", "2"}, {"pp", "1"}, {"dp", "1"}});
  CHECK(bad.status().code() == 3);
  CHECK_THAT(bad.status().message(), Catch::Contains("replay: param tp"));
}

TEST_CASE("replay without a training command, and failed ranks from the held assignment", "[e2e]") {
  DescendantGuard guard;
  TempDir dir;
  AgentCluster cluster(dir.path());
  cluster.controller().SetAck(AgentCluster::Pod(1), ActiveAckHolding(3, 4, 2, kCommand));
  cluster.StartAgents({0, 1});
  v1::CommandResult none = cluster.Run(0, "none", "replay",
                                       {{"master_addr", "127.0.0.1"}, {"master_port", "1"}, {"machines", "1"},
                                        {"machine_index", "0"}, {"tp", "1"}, {"pp", "1"}, {"dp", "1"}});
  CHECK(none.status().code() == 9);
  CHECK_THAT(none.status().message(), Catch::Contains("no assignment"));

  // Machine 1 holds slot 3 of a 2-GPU-per-machine job: its GPU 1 is global rank 7.
  cluster.InjectRankFault(1, 1, CorruptGpu());
  v1::CommandResult eud = cluster.Run(1, "eud", "eud");
  CHECK_FALSE(eud.diagnostic().passed());
  CHECK(FailedRanks(eud.diagnostic()) == std::vector<uint32_t>{7});
}

}  // namespace
}  // namespace peregrine::diagtest
