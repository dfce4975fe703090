// S4's evidence gate (controller/core/failslow_mitigation.h): the ladder evicts a machine
// only on a GEMM judged at most evidence_max_age_ns ago that names a slow GPU on it; it
// asks for a GEMM re-confirmation when the evidence is older, and closes the finding when
// the fresh GEMM no longer names the machine. First the pure ladder with simulated time,
// then the whole decision (DecideJob) with agents that answer the re-confirmation's trap
// and GEMM: the scenario in which the localized GPU recovered while the job stays slow.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "controller/core/decision_engine.h"
#include "controller/core/failslow_mitigation.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kT0 = 1'700'000'000 * kSec;

// A compute fail-slow of rank 3 on machine "m1", localized at kT0, its validation's GEMM
// confirmed rank 3 slow and ended at kT0: iteration 1 s -> 2 s (half of wall time wasted).
FailSlowFinding Compute() {
  FailSlowFinding f;
  f.id = 7;
  f.state = FailSlowState::kLocalized;
  f.kind = FailSlowKind::kCompute;
  f.ranks = {3};
  f.machines = {"m1"};
  f.severity = 1.0;
  f.healthy_iteration_seconds = 1.0;
  f.slow_iteration_seconds = 2.0;
  f.onset = kT0 - 5 * kSec;
  f.detected_at = kT0;
  f.localized_at = kT0;
  f.validation.state = ValidationState::kDone;
  f.validation.verdict = ValidationVerdict::kConfirmed;
  f.validation.started_at = kT0 - 20 * kSec;
  f.validation.ended_at = kT0;
  f.validation.slow_gpus = {3};
  return f;
}

// S2/S3 unavailable; S4 costs `restart_cost` s, so the break-even is at 2 x that.
FailSlowMitigationInput Input(const FailSlowFinding& f, double restart_cost) {
  FailSlowMitigationInput in;
  in.finding = f;
  in.rank_machines = {{0, "m0"}, {1, "m0"}, {2, "m1"}, {3, "m1"}};
  in.job_machines = {"m0", "m1"};
  in.redistribute.unavailable_reason = "no plans";
  in.remap.unavailable_reason = "no remap";
  in.restart_cost.seconds = restart_cost;
  in.restart_cost.source = "test measurement";
  in.evidence_max_age_ns = 300 * kSec;
  return in;
}

FailSlowMitigationDecision Step(FailSlowMitigationInput& in, int64_t now) {
  FailSlowMitigationDecision d = DecideFailSlowMitigation(in, now);
  in.finding.mitigation = d.record;
  return d;
}

int Count(const std::vector<JobEvent>& events, const std::string& text) {
  int n = 0;
  for (const JobEvent& e : events) n += absl::StrContains(e.message, text) ? 1 : 0;
  return n;
}

// The validation re-ran its GEMM from `start` to `end` and measured `slow` ranks slow.
void Reconfirmed(FailSlowFinding& f, int64_t start, int64_t end, std::vector<int> slow) {
  f.validation.state = ValidationState::kDone;
  f.validation.started_at = start;
  f.validation.ended_at = end;
  f.validation.slow_gpus = std::move(slow);
  f.validation.verdict = f.validation.slow_gpus.empty() ? ValidationVerdict::kNotConfirmed
                                                        : ValidationVerdict::kConfirmed;
}

