// LocalNodeHealth with the real peregrine-diagnose on the stand-in device: evicted local
// machines are swept (GEMM and EUD self-test processes for that machine id, faults from a
// real fault table), returned to the LocalCluster's pool, or retired; the records survive
// a restart through <state_dir>/node-health.json. Time is a ManualClock (the back-offs);
// the sweeps' processes run for real.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "controller/local/local_cluster.h"
#include "controller/local/local_node_health.h"
#include "sim/fault/fault_control.h"
#include "tests/testing/eventually.h"
#include "tests/testing/files.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using testing::BinaryPath;
using testing::TempDir;

struct Env {
  Env() {
    REQUIRE(sim::CreateFaultTable(faults).ok());
    options.state_dir = dir.path();
    options.diagnose_binary = BinaryPath("bin/peregrine-diagnose");
    options.env = {{"PEREGRINE_SIM_FAULTS", faults},
                   {"PEREGRINE_STANDIN_DEVICE", BinaryPath("lib/sim/libperegrine_sim_device.so")}};
    options.gpus_per_machine = 2;
    options.clock = &clock;
    options.on_returned = [this](const std::string& m) { returned.push_back(m); };
    Open();
  }
  void Open() {
    auto created = LocalNodeHealth::Create(options);
    INFO(created.status().ToString());
    REQUIRE(created.ok());
    health = std::move(*created);
  }
  NodeHealthRecord Record(const std::string& machine) {
    for (const NodeHealthRecord& r : health->Records()) {
      if (r.node == machine) return r;
    }
    return NodeHealthRecord{};
  }
  std::string EventsLog() { return testing::ReadFileIfExists(dir.path() + "/events.log"); }

  TempDir dir;
  std::string faults = dir.path() + "/faults";
  ManualClock clock;
  LocalNodeHealthOptions options;
  std::vector<std::string> returned;
  std::unique_ptr<LocalNodeHealth> health;
};

TEST_CASE("local node health: an evicted machine is swept with peregrine-diagnose and returns to the pool as a free machine", "[integration]") {
  testing::DescendantGuard guard;
  Env env;
  LocalClusterOptions copts;
  copts.state_dir = env.dir.path() + "/cluster";
  copts.agent_binary = BinaryPath("bin/peregrine-agent");
  copts.controller_address = "127.0.0.1:1";
  auto cluster = LocalCluster::Create(copts);
  REQUIRE(cluster.ok());
  LocalCluster* c = cluster->get();
  // The cluster takes the machine back when node health returns it.
  env.options.on_returned = [c](const std::string& m) { REQUIRE(c->ReturnMachine(m).ok()); };
  env.Open();
  (*cluster)->SetNodeHealth(env.health.get());

  REQUIRE((*cluster)->QuarantineMachine("3", "machine 3 (slot 1, pod demo-m1-0): pod failed").ok());
  CHECK(env.Record("3").state == NodeHealth::kQuarantined);
  CHECK((*cluster)->QuarantinedMachines() == std::vector<std::string>{"3"});

  REQUIRE(env.health->Pass().ok());  // the sweep runs here, for real
  const NodeHealthRecord r = env.Record("3");
  INFO(r.reason);
  CHECK(r.state == NodeHealth::kHealthy);
  CHECK(r.sweep_attempts == 1);
  CHECK((*cluster)->QuarantinedMachines().empty());
  CHECK((*cluster)->FreeMachines() == std::vector<std::string>{"3"});
  const std::string log = env.EventsLog();
  CHECK_THAT(log, Catch::Contains("machine 3 Warning NodeQuarantined") && Catch::Contains("NodeSweepStarted") &&
                      Catch::Contains("machine 3 Normal NodeHealthy"));
  // The free list survives a restart of the cluster.
  cluster->reset();
  auto again = LocalCluster::Create(copts);
  REQUIRE(again.ok());
  CHECK((*again)->FreeMachines() == std::vector<std::string>{"3"});
}

TEST_CASE("local node health: a machine whose GPU computes NaN fails its sweeps and is retired, never returned", "[integration]") {
  testing::DescendantGuard guard;
  Env env;
  sim::RankFault nan;
  nan.nan = true;
  REQUIRE(sim::SetRankFault(env.faults, 4, 1, nan).ok());
  REQUIRE(env.health->Quarantine("4", "machine 4 (slot 0, pod demo-m0-0): inspection xid 79").ok());
  REQUIRE(env.health->Pass().ok());
  NodeHealthRecord r = env.Record("4");
  CHECK(r.state == NodeHealth::kQuarantined);
  CHECK_THAT(r.reason, Catch::Contains("gpu1") && Catch::Contains("NaN"));
  CHECK(r.failures.size() == 2);  // the eviction and the failed sweep
  // Within the back-off nothing runs; after it the second sweep fails too: retired.
  REQUIRE(env.health->Pass().ok());
  CHECK(env.Record("4").sweep_attempts == 1);
  env.clock.Advance(absl::Hours(1));
  REQUIRE(env.health->Pass().ok());
  r = env.Record("4");
  CHECK(r.state == NodeHealth::kRetired);
  CHECK(r.sweep_attempts == 2);
  env.clock.Advance(absl::Hours(24 * 8));
  REQUIRE(env.health->Pass().ok());
  CHECK(env.Record("4").state == NodeHealth::kRetired);
  CHECK(env.returned.empty());
  CHECK_THAT(env.EventsLog(), Catch::Contains("machine 4 Warning NodeRetired"));
}

