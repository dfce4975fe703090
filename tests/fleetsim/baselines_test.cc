#include "fleetsim/baselines.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace peregrine::fleetsim {
namespace {

int64_t Ns(double s) { return static_cast<int64_t>(s * 1e9); }

FaultEvent Stop(int machine, double start_s, double end_s, FaultKind kind = FaultKind::kGpu) {
  return {machine, Ns(start_s), Ns(end_s), kind, 0};
}

FaultEvent Slow(int machine, double start_s, double end_s, double severity) {
  return {machine, Ns(start_s), Ns(end_s), FaultKind::kSlowCompute, severity};
}

// Two machines of 8 GPUs for one day: the hand computations below use these numbers.
JobShape TwoMachines() {
  JobShape shape;
  shape.gpus = 16;
  shape.gpus_per_machine = 8;
  shape.days = 1;  // 86,400 s
  return shape;
}

CostModel Costs() {
  CostModel c;
  c.failstop_detection_s = 30;
  c.requeue_s = 1800;
  c.disk_restore_s = 300;
  c.disk_checkpoint_interval_s = 1800;
  c.disk_checkpoint_save_s = 60;
  c.machine_return_s = 0;
  return c;
}

constexpr double kWall = 86400;

// Training from `from` to the end of the day after a restore: a save every 1,800 s of
// training, each blocking 60 s. Returns {kept, checkpoint} for that stretch.
std::pair<double, double> TrainToEnd(double from) {
  const double run = kWall - from;
  const double cycles = std::floor(run / 1860);
  const double rest = run - cycles * 1860;
  const double blocked = cycles * 60 + std::max(0.0, rest - 1800);
  return {run - blocked, blocked};
}

void CheckPartition(const SimResult& r) {
  CHECK(r.wall_s == Approx(kWall));
  CHECK(r.lost.total() == Approx(r.wall_s - r.kept_s).margin(1e-6));
  CHECK(r.ettr == Approx(r.kept_s / r.wall_s));
}

TEST_CASE("requeue: no faults costs only the disk checkpoints", "[unit]") {
  const SimResult r = RunRequeueBaseline({}, TwoMachines(), Costs(), 1);
  const auto [kept, blocked] = TrainToEnd(0);
  CHECK(r.policy == "requeue-disk-30min");
  CHECK(r.kept_s == Approx(kept));
  CHECK(r.lost.checkpoint_s == Approx(blocked));
  CHECK(blocked == Approx(46 * 60.0));  // 46 saves in a day
  CHECK(r.faults == 0);
  CHECK(r.restarts == 0);
  CheckPartition(r);
}

TEST_CASE("requeue: one fail-stop costs detection, requeue, restore and the redo", "[unit]") {
  const SimResult r =
      RunRequeueBaseline({Stop(0, 1000, 1000 + 3600)}, TwoMachines(), Costs(), 1);
  // Crash at 1,000 s before the first save: 1,000 s redone. Detected at 1,030, the spare
  // (machine 2) replaces machine 0, requeue until 2,830, restore until 3,130.
  const auto [kept, blocked] = TrainToEnd(3130);
  CHECK(r.lost.redo_s == Approx(1000));
  CHECK(r.lost.detection_s == Approx(30));
  CHECK(r.lost.restart_s == Approx(2100));
  CHECK(r.lost.waiting_s == 0);
  CHECK(r.lost.checkpoint_s == Approx(blocked));
  CHECK(r.kept_s == Approx(kept));
  CHECK(r.faults == 1);
  CHECK(r.fail_stops == 1);
  CHECK(r.evictions == 1);
  CHECK(r.false_evictions == 0);
  CHECK(r.restarts == 1);
  CHECK(r.recoveries == 1);
  CHECK(r.recovery_s == Approx(2130));
  CHECK(r.standby_exhaustions == 0);
  CHECK(r.goodput == Approx(r.ettr));
  CheckPartition(r);
}

TEST_CASE("requeue: a crash after a save redoes only what followed it, one during a save loses the save", "[unit]") {
  // First save: training 0..1,800, blocked 1,800..1,860.
  const SimResult after = RunRequeueBaseline({Stop(0, 1900, 90000)}, TwoMachines(), Costs(), 1);
  CHECK(after.lost.redo_s == Approx(40));
  CHECK(after.lost.checkpoint_s == Approx(60 + TrainToEnd(1900 + 2130).second));
  CheckPartition(after);

  const SimResult during = RunRequeueBaseline({Stop(0, 1830, 90000)}, TwoMachines(), Costs(), 1);
  CHECK(during.lost.redo_s == Approx(1800));
  CHECK(during.lost.checkpoint_s == Approx(30 + TrainToEnd(1830 + 2130).second));
  CheckPartition(during);
}

TEST_CASE("requeue: with no spare free the job waits for the repair", "[unit]") {
  const SimResult r = RunRequeueBaseline({Stop(0, 1000, 5000)}, TwoMachines(), Costs(), 0);
  // Detected at 1,030; machine 0 is back at 5,000 and is the only machine to take.
  CHECK(r.lost.waiting_s == Approx(3970));
  CHECK(r.lost.restart_s == Approx(2100));
  CHECK(r.recovery_s == Approx(6100));
  CHECK(r.standby_exhaustions == 1);
  CHECK(r.evictions == 1);
  CHECK(r.kept_s == Approx(TrainToEnd(7100).first));
  CheckPartition(r);

  // machine_return_s delays the repaired machine.
  CostModel slow_return = Costs();
  slow_return.machine_return_s = 100;
  const SimResult late = RunRequeueBaseline({Stop(0, 1000, 5000)}, TwoMachines(), slow_return, 0);
  CHECK(late.lost.waiting_s == Approx(4070));
  CheckPartition(late);
}

TEST_CASE("requeue: a spare that broke is not used until it is repaired", "[unit]") {
  // Spare machine 2 is down 500..5,000; machine 0 fails at 1,000: same as having no spare.
  const SimResult r = RunRequeueBaseline({Stop(2, 500, 5000), Stop(0, 1000, 200000)},
                                         TwoMachines(), Costs(), 1);
  CHECK(r.faults == 1);  // the spare's fault did not hit the job
  CHECK(r.lost.waiting_s == Approx(3970));
  CHECK(r.standby_exhaustions == 1);
  CHECK(r.kept_s == Approx(TrainToEnd(7100).first));
  CheckPartition(r);
}

TEST_CASE("requeue: two faults within one detection are handled together", "[unit]") {
  const SimResult r = RunRequeueBaseline({Stop(0, 1000, 200000), Stop(1, 1010, 200000)},
                                         TwoMachines(), Costs(), 2);
  CHECK(r.lost.detection_s == Approx(40));
  CHECK(r.lost.restart_s == Approx(2100));
  CHECK(r.lost.redo_s == Approx(1000));
  CHECK(r.evictions == 2);
  CHECK(r.restarts == 1);
  CHECK(r.recoveries == 1);
  CHECK(r.recovery_s == Approx(2140));
  CHECK(r.faults == 2);
  CHECK(r.kept_s == Approx(TrainToEnd(3140).first));
  CheckPartition(r);
}

TEST_CASE("requeue: a fault during the requeue starts the recovery over", "[unit]") {
  // Machine 0 at 1,000 (requeue from 1,030); machine 1 fails at 2,000 during it.
  const SimResult r = RunRequeueBaseline({Stop(0, 1000, 200000), Stop(1, 2000, 200000)},
                                         TwoMachines(), Costs(), 2);
  CHECK(r.lost.detection_s == Approx(60));
  CHECK(r.lost.restart_s == Approx(970 + 2100));
  CHECK(r.lost.redo_s == Approx(1000));
  CHECK(r.restarts == 2);
  CHECK(r.recoveries == 1);
  CHECK(r.recovery_s == Approx(4130 - 1000));
  CHECK(r.evictions == 2);
  CHECK(r.kept_s == Approx(TrainToEnd(4130).first));
  CheckPartition(r);
}

TEST_CASE("requeue: a fail-slow slows the whole job until a fail-stop crashes it", "[unit]") {
  const SimResult r = RunRequeueBaseline({Slow(1, 0, 3000, 0.5), Stop(0, 1000, 200000)},
                                         TwoMachines(), Costs(), 1);
  // 0..1,000 at 1/1.5 speed: 666.7 s of progress (redone), 333.3 s slowdown. The episode
  // ends during the restore.
  CHECK(r.lost.slowdown_s == Approx(1000.0 / 3));
  CHECK(r.lost.redo_s == Approx(2000.0 / 3));
  CHECK(r.fail_slows == 1);
  CHECK(r.faults == 2);
  CHECK(r.kept_s == Approx(TrainToEnd(3130).first));
  CheckPartition(r);
}

TEST_CASE("requeue: a slowed spare is taken blindly and slows the job", "[unit]") {
  // Spare machine 2 runs at half speed until 4,130, 1,000 s after the restore ends.
  const SimResult r = RunRequeueBaseline({Slow(2, 0, 4130, 1.0), Stop(0, 1000, 200000)},
                                         TwoMachines(), Costs(), 1);
  CHECK(r.lost.slowdown_s == Approx(500));
  CHECK(r.fail_slows == 0);  // it started on a machine the job did not hold
  CHECK(r.kept_s == Approx(TrainToEnd(3130).first - 500));
  CheckPartition(r);
}

TEST_CASE("requeue: a crash without downtime requeues without evicting", "[unit]") {
  const SimResult r = RunRequeueBaseline({Stop(1, 1000, 1000, FaultKind::kSoftware)},
                                         TwoMachines(), Costs(), 0);
  CHECK(r.evictions == 0);
  CHECK(r.restarts == 1);
  CHECK(r.lost.waiting_s == 0);
  CHECK(r.recovery_s == Approx(2130));
  CheckPartition(r);
}

TEST_CASE("baselines: events outside the cluster or the run are ignored", "[unit]") {
  const std::vector<FaultEvent> faults = {Stop(7, 1000, 5000), Stop(0, 90000, 95000),
                                          Stop(-1, 10, 20)};
  const SimResult r = RunRequeueBaseline(faults, TwoMachines(), Costs(), 1);
  CHECK(r.faults == 0);
  CHECK(r.kept_s == Approx(TrainToEnd(0).first));
  CHECK(RunOracle(faults, TwoMachines(), Costs(), 1).ettr == 1.0);
}

TEST_CASE("oracle: a fail-stop with a spare free costs nothing", "[unit]") {
  const SimResult r = RunOracle({Stop(0, 1000, 4600)}, TwoMachines(), Costs(), 1);
  CHECK(r.policy == "oracle");
  CHECK(r.ettr == 1.0);
  CHECK(r.lost.total() == 0);
  CHECK(r.evictions == 1);
  CHECK(r.recoveries == 1);
  CHECK(r.recovery_s == 0);
  CHECK(r.restarts == 0);
  CheckPartition(r);
}

TEST_CASE("oracle: with no machine to take it waits for the repair", "[unit]") {
  const SimResult r = RunOracle({Stop(0, 1000, 5000)}, TwoMachines(), Costs(), 0);
  CHECK(r.lost.waiting_s == Approx(4000));
  CHECK(r.recovery_s == Approx(4000));
  CHECK(r.kept_s == Approx(kWall - 4000));
  CheckPartition(r);
}

TEST_CASE("oracle: a slowed machine is swapped for a healthy one, or for the least slowed", "[unit]") {
  CHECK(RunOracle({Slow(1, 0, 3000, 0.5)}, TwoMachines(), Costs(), 1).ettr == 1.0);

  const SimResult alone = RunOracle({Slow(1, 0, 3000, 0.5)}, TwoMachines(), Costs(), 0);
  CHECK(alone.lost.slowdown_s == Approx(1000));
  CheckPartition(alone);

  // The spare is slowed too, less: the job runs at 1/1.25 for 3,000 s.
  const SimResult both =
      RunOracle({Slow(1, 0, 3000, 0.5), Slow(2, 0, 3000, 0.25)}, TwoMachines(), Costs(), 1);
  CHECK(both.lost.slowdown_s == Approx(600));
  CHECK(both.evictions == 1);
  CheckPartition(both);
}

// Random faults on a small cluster, deterministic for the seed.
std::vector<FaultEvent> RandomFaults(uint64_t seed, int cluster, double wall, int count) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> at(0, wall);
  std::uniform_real_distribution<double> length(0, 20000);
  std::uniform_int_distribution<int> machine(0, cluster - 1);
  std::uniform_int_distribution<int> kind(0, 6);
  std::uniform_real_distribution<double> severity(0.05, 2);
  std::vector<FaultEvent> out;
  for (int i = 0; i < count; ++i) {
    const double start = at(rng);
    const auto k = static_cast<FaultKind>(kind(rng));
    const double len = k == FaultKind::kSoftware ? 0 : length(rng);
    const bool slow = k == FaultKind::kSlowCompute || k == FaultKind::kSlowLink;
    out.push_back({machine(rng), Ns(start), Ns(start + len), k, slow ? severity(rng) : 0});
  }
  return out;
}