TEST_CASE("Evidence gate: at a break-even past the bound S4 asks for a GEMM re-confirmation and does not evict", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 400);  // break-even at 800 s, the GEMM is 800 s old
  std::vector<JobEvent> events;
  for (int t = 0; t < 800; t += 10) {
    FailSlowMitigationDecision d = Step(in, kT0 + t * kSec);
    CHECK(d.actions.empty());
    CHECK_FALSE(d.gemm_wanted);
  }
  FailSlowMitigationDecision d = Step(in, kT0 + 800 * kSec);
  CHECK(d.actions.empty());
  CHECK(d.gemm_wanted);
  CHECK_FALSE(d.refuted);
  CHECK(in.finding.mitigation.strategy == MitigationStrategy::kIgnore);
  CHECK(in.finding.mitigation.replace_machines.empty());
  CHECK(Count(d.events, "evidence older than the 300 s bound (its GEMM ended 0 s after detection): asking for a GEMM "
                        "re-confirmation of machine(s) m1") == 1);
  // Asked again while it has not started (level-based), reported once.
  d = Step(in, kT0 + 801 * kSec);
  CHECK(d.gemm_wanted);
  CHECK(d.events.empty());
  // Running: the ladder waits for it.
  in.finding.validation.state = ValidationState::kGemm;
  d = Step(in, kT0 + 805 * kSec);
  CHECK_FALSE(d.gemm_wanted);
  CHECK(d.actions.empty());

  SECTION("the GEMM still names rank 3: S4 evicts m1") {
    Reconfirmed(in.finding, kT0 + 801 * kSec, kT0 + 830 * kSec, {3});
    d = Step(in, kT0 + 831 * kSec);
    REQUIRE(d.actions.size() == 1);
    CHECK(d.actions[0].machines == std::vector<std::string>{"m1"});
    CHECK(in.finding.mitigation.replace_machines == std::vector<std::string>{"m1"});
  }
  SECTION("the GEMM names no slow GPU: refuted, the ladder stops, nothing is evicted") {
    Reconfirmed(in.finding, kT0 + 801 * kSec, kT0 + 830 * kSec, {});
    d = Step(in, kT0 + 831 * kSec);
    CHECK(d.actions.empty());
    CHECK(d.refuted);
    CHECK_THAT(d.refuted_reason, Catch::Contains("names no slow GPU on machine(s) m1"));
    CHECK(Count(d.events, "S4 replace not taken") == 1);
    CHECK(in.finding.mitigation.stopped_at == kT0 + 831 * kSec);
    CHECK(in.finding.mitigation.replace_machines.empty());
    for (int t = 840; t <= 2000; t += 40) {
      d = Step(in, kT0 + t * kSec);
      CHECK(d.actions.empty());
      CHECK_FALSE(d.gemm_wanted);
      CHECK(d.events.empty());
    }
  }
  SECTION("the GEMM names a GPU of another machine only: refuted, that machine is not evicted either") {
    Reconfirmed(in.finding, kT0 + 801 * kSec, kT0 + 830 * kSec, {0});
    d = Step(in, kT0 + 831 * kSec);
    CHECK(d.actions.empty());
    CHECK(d.refuted);
  }
}

TEST_CASE("Evidence gate: fresh evidence naming one of two attributed machines evicts only that one", "[unit]") {
  FailSlowFinding f = Compute();
  f.ranks = {1, 3};
  f.machines = {"m0", "m1"};
  f.validation.slow_gpus = {3};  // rank 1 measured like its peers
  FailSlowMitigationInput in = Input(f, 10);
  Step(in, kT0);
  FailSlowMitigationDecision d = Step(in, kT0 + 20 * kSec);
  REQUIRE(d.actions.size() == 1);
  CHECK(d.actions[0].machines == std::vector<std::string>{"m1"});
  CHECK(in.finding.mitigation.replace_machines == std::vector<std::string>{"m1"});
}

TEST_CASE("Evidence gate: a fresh validation that measured no slow GPU refutes a compute finding at the break-even", "[unit]") {
  FailSlowFinding f = Compute();
  Reconfirmed(f, kT0 - 20 * kSec, kT0, {});
  FailSlowMitigationInput in = Input(f, 10);
  Step(in, kT0);
  FailSlowMitigationDecision d = Step(in, kT0 + 20 * kSec);
  CHECK(d.actions.empty());
  CHECK(d.refuted);
  CHECK(in.finding.mitigation.stopped_at == kT0 + 20 * kSec);
}

TEST_CASE("Evidence gate: a re-confirmation that failed is asked again only after the bound", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 400);
  for (int t = 0; t <= 800; t += 10) Step(in, kT0 + t * kSec);
  FailSlowValidation& v = in.finding.validation;
  v.state = ValidationState::kDone;
  v.verdict = ValidationVerdict::kFailed;
  v.detail = "timed out pausing j-m1";
  v.started_at = kT0 + 801 * kSec;
  v.ended_at = kT0 + 840 * kSec;
  std::vector<JobEvent> events;
  for (int t = 841; t <= 1140; ++t) {
    FailSlowMitigationDecision d = Step(in, kT0 + t * kSec);
    CHECK_FALSE(d.gemm_wanted);
    CHECK(d.actions.empty());
    events.insert(events.end(), d.events.begin(), d.events.end());
  }
  CHECK(events.size() == 1);  // said once
  CHECK(Count(events, "the last one failed (timed out pausing j-m1)") == 1);
  FailSlowMitigationDecision d = Step(in, kT0 + 1141 * kSec);
  CHECK(d.gemm_wanted);
  CHECK(d.actions.empty());
}

