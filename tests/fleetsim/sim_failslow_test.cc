// The fail-slow path of the simulator on the real decision core: the simulated agents'
// slowdown reports and comm profiles open, localize, validate and mitigate a finding.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "fleetsim/sim_engine.h"
#include "fleetsim/sim_event.h"

namespace peregrine::fleetsim {
namespace {

constexpr int64_t kHour = 3600LL * kSimNanosPerSecond;

JobShape Job() {
  JobShape shape;
  shape.gpus = 128;  // 16 machines: pipeline 8, data 2
  shape.gpus_per_machine = 8;
  shape.days = 0.5;
  shape.step_time_s = 10;
  return shape;
}

FaultEvent Slow(int machine, int64_t start, int64_t end, FaultKind kind, double severity) {
  FaultEvent f;
  f.machine = machine;
  f.start_ns = start;
  f.end_ns = end;
  f.kind = kind;
  f.severity = severity;
  return f;
}

struct Run {
  SimResult result;
  std::vector<std::string> log;
  bool Logged(const std::string& text) const {
    for (const std::string& line : log) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

Run Simulate(const std::vector<FaultEvent>& faults, PeregrineVariant variant = PeregrineVariant::kFull) {
  Run run;
  SimOptions options;
  options.variant = variant;
  options.standby_min = 1;
  options.event_log = &run.log;
  absl::StatusOr<SimResult> r = SimulatePeregrine(Job(), CostModel{}, faults, options);
  INFO(absl::StrJoin(run.log, "\n"));
  REQUIRE(r.ok());
  CHECK(r->kept_s + r->lost.total() == Approx(r->wall_s).epsilon(1e-9));
  run.result = *r;
  return run;
}

TEST_CASE("a long compute fail-slow is found, localized to its machine, validated, redistributed at S2 and evicted at S4", "[unit]") {
  // Machine 5 runs one GPU 50% slower for 4 hours.
  const Run run = Simulate({Slow(5, 1 * kHour, 5 * kHour, FaultKind::kSlowCompute, 0.5)});
  INFO(absl::StrJoin(run.log, "\n"));
  const SimResult& r = run.result;
  CHECK(r.failslow_findings >= 1);
  CHECK(r.failslow_localized >= 1);
  CHECK(r.failslow_compute >= 1);
  CHECK(r.failslow_communication == 0);
  CHECK(r.failslow_confirmed >= 1);  // the GEMM names the slow GPU
  // S2 first: 2 replicas of 16 micro-batches, one 1.5x slower, best split 13 / 19 leaves
  // +22%, above mitigateThreshold (10%), so the ladder moves on to S4.
  CHECK(r.failslow_s2_plans >= 1);
  CHECK(run.Logged("MicroBatchPlanInForce"));
  CHECK(r.failslow_s4 == 1);
  CHECK(r.evictions == 1);
  CHECK(r.false_evictions == 0);
  CHECK(run.Logged("on machine(s) m5"));
  CHECK(run.Logged("S4 replace: evict machine(s) m5"));
  CHECK(run.Logged("S2 plan 1 withdrawn"));  // the restart ends the plan
  // Paid for far less than the 4 hours at +50% the job would otherwise lose (4 h x 0.5 / 1.5).
  CHECK(r.lost.slowdown_s < 0.5 * 4 * 3600 * 0.5 / 1.5);
  CHECK(r.lost.diagnosis_s > 0);  // the validation's pause
}

TEST_CASE("without fail-slow mitigation the same episode is found and localized but paid in full", "[unit]") {
  const std::vector<FaultEvent> faults = {Slow(5, 1 * kHour, 5 * kHour, FaultKind::kSlowCompute, 0.5)};
  const Run full = Simulate(faults);
  const Run monitor = Simulate(faults, PeregrineVariant::kNoFailSlowMitigation);
  CHECK(monitor.result.failslow_localized >= 1);
  CHECK(monitor.result.failslow_s4 == 0);
  CHECK(monitor.result.failslow_s2_plans == 0);
  CHECK(monitor.result.evictions == 0);
  CHECK(monitor.Logged("mitigation MonitorOnly: no action"));
  // Four hours at +50%: the slowdown share of the steps, less the detection and pause.
  CHECK(monitor.result.lost.slowdown_s > 0.9 * 4 * 3600 * 0.5 / 1.5);
  CHECK(full.result.ettr > monitor.result.ettr);
}

TEST_CASE("a link fail-slow is named as communication and evicts nothing", "[unit]") {
  const Run run = Simulate({Slow(9, 1 * kHour, 4 * kHour, FaultKind::kSlowLink, 0.4)});
  INFO(absl::StrJoin(run.log, "\n"));
  const SimResult& r = run.result;
  CHECK(r.failslow_findings >= 1);
  CHECK(r.failslow_communication >= 1);
  CHECK(r.failslow_compute == 0);
  CHECK(r.failslow_s4 == 0);
  CHECK(r.failslow_s2_plans == 0);  // the replicas compute at the same speed
  CHECK(r.evictions == 0);
  CHECK(run.Logged("is communication"));
  // With Auto and no S3 the link rounds could lead to no action: not paused for.
  CHECK(run.Logged("FailSlowValidationDeferred"));
  CHECK_FALSE(run.Logged("slow link(s)"));
  CHECK(run.Logged("no machine is attributed"));
}

TEST_CASE("no fail-slow, or one below the verify threshold, opens no finding", "[unit]") {
  const Run none = Simulate({});
  CHECK(none.result.failslow_findings == 0);
  CHECK(none.result.lost.diagnosis_s == 0);
  const Run small = Simulate({Slow(2, 1 * kHour, 3 * kHour, FaultKind::kSlowCompute, 0.05)});
  CHECK(small.result.failslow_findings == 0);
  CHECK(small.result.lost.slowdown_s > 0);
}

TEST_CASE("a short compute fail-slow ends before the break-even: found, localized, not evicted", "[unit]") {
  const Run run = Simulate({Slow(3, 1 * kHour, 1 * kHour + 300 * kSimNanosPerSecond, FaultKind::kSlowCompute, 0.3)});
  const SimResult& r = run.result;
  CHECK(r.failslow_findings == 1);
  CHECK(r.failslow_s4 == 0);
  CHECK(r.evictions == 0);
  CHECK(run.Logged("FailSlowRecovered"));
}

TEST_CASE("the fail-slow path is deterministic for a seed", "[unit]") {
  const std::vector<FaultEvent> faults = {Slow(5, 1 * kHour, 5 * kHour, FaultKind::kSlowCompute, 0.5),
                                          Slow(9, 6 * kHour, 8 * kHour, FaultKind::kSlowLink, 0.4)};
  const Run a = Simulate(faults);
  const Run b = Simulate(faults);
  CHECK(a.log == b.log);
  CHECK(a.result.ettr == b.result.ettr);
  CHECK(a.result.lost.slowdown_s == b.result.lost.slowdown_s);
  CHECK(a.result.failslow_findings == b.result.failslow_findings);
  CHECK(a.result.decisions == b.result.decisions);
}

}  // namespace
}  // namespace peregrine::fleetsim