TEST_CASE("baselines: the partition, the ETTR range and the oracle's bound hold on random faults", "[unit]") {
  JobShape shape;
  shape.gpus = 64;
  shape.gpus_per_machine = 8;  // 8 machines
  shape.days = 3;
  const double wall = shape.days * 86400;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    for (int spares : {0, 1, 3}) {
      const std::vector<FaultEvent> faults =
          RandomFaults(seed, 8 + spares, wall, static_cast<int>(seed % 7) * 10);
      const SimResult requeue = RunRequeueBaseline(faults, shape, Costs(), spares);
      const SimResult oracle = RunOracle(faults, shape, Costs(), spares);
      INFO("seed " << seed << " spares " << spares);
      for (const SimResult* r : {&requeue, &oracle}) {
        CHECK(r->wall_s == Approx(wall));
        CHECK(r->lost.total() == Approx(r->wall_s - r->kept_s).margin(1e-6));
        CHECK(r->ettr >= 0);
        CHECK(r->ettr <= 1);
        CHECK(r->lost.redo_s >= -1e-9);
        CHECK(r->lost.slowdown_s >= -1e-9);
      }
      CHECK(oracle.kept_s >= requeue.kept_s - 1e-6);
      CHECK(oracle.lost.detection_s == 0);
      CHECK(oracle.lost.checkpoint_s == 0);
      // Deterministic: the same input gives the same result.
      const SimResult again = RunRequeueBaseline(faults, shape, Costs(), spares);
      CHECK(again.kept_s == requeue.kept_s);
      CHECK(again.restarts == requeue.restarts);
    }
  }
}

}  // namespace
}  // namespace peregrine::fleetsim