TEST_CASE("Evidence gate: a communication finding asks for its first GEMM at the break-even, once", "[unit]") {
  FailSlowFinding f = Compute();
  f.kind = FailSlowKind::kCommunication;
  f.ranks = {0, 2};
  f.group = "dp 0";
  f.machines = {"m0", "m1"};
  f.validation = FailSlowValidation{};  // deferred: never ran
  FailSlowMitigationInput in = Input(f, 10);
  for (int t = 0; t < 20; ++t) CHECK_FALSE(Step(in, kT0 + t * kSec).gemm_wanted);
  FailSlowMitigationDecision d = Step(in, kT0 + 20 * kSec);
  CHECK(d.gemm_wanted);
  CHECK(d.actions.empty());
  CHECK(Count(d.events, "communication finding whose GEMM never ran: asking for one") == 1);

  SECTION("it measured every GPU normal: no machine to evict, never asked again") {
    Reconfirmed(in.finding, kT0 + 21 * kSec, kT0 + 50 * kSec, {});
    for (int t = 51; t <= 2000; t += 7) {
      d = Step(in, kT0 + t * kSec);
      CHECK_FALSE(d.gemm_wanted);
      CHECK_FALSE(d.refuted);
      CHECK(d.actions.empty());
    }
    CHECK(in.finding.mitigation.stopped_at == 0);
  }
  SECTION("it found rank 0's GPU slow: m0 is evicted") {
    Reconfirmed(in.finding, kT0 + 21 * kSec, kT0 + 50 * kSec, {0});
    d = Step(in, kT0 + 51 * kSec);
    REQUIRE(d.actions.size() == 1);
    CHECK(d.actions[0].machines == std::vector<std::string>{"m0"});
  }
  SECTION("MonitorOnly never asks for a GEMM") {
    FailSlowMitigationInput monitor = Input(f, 10);
    monitor.spec.mitigation = FailSlowMitigation::kMonitorOnly;
    for (int t = 0; t <= 1000; t += 10) CHECK_FALSE(Step(monitor, kT0 + t * kSec).gemm_wanted);
  }
}

// The demo job (4 machines x 2 GPUs, one standby) training a step a second; every agent
// reports the job slow (+200%) from the first round. Finding 1 is marked localized to
// rank 3 (slot 1) with a validation whose GEMM found rank 3 slow, at its detection; the
// profiles are the policy's own tests. The agents acknowledge NCCL modes and answer GEMM
// like the simulator's oracle: rank 3 slow while `gpu_slow`.
struct EvidenceWorld : testing::PlanWorld {
  EvidenceWorld() : PlanWorld(testing::DemoJob()) {
    job.spec.fail_slow.mitigation = FailSlowMitigation::kAuto;
    Step();
    Step();
    REQUIRE(status.attempt == 1);
    slow_machine = status.slots[1].machine_id;
  }
  JobPlan Round(int64_t advance = kSec) {
    now += advance;
    Progress(++step);
    for (const SlotStatus& slot : status.slots) {
      AgentObservation* a = Agent(slot.pod);
      if (a == nullptr) continue;
      a->last_seen = now;  // heartbeats
      a->fail_slow.clear();
      RankFailSlowObservation fs;
      fs.slow = true;
      fs.onset = now - kSec;
      fs.severity = 2.0;
      fs.before_seconds = 0.1;
      fs.after_seconds = 0.3;
      a->fail_slow[slot.index * job.spec.gpus_per_machine] = fs;
    }
    if (!status.fail_slows.empty() && status.fail_slows.back().id == 1 &&
        status.fail_slows.back().state == FailSlowState::kProfiling) {
      FailSlowFinding& f = status.fail_slows.back();
      f.state = FailSlowState::kLocalized;
      f.kind = FailSlowKind::kCompute;
      f.ranks = {3};
      f.machines = {slow_machine};
      f.localized_at = f.detected_at;
      f.validation.state = ValidationState::kDone;
      f.validation.verdict = ValidationVerdict::kConfirmed;
      f.validation.started_at = f.detected_at;
      f.validation.ended_at = f.detected_at;
      f.validation.slow_gpus = {3};
    }
    JobPlan plan = Step();
    events.insert(events.end(), plan.events.begin(), plan.events.end());
    return plan;
  }
  bool OnCommand(const CommandToSend& c, AgentObservation& agent) override {
    if (c.kind == CommandKind::kSetNcclMode) {
      agent.nccl_profiling = c.nccl_profiling;
      agent.command_results[c.id] = CommandResultObservation{c.id, true, 0, "", now, std::nullopt, false, {}};
      return true;
    }
    if (c.kind == CommandKind::kRunDiagnostic && c.diagnostic.kind == DiagnosticKind::kGemm) {
      ++gemms;
      DiagnosticOutcome d;
      d.kind = "gemm";
      d.passed = true;
      d.machine_id = agent.machine_id;
      for (int i = 0; i < job.spec.gpus_per_machine; ++i) {
        const bool slow = gpu_slow && agent.machine_id == slow_machine && i == 1;  // rank 3
        d.figures[absl::StrCat("gpu", i, "_tflops")] = slow ? 0.7 : 2.0;
      }
      agent.command_results[c.id] = CommandResultObservation{c.id, true, 0, "", now, d, false, {}};
      return true;
    }
    return false;
  }
  uint64_t step = 0;
  std::string slow_machine;
  bool gpu_slow = true;
  int gemms = 0;
  std::vector<JobEvent> events;
};

