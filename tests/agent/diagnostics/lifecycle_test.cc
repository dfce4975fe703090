// What a diagnostic leaves behind: a timed-out diagnostic's processes are all killed, and an
// agent shutting down mid-diagnostic takes the helper and its processes with it.
#include <fstream>
#include <iterator>

#include "tests/agent/diagnostics/diagnostics_test_util.h"

namespace peregrine::diagtest {
namespace {

using ::peregrine::testing::DescendantGuard;
using ::peregrine::testing::Descendants;
using ::peregrine::testing::Eventually;

// Descendants of this test whose command line contains `needle`.
std::vector<pid_t> DescendantsRunning(const std::string& needle) {
  std::vector<pid_t> out;
  for (pid_t pid : Descendants()) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string stat;
    std::ifstream("/proc/" + std::to_string(pid) + "/stat") >> stat >> stat >> stat;  // state field
    if (cmdline.find(needle) != std::string::npos && stat != "Z") out.push_back(pid);
  }
  return out;
}

TEST_CASE("a timed-out diagnostic kills every process it started", "[e2e]") {
  RunningAgents agents({0});
  AgentCluster& cluster = agents.cluster;
  cluster.InjectRankFault(0, 1, HungGpu());
  v1::CommandResult r = cluster.Run(0, "hung-alignment", "alignment", {{"gpus", "3"}}, 2000);
  CHECK(r.status().code() == 0);
  CHECK_FALSE(r.diagnostic().passed());
  CHECK_THAT(r.diagnostic().detail(), Catch::StartsWith("alignment: timed out after 2000 ms"));
  CHECK(DescendantsRunning("sim-trainer").empty());
  CHECK(DescendantsRunning("peregrine-diagnose").empty());
  // The agent is still fine: the next diagnostic runs.
  REQUIRE(sim::ClearFaults(cluster.faults()).ok());
  CHECK(cluster.Run(0, "after", "alignment", {{"gpus", "3"}}).diagnostic().passed());
}

TEST_CASE("an agent shutting down mid-diagnostic takes the diagnostic's processes with it", "[e2e]") {
  DescendantGuard guard;
  TempDir dir;
  {
    AgentCluster cluster(dir.path());
    cluster.StartAgents({0});
    cluster.InjectRankFault(0, 0, HungGpu());
    REQUIRE(cluster.controller().Send(AgentCluster::Pod(0),
                                      AgentCluster::Command("long", "alignment", {{"gpus", "2"}}, 600000)));
    REQUIRE(Eventually([] { return DescendantsRunning("--reference-step").size() == 2; }));
    REQUIRE(DescendantsRunning("peregrine-diagnose").size() == 1);
  }  // SIGTERM to the agent; it exits and so does everything below it
  CHECK(Eventually([] { return DescendantsRunning("peregrine-").empty() && DescendantsRunning("sim-trainer").empty(); }));
}

}  // namespace
}  // namespace peregrine::diagtest