TEST_CASE("local node health: an over-evicted machine gets a short sweep, no failure counted, and returns", "[integration]") {
  testing::DescendantGuard guard;
  Env env;
  REQUIRE(env.health
              ->Quarantine("5", "hang: stack aggregation (investigation 1): pp 0 over-evicted (machines 5, 6); "
                                "machine 5 (slot 0, pod demo-m0-0): in the group stack aggregation over-evicts; "
                                "machine 6 (slot 2, pod demo-m2-0): in the group stack aggregation over-evicts")
              .ok());
  NodeHealthRecord r = env.Record("5");
  CHECK(r.sweep_kind == SweepKind::kShort);
  CHECK(r.failures.empty());
  REQUIRE(env.health->Pass().ok());
  CHECK(env.Record("5").state == NodeHealth::kHealthy);
  CHECK(env.returned == std::vector<std::string>{"5"});
  CHECK_THAT(env.EventsLog(), Catch::Contains("sweep 1 (short)"));
}

TEST_CASE("local node health: records survive a restart, and a sweep cut short by the exit counts as failed", "[integration]") {
  testing::DescendantGuard guard;
  Env env;
  REQUIRE(env.health->Quarantine("7", "machine 7 (slot 0, pod demo-m0-0): pod failed").ok());
  env.health.reset();
  env.Open();
  CHECK(env.Record("7").state == NodeHealth::kQuarantined);

  // A record left sweeping (the controller exited while the sweep's processes ran).
  NodeHealthRecord sweeping;
  sweeping.node = "8";
  sweeping.state = NodeHealth::kSweeping;
  sweeping.since = env.clock.UnixNanos() - 1'000'000'000;
  sweeping.reason = "sweep 1 (full) started";
  sweeping.sweep_attempts = 1;
  sweeping.sweep_started_at = sweeping.since;
  sweeping.failures = {sweeping.since - 1'000'000'000};
  nlohmann::json table = nlohmann::json::parse(testing::ReadFile(env.dir.path() + "/node-health.json"));
  const NodeHealthMetadata meta = EncodeNodeHealth(sweeping);
  table["machines"]["8"] = {{"labels", meta.labels}, {"annotations", meta.annotations}};
  env.health.reset();
  {
    std::ofstream out(env.dir.path() + "/node-health.json");
    out << table.dump();
  }
  env.Open();
  const NodeHealthRecord r = env.Record("8");
  CHECK(r.state == NodeHealth::kQuarantined);
  CHECK_THAT(r.reason, Catch::Contains("interrupted"));
  CHECK(r.failures.size() == 2);
  // The quarantined one is swept after the restart and returns.
  REQUIRE(env.health->Pass().ok());
  CHECK(env.Record("7").state == NodeHealth::kHealthy);

  // A table that does not decode is refused, naming the machine and the key.
  table["machines"]["9"] = {{"labels", {{kNodeHealthLabel, "quarantined"}}},
                            {"annotations", {{kNodeHealthSinceAnnotation, "soon"}}}};
  env.health.reset();
  {
    std::ofstream out(env.dir.path() + "/node-health.json");
    out << table.dump();
  }
  auto bad = LocalNodeHealth::Create(env.options);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("machine 9") && Catch::Contains(kNodeHealthSinceAnnotation));
}

TEST_CASE("local node health: Cancel interrupts a running sweep of a hung GPU and the restart counts it as interrupted", "[integration]") {
  testing::DescendantGuard guard;
  Env env;
  // A hung GPU: its self-test blocks until the check's deadline (minutes), as a sweep of a
  // machine evicted for a hang would; shutdown must not wait for it.
  env.options.check_timeout = absl::Minutes(30);
  env.Open();
  sim::RankFault hang;
  hang.hang = true;
  REQUIRE(sim::SetRankFault(env.faults, 6, 0, hang).ok());
  REQUIRE(env.health->Quarantine("6", "machine 6 (slot 2, pod demo-m2): hang").ok());
  absl::Status pass;
  std::thread sweeper([&] { pass = env.health->Pass(); });
  // Cancel once the sweep's process runs (the record says sweeping, durably).
  REQUIRE(testing::Eventually([&] {
    const nlohmann::json table = nlohmann::json::parse(testing::ReadFile(env.dir.path() + "/node-health.json"));
    return table.dump().find("sweeping") != std::string::npos;
  }, absl::Seconds(120)));
  env.health->Cancel();
  sweeper.join();
  CHECK(pass.code() == absl::StatusCode::kCancelled);
  CHECK_THAT(std::string(pass.message()), Catch::Contains("sweep of 6 cancelled"));
  CHECK(env.Record("6").state == NodeHealth::kSweeping);  // no result recorded
  // The next controller counts the cut sweep as a failed, interrupted one.
  env.health.reset();
  env.Open();
  const NodeHealthRecord r = env.Record("6");
  CHECK(r.state == NodeHealth::kQuarantined);
  CHECK_THAT(r.reason, Catch::Contains("interrupted"));
}

TEST_CASE("local node health: a sweep that cannot start keeps the machine quarantined with the reason", "[integration]") {
  Env env;
  env.options.diagnose_binary = env.dir.path() + "/no-such-peregrine-diagnose";
  env.Open();
  REQUIRE(env.health->Quarantine("2", "machine 2 (slot 0, pod demo-m0-0): pod failed").ok());
  REQUIRE(env.health->Pass().ok());
  const NodeHealthRecord r = env.Record("2");
  CHECK(r.state == NodeHealth::kQuarantined);
  CHECK_THAT(r.sweep_blocked, Catch::Contains("no peregrine-diagnose at"));
  CHECK(r.sweep_attempts == 0);
  CHECK_THAT(env.EventsLog(), Catch::Contains("NodeSweepBlocked"));
  CHECK(env.returned.empty());
}

}  // namespace
}  // namespace peregrine