// Opens finding 1, then jumps 400 s (past the 300 s bound) so the break-even comes on
// evidence 400 s old.
void OpenAndAge(EvidenceWorld& w) {
  for (int i = 0; i < 10 && w.status.fail_slows.empty(); ++i) w.Round();
  REQUIRE(w.status.fail_slows.size() == 1);
  w.Round();  // localized, validated (the world's marks)
  REQUIRE(w.status.fail_slows.back().state == FailSlowState::kLocalized);
  REQUIRE(w.status.incidents.empty());
  w.Round(400 * kSec);
}

TEST_CASE("DecideJob: the localized GPU recovered while the job stays slow: the fresh GEMM closes the finding, no eviction", "[unit]") {
  EvidenceWorld w;
  w.gpu_slow = false;  // recovered; the job is still slow for another reason
  OpenAndAge(w);
  for (int i = 0; i < 20; ++i) w.Round();
  INFO(JobStatusToJson(w.status, 2));
  CHECK(w.gemms > 0);  // the re-confirmation ran
  CHECK(w.status.incidents.empty());
  CHECK(w.status.evicted.empty());
  CHECK(w.status.attempt == 1);
  REQUIRE(w.status.fail_slows.size() >= 2);
  const FailSlowFinding& first = w.status.fail_slows[0];
  CHECK(first.id == 1);
  CHECK(first.state == FailSlowState::kRecovered);
  CHECK(first.ended_at != 0);
  CHECK(first.mitigation.strategy != MitigationStrategy::kReplace);
  CHECK(first.mitigation.replace_machines.empty());
  CHECK(first.validation.slow_gpus.empty());
  CHECK(first.validation.verdict == ValidationVerdict::kNotConfirmed);
  CHECK(Count(w.events, "closed: the GEMM of") == 1);
  // The job is still slow: a new finding is profiled from scratch.
  CHECK(w.status.fail_slows.back().id == 2);
  CHECK(w.status.fail_slows.back().ended_at == 0);
  CHECK(w.status.fail_slows.back().state == FailSlowState::kProfiling);
  // Training was paused only for the GEMM and released.
  CHECK_FALSE(ValidationInProgress(first.validation));
}

TEST_CASE("DecideJob: the localized GPU still slow: the fresh GEMM confirms it and S4 evicts its machine", "[unit]") {
  EvidenceWorld w;
  OpenAndAge(w);
  // The break-even round asks for the GEMM instead of evicting.
  CHECK(w.status.incidents.empty());
  CHECK(ValidationInProgress(w.status.fail_slows.back().validation));
  for (int i = 0; i < 20 && w.status.incidents.empty(); ++i) w.Round();
  INFO(JobStatusToJson(w.status, 2));
  CHECK(w.gemms > 0);
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kFailSlow);
  const FailSlowFinding& f = w.status.fail_slows.back();
  CHECK(f.id == 1);
  CHECK(f.validation.slow_gpus == std::vector<int>{3});
  CHECK(f.mitigation.strategy == MitigationStrategy::kReplace);
  CHECK(f.mitigation.replace_machines == std::vector<std::string>{w.slow_machine});
  CHECK(Count(w.events, "asking for a GEMM re-confirmation of machine(s) " + w.slow_machine) == 1);
}

}  // namespace
}  // namespace peregrine
