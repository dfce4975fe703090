// The simulation engine on the real decision core, with hand-written fault lists.
#include "fleetsim/sim_engine.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "fleetsim/sim_event.h"

namespace peregrine::fleetsim {
namespace {

constexpr int64_t kHour = 3600LL * kSimNanosPerSecond;

JobShape SmallJob(double days = 1) {
  JobShape shape;
  shape.gpus = 64;  // 8 machines
  shape.gpus_per_machine = 8;
  shape.days = days;
  shape.step_time_s = 10;
  return shape;
}

FaultEvent Fault(int machine, int64_t start, int64_t end, FaultKind kind, double severity = 0) {
  FaultEvent f;
  f.machine = machine;
  f.start_ns = start;
  f.end_ns = end;
  f.kind = kind;
  f.severity = severity;
  return f;
}

SimOptions WithStandby() {
  SimOptions options;
  options.standby_min = 1;
  return options;
}

SimResult Run(const JobShape& shape, const std::vector<FaultEvent>& faults, SimOptions options = WithStandby(),
              const CostModel& costs = {}) {
  std::vector<std::string> log;
  options.event_log = &log;
  absl::StatusOr<SimResult> r = SimulatePeregrine(shape, costs, faults, options);
  INFO(absl::StrJoin(log, "\n"));
  REQUIRE(r.ok());
  // The causes partition the time that was not kept.
  CHECK(r->kept_s + r->lost.total() == Approx(r->wall_s).epsilon(1e-9));
  CHECK(r->ettr == Approx(r->kept_s / r->wall_s));
  return *r;
}

TEST_CASE("a job without faults loses only its start-up and its checkpoint saves", "[unit]") {
  const CostModel costs;
  const SimResult r = Run(SmallJob(), {});
  CHECK(r.policy == "peregrine");
  CHECK(r.wall_s == Approx(86400));
  CHECK(r.faults == 0);
  CHECK(r.evictions == 0);
  CHECK(r.restarts == 0);
  CHECK(r.recoveries == 0);
  // Start-up: every pod scheduled and ready, then the first attempt's processes start.
  CHECK(r.lost.restart_s == Approx(costs.pod_start_s + costs.restart_s).margin(1));
  CHECK(r.lost.detection_s == 0);
  CHECK(r.lost.redo_s < 10);
  // One in-memory save of 0.5 s every 6 steps of 10 s.
  CHECK(r.lost.checkpoint_s == Approx(r.kept_s * 0.5 / 60).epsilon(1e-3));
  CHECK(r.decisions > 0);
  CHECK(r.goodput < r.ettr);  // standbys are held too
}

TEST_CASE("a lost machine is evicted, a warm standby takes its slot and training resumes from the memory checkpoint", "[unit]") {
  const CostModel costs;
  const SimResult r = Run(SmallJob(), {Fault(3, 2 * kHour, 6 * kHour, FaultKind::kHost)});
  CHECK(r.faults == 1);
  CHECK(r.fail_stops == 1);
  CHECK(r.evictions == 1);
  CHECK(r.false_evictions == 0);
  CHECK(r.standby_exhaustions == 0);
  CHECK(r.restarts == 1);
  CHECK(r.recoveries == 1);
  CHECK(r.lost.detection_s == Approx(costs.failstop_detection_s).margin(0.01));
  CHECK(r.lost.diagnosis_s == Approx(1).margin(0.01));  // the triage window
  // The others restart in place (restart_s) and everyone restores from memory.
  CHECK(r.lost.restart_s - (costs.pod_start_s + costs.restart_s) ==
        Approx(costs.restart_s + costs.memory_restore_s).margin(1));
  CHECK(r.lost.redo_s <= costs.memory_checkpoint_interval_s + 2 * 10);
  CHECK(r.recovery_s == Approx(r.lost.detection_s + r.lost.diagnosis_s + costs.restart_s + costs.memory_restore_s).margin(1));
}

TEST_CASE("a crashed training process is diagnosed, no machine is evicted and the job restarts in place", "[unit]") {
  const CostModel costs;
  const SimResult r = Run(SmallJob(), {Fault(2, 3 * kHour, 3 * kHour, FaultKind::kSoftware)});
  CHECK(r.faults == 1);
  CHECK(r.evictions == 0);
  CHECK(r.false_evictions == 0);
  CHECK(r.restarts == 1);
  CHECK(r.recoveries == 1);
  CHECK(r.lost.detection_s == Approx(costs.failstop_detection_s).margin(0.01));
  // Triage, then the stop-time diagnosis (stop, EUD, all-to-all, all-gather) before the reattempt.
  CHECK(r.lost.diagnosis_s > costs.diagnosis_s / 3);
  CHECK(r.lost.redo_s <= costs.memory_checkpoint_interval_s + 2 * 10);
}

TEST_CASE("without in-memory checkpoints the standby variant restores the disk checkpoint", "[unit]") {
  const CostModel costs;
  SimOptions options = WithStandby();
  options.variant = PeregrineVariant::kStandbyNoMemoryCheckpoint;
  const std::vector<FaultEvent> faults = {Fault(3, 2 * kHour + 1000 * kSimNanosPerSecond, 6 * kHour, FaultKind::kGpu)};
  const SimResult r = Run(SmallJob(), faults, options);
  const SimResult full = Run(SmallJob(), faults);
  CHECK(r.policy == "standby-no-memory-ckpt");
  CHECK(r.evictions == 1);
  CHECK(r.lost.restart_s - (costs.pod_start_s + costs.restart_s) ==
        Approx(costs.restart_s + costs.disk_restore_s).margin(1));
  // Training started at 390 s at 10 s + 60 s / 180 per step: the fault at 8200 s came in step
  // 755.8, 35.8 steps after the disk checkpoint of step 720 (in-memory: after step 756).
  CHECK(r.lost.redo_s == Approx(35.8 * (10 + 60.0 / 180)).margin(2));
  CHECK(full.lost.redo_s < 70);
  CHECK(r.lost.checkpoint_s == Approx(r.kept_s * costs.disk_checkpoint_save_s / costs.disk_checkpoint_interval_s).epsilon(1e-3));
  CHECK(r.ettr < full.ettr);
}

TEST_CASE("a replacement with no standby ready waits for a new pod and counts a standby exhaustion", "[unit]") {
  const CostModel costs;
  // Two machines fail at once; the pool holds one standby.
  const SimResult r = Run(SmallJob(), {Fault(1, 2 * kHour, 9 * kHour, FaultKind::kHost),
                                       Fault(5, 2 * kHour, 9 * kHour, FaultKind::kNic)});
  CHECK(r.evictions == 2);
  CHECK(r.standby_exhaustions == 1);
  CHECK(r.recoveries == 1);
  // The second slot's pod is scheduled on a spare and started (pod_start_s) before the restart.
  CHECK(r.recovery_s > costs.failstop_detection_s + costs.pod_start_s);
}

TEST_CASE("faults on machines the job does not hold are not counted and change nothing", "[unit]") {
  const JobShape shape = SmallJob();
  const int fleet = FleetMachines(shape, WithStandby());
  const SimResult quiet = Run(shape, {});
  const SimResult r = Run(shape, {Fault(fleet - 1, 2 * kHour, 3 * kHour, FaultKind::kHost),
                                  Fault(fleet - 2, 2 * kHour, 5 * kHour, FaultKind::kSlowCompute, 0.5)});
  CHECK(r.faults == 0);
  CHECK(r.ettr == quiet.ettr);
}

TEST_CASE("an unmitigated fail-slow costs its severity's share of the time it lasts", "[unit]") {
  SimOptions options = WithStandby();
  options.variant = PeregrineVariant::kNoFailSlowMitigation;
  const SimResult r = Run(SmallJob(), {Fault(4, 2 * kHour, 3 * kHour, FaultKind::kSlowCompute, 0.5)}, options);
  CHECK(r.policy == "no-failslow-mitigation");
  CHECK(r.fail_slows == 1);
  CHECK(r.evictions == 0);
  // The core finds it, localizes and validates it (training paused meanwhile) and, on
  // MonitorOnly, never acts.
  CHECK(r.failslow_findings == 1);
  CHECK(r.failslow_compute == 1);
  CHECK(r.failslow_s4 == 0);
  CHECK(r.lost.diagnosis_s > 0);
  // One hour at 1.5x the step time (plus the checkpoint share), less the validation's
  // pause: a third of it is slowdown.
  CHECK(r.lost.slowdown_s == Approx((3600.0 - r.lost.diagnosis_s) / 3).epsilon(0.01));
}

TEST_CASE("two runs on the same faults give identical results", "[unit]") {
  std::vector<FaultEvent> faults;
  for (int i = 0; i < 12; ++i) {
    faults.push_back(Fault(i % 9, (i + 1) * kHour + i * 7919 * 1'000'000LL, (i + 3) * kHour,
                           i % 3 == 0 ? FaultKind::kSoftware : (i % 3 == 1 ? FaultKind::kGpu : FaultKind::kSlowLink),
                           i % 3 == 2 ? 0.3 : 0));
  }
  const SimResult a = Run(SmallJob(), faults);
  const SimResult b = Run(SmallJob(), faults);
  CHECK(a.kept_s == b.kept_s);
  CHECK(a.lost.detection_s == b.lost.detection_s);
  CHECK(a.lost.diagnosis_s == b.lost.diagnosis_s);
  CHECK(a.lost.restart_s == b.lost.restart_s);
  CHECK(a.lost.redo_s == b.lost.redo_s);
  CHECK(a.lost.slowdown_s == b.lost.slowdown_s);
  CHECK(a.lost.waiting_s == b.lost.waiting_s);
  CHECK(a.evictions == b.evictions);
  CHECK(a.restarts == b.restarts);
  CHECK(a.decisions == b.decisions);
  CHECK(a.recovery_s == b.recovery_s);
  CHECK(a.faults > 0);
}

TEST_CASE("bad parameters and faults are refused with the field named", "[unit]") {
  JobShape shape = SmallJob();
  shape.gpus = 60;
  CHECK(SimulatePeregrine(shape, {}, {}).status().message().find("gpus") != std::string::npos);
  CostModel costs;
  costs.restart_s = -1;
  CHECK(SimulatePeregrine(SmallJob(), costs, {}).status().message().find("restart_s") != std::string::npos);
  costs = CostModel{};
  costs.memory_checkpoint_interval_s = 0;
  CHECK(SimulatePeregrine(SmallJob(), costs, {}).status().message().find("memory_checkpoint_interval_s") !=
        std::string::npos);
  const int fleet = FleetMachines(SmallJob(), {});
  absl::Status s = SimulatePeregrine(SmallJob(), {}, {Fault(fleet, 0, kHour, FaultKind::kGpu)}).status();
  CHECK(s.message().find("fault 0: machine") != std::string::npos);
  s = SimulatePeregrine(SmallJob(), {}, {Fault(1, kHour, 0, FaultKind::kGpu)}).status();
  CHECK(s.message().find("forward interval") != std::string::npos);
  s = SimulatePeregrine(SmallJob(), {}, {Fault(1, 0, kHour, FaultKind::kSlowLink, 0)}).status();
  CHECK(s.message().find("severity") != std::string::npos);
}

}  // namespace
}  // namespace peregrine::fleetsim
