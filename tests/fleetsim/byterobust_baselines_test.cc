// The baselines at ByteRobust's operating point (Wan et al., "Robust LLM Training
// Infrastructure at ByteDance", 2025): a 9,600-GPU job (1,200 machines of 8) over three
// months (90 days), 97% ETTR reported for ByteRobust itself. The failure count is the
// Llama 3 rate the fault model's defaults come from (419 unexpected interruptions in 54
// days on 16,384 GPUs), scaled to 9,600 GPUs x 90 days: 409 fail-stops. They are placed
// evenly (one every 5.27 h) so the requeue baseline has a closed form computed here
// independently of the replay. docs/simulation.md ("Results") explains the comparison.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "fleetsim/baselines.h"

namespace peregrine::fleetsim {
namespace {

constexpr int kMachines = 1200;
constexpr double kWall = 90 * 86400.0;

JobShape ByteRobustJob() {
  JobShape shape;
  shape.gpus = 9600;
  shape.gpus_per_machine = 8;
  shape.days = 90;
  return shape;
}

int LlamaRateFailStops() {
  // 419 / (54 x 16,384) per GPU-day x 9,600 GPUs x 90 days = 409.2.
  return static_cast<int>(std::lround(419.0 / (54.0 * 16384.0) * 9600.0 * 90.0));
}

// N evenly spaced GPU failures, each on a machine the job holds, repaired after 600 s.
std::vector<FaultEvent> EvenFailStops(int n) {
  const double gap = kWall / (n + 1);
  std::vector<FaultEvent> faults;
  for (int i = 1; i <= n; ++i) {
    const auto at = static_cast<int64_t>(std::llround(i * gap * 1e9));
    faults.push_back({(i - 1) % kMachines, at, at + 600'000'000'000LL, FaultKind::kGpu, 0});
  }
  return faults;
}

struct Expected {
  double kept = 0;
  double checkpoint = 0;
  double redo = 0;
};

// Training stretches between recoveries: a 60 s save after every 1,800 s of training; a
// crash loses what followed the last completed save (a save in progress included).
Expected ClosedForm(int n, const CostModel& c) {
  const double cycle = c.disk_checkpoint_interval_s + c.disk_checkpoint_save_s;
  const double recovery = c.failstop_detection_s + c.requeue_s + c.disk_restore_s;
  const double gap = kWall / (n + 1);
  Expected e;
  const auto stretch = [&](double run, bool crashes) {
    const double cycles = std::floor(run / cycle);
    const double rest = run - cycles * cycle;
    e.checkpoint += cycles * c.disk_checkpoint_save_s +
                    std::max(0.0, rest - c.disk_checkpoint_interval_s);
    const double unsaved = std::min(rest, c.disk_checkpoint_interval_s);
    e.kept += cycles * c.disk_checkpoint_interval_s + (crashes ? 0 : unsaved);
    if (crashes) e.redo += unsaved;
  };
  stretch(gap, true);
  for (int i = 2; i <= n; ++i) stretch(gap - recovery, true);
  stretch(kWall - n * gap - recovery, false);
  return e;
}

TEST_CASE("ByteRobust operating point: 409 fail-stops on 9,600 GPUs over 90 days, requeue against the closed form", "[unit]") {
  const CostModel costs;  // the defaults: 30 s detection, 1,800 s requeue, 300 s restore
  const int n = LlamaRateFailStops();
  REQUIRE(n == 409);
  const std::vector<FaultEvent> faults = EvenFailStops(n);
  const SimResult r = RunRequeueBaseline(faults, ByteRobustJob(), costs, 60);
  const Expected e = ClosedForm(n, costs);

  CHECK(r.faults == n);
  CHECK(r.evictions == n);
  CHECK(r.restarts == n);
  CHECK(r.standby_exhaustions == 0);
  CHECK(r.lost.detection_s == Approx(30.0 * n).margin(1e-3));
  CHECK(r.lost.restart_s == Approx(2100.0 * n).margin(1e-3));
  CHECK(r.lost.checkpoint_s == Approx(e.checkpoint).margin(1e-3));
  CHECK(r.lost.redo_s == Approx(e.redo).margin(1e-3));
  CHECK(r.kept_s == Approx(e.kept).margin(1e-3));
  // Mean recovery from a fault to training again: detection + requeue + restore.
  CHECK(r.recovery_s / static_cast<double>(r.recoveries) == Approx(2130).margin(1e-6));
  // The figures docs/simulation.md quotes.
  CHECK(r.ettr == Approx(0.8544).margin(5e-5));
  CHECK(r.lost.restart_s / 3600 == Approx(238.58).margin(0.01));
  CHECK(r.lost.checkpoint_s / 3600 == Approx(61.52).margin(0.01));
  CHECK(r.lost.redo_s / 3600 == Approx(10.97).margin(0.01));

  const SimResult oracle = RunOracle(faults, ByteRobustJob(), costs, 60);
  CHECK(oracle.ettr == 1.0);
  CHECK(oracle.evictions == n);

  // ByteRobust's reported 97% lies between the common practice and the bound; the
  // requeue baseline is below it even with no fault at all (60 s of every 1,860 s saving).
  CHECK(r.ettr < 0.97);
  CHECK(RunRequeueBaseline({}, ByteRobustJob(), costs, 60).ettr == Approx(1800.0 / 1860).margin(1e-4));
}

TEST_CASE("ByteRobust operating point: the recovery-time ratio the cost model implies against the published 10.87x", "[unit]") {
  // ByteRobust: warm standby recovers 10.87x faster than requeue. The requeue baseline's
  // mean recovery (2,130 s with the defaults) then asks a standby recovery of
  // 2,130 / 10.87 = 196 s; the tolerance is +-25% on the ratio (8.15x..13.59x), because
  // ByteRobust measured the scheduling part (weighted average scheduling time) on its own
  // cluster and the simulator measures fault-to-training.
  const CostModel c;
  const SimResult r = RunRequeueBaseline(EvenFailStops(10), ByteRobustJob(), c, 60);
  const double requeue = r.recovery_s / static_cast<double>(r.recoveries);
  CHECK(requeue == Approx(c.failstop_detection_s + c.requeue_s + c.disk_restore_s));
  const double target = requeue / 10.87;
  CHECK(target == Approx(196.0).margin(0.5));
  // A standby recovery in the cost model: detection, swap, restart, restore from memory.
  const double standby =
      c.failstop_detection_s + c.standby_swap_s + c.restart_s + c.memory_restore_s;
  CHECK(requeue / standby == Approx(10.87).epsilon(0.25));
}

}  // namespace
}  // namespace peregrine::fleetsim
