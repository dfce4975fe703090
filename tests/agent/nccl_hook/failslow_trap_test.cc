// Trap mode as the agent acknowledges it: FailSlowMonitor::CheckPaused over the rings of
// real processes (nccl-hook-probe on sim's NCCL with libperegrine_nccl.so preloaded)
// reports paused only once no NCCL call moves and every process is held, either in the
// trap or blocked inside a collective whose peer is trapped.
#ifdef PEREGRINE_HAVE_SIM_NCCL

#include <catch2/catch.hpp>
#include <memory>

#include "agent/failslow_monitor.h"
#include "tests/agent/nccl_hook/probe_process.h"

namespace peregrine {
namespace {

using testing::Child;
using testing::TempDir;
using testing::Eventually;

TEST_CASE("trap is acknowledged only once training is really paused", "[integration]") {
  TempDir dir;
  FailSlowMonitorOptions options;
  options.ring_dir = dir.path() + "/rings";
  auto created = FailSlowMonitor::Create(options);
  REQUIRE(created.ok());
  FailSlowMonitor& monitor = **created;
  monitor.SetMode(/*profiling=*/true, /*trap=*/false);
  std::unique_ptr<Child> ranks[2];
  for (int r = 0; r < 2; ++r) {
    ranks[r] = std::make_unique<Child>(
        std::vector<std::string>{testing::ProbePath(), "sim", std::to_string(r), "2", dir.path() + "/uid", "20000"},
        std::map<std::string, std::string>{{"LD_LIBRARY_PATH", testing::SimNcclDir()},
                                           {"LD_PRELOAD", testing::HookPath()},
                                           {"PEREGRINE_NCCL_RING_DIR", options.ring_dir},
                                           {"PEREGRINE_NCCL_PROFILING", "1"},
                                           {"PEREGRINE_NCCL_TIMEOUT_MS", ""},
                                           {"PEREGRINE_SIM_FAULTS", ""},
                                           {"RANK", std::to_string(r)}},
        dir.path() + "/rank" + std::to_string(r) + ".out");
  }
  auto poll = [&] { monitor.Poll(0, 0); };
  // Training runs: both rings open and records flow.
  REQUIRE(Eventually([&] {
    poll();
    return monitor.stats().rings_opened == 2 && monitor.stats().records > 200;
  }));
  // Not trapped: never paused, and the reason says so.
  poll();
  FailSlowMonitor::PauseCheck running = monitor.CheckPaused();
  CHECK(!running.paused);
  CHECK(running.waiting_for.find("trap is off") != std::string::npos);

  monitor.SetMode(/*profiling=*/true, /*trap=*/true);
  poll();
  CHECK(!monitor.CheckPaused().paused);  // the first check has nothing to compare with
  // Checked at a steady cadence (as the agent's 100 ms poll does), it becomes paused.
  FailSlowMonitor::PauseCheck check;
  REQUIRE(Eventually([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the cadence, not a wait for a condition
    poll();
    check = monitor.CheckPaused();
    return check.paused;
  }));
  CHECK(check.rings == 2);
  // Paused means paused: nothing moves for a while, the processes are alive.
  const uint64_t records = monitor.stats().records;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  poll();
  CHECK(monitor.stats().records == records);
  CHECK(monitor.CheckPaused().paused);
  CHECK(ranks[0]->Wait(std::chrono::seconds(0)) == -1);
  CHECK(ranks[1]->Wait(std::chrono::seconds(0)) == -1);

  // Released: training moves again and completes with correct results.
  monitor.SetMode(/*profiling=*/true, /*trap=*/false);
  REQUIRE(Eventually([&] {
    poll();
    return monitor.stats().records > records;
  }));
  for (int r = 0; r < 2; ++r) {
    INFO(ranks[r]->Output());
    REQUIRE(ranks[r]->Wait() == 0);
    CHECK(ranks[r]->Values()["results_ok"] == "1");
  }
}

}  // namespace
}  // namespace peregrine

#endif  // PEREGRINE_HAVE_SIM_NCCL
