// The fail-slow mitigation ladder (controller/core/failslow_mitigation.h) with simulated
// time: S1 below the threshold, S2/S3 reported unavailable once, the ski-rental break-even
// exactly at the measured cost, MonitorOnly, a finding that ends, a controller restart
// (the record round-trips through the status JSON), idempotence, and the measured costs.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "controller/core/decision_engine.h"
#include "controller/core/failslow_mitigation.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSec = 1'000'000'000;
constexpr int64_t kT0 = 1'700'000'000 * kSec;

// A compute fail-slow of rank 3 on machine "m1", localized, validation done: iteration
// 1 s -> 2 s (severity 1, half of wall time wasted), detected at kT0.
FailSlowFinding Compute() {
  FailSlowFinding f;
  f.id = 7;
  f.state = FailSlowState::kLocalized;
  f.kind = FailSlowKind::kCompute;
  f.ranks = {3};
  f.machines = {"m1"};
  f.severity = 1.0;
  f.tier = FailSlowTier::kReplace;
  f.healthy_iteration_seconds = 1.0;
  f.slow_iteration_seconds = 2.0;
  f.onset = kT0 - 5 * kSec;
  f.detected_at = kT0;
  f.localized_at = kT0;
  f.validation.state = ValidationState::kDone;
  f.validation.verdict = ValidationVerdict::kConfirmed;
  f.validation.ended_at = kT0;    // its GEMM named rank 3 at detection (S4's evidence,
  f.validation.slow_gpus = {3};   // fresh for 300 s: failslow_evidence_test.cc)
  return f;
}

FailSlowMitigationInput Input(const FailSlowFinding& f, double restart_cost = 10) {
  FailSlowMitigationInput in;
  in.finding = f;
  in.rank_machines = {{2, "m1"}, {3, "m1"}, {0, "m0"}, {1, "m0"}};
  in.job_machines = {"m0", "m1"};
  in.redistribute.unavailable_reason = "no delivery path to the trainer";
  in.remap.unavailable_reason = "no delivery path to the trainer either";
  in.restart_cost.seconds = restart_cost;
  in.restart_cost.source = "test measurement";
  return in;
}

// Runs the ladder at `now` and applies the record to the finding.
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

std::string RecordJson(const FailSlowFinding& f) {
  JobStatus s;
  s.fail_slows = {f};
  return JobStatusToJson(s);
}

TEST_CASE("Ladder: below mitigateThreshold S1 records and watches, no loss and no action", "[unit]") {
  FailSlowFinding f = Compute();
  f.severity = 0.05;
  f.slow_iteration_seconds = 1.05;
  FailSlowMitigationInput in = Input(f);
  std::vector<JobEvent> events;
  for (int t = 0; t <= 1000; t += 10) {
    FailSlowMitigationDecision d = Step(in, kT0 + t * kSec);
    CHECK(d.actions.empty());
    events.insert(events.end(), d.events.begin(), d.events.end());
  }
  CHECK(in.finding.mitigation.strategy == MitigationStrategy::kIgnore);
  CHECK(in.finding.mitigation.loss_seconds == 0);
  CHECK(Count(events, "below mitigateThreshold") == 1);
  CHECK(Count(events, "unavailable") == 0);
}

TEST_CASE("Ladder: break-even exactly at the measured restart cost evicts the slow machine", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 10);
  // Half of wall time is wasted: the loss reaches 10 s after 20 s.
  FailSlowMitigationDecision d = Step(in, kT0);
  CHECK(d.actions.empty());
  FailSlowMitigationInput just_before = in;
  d = Step(just_before, kT0 + 19'999'999'999);
  CHECK(d.actions.empty());
  CHECK(just_before.finding.mitigation.loss_seconds < 10);
  CHECK(just_before.finding.mitigation.strategy == MitigationStrategy::kIgnore);
  d = Step(in, kT0 + 20 * kSec);
  REQUIRE(d.actions.size() == 1);
  CHECK(d.actions[0].strategy == MitigationStrategy::kReplace);
  CHECK(d.actions[0].machines == std::vector<std::string>{"m1"});
  const FailSlowMitigationRecord& r = in.finding.mitigation;
  CHECK(r.strategy == MitigationStrategy::kReplace);
  CHECK(r.replace_machines == std::vector<std::string>{"m1"});
  CHECK(r.break_even_at == kT0 + 20 * kSec);
  CHECK(r.cost_seconds == 10);
  CHECK(r.cost_source == "test measurement");
  // The event carries the figures that drove it.
  REQUIRE(Count(d.events, "S4 replace: evict machine(s) m1") == 1);
  CHECK(Count(d.events, "accumulated loss 10.00 s") == 1);
  CHECK(Count(d.events, "one-time cost 10.00 s (test measurement)") == 1);
  CHECK(Count(d.events, "severity +100%") == 1);
  // Once on S4 the ladder does nothing more (the decision engine carries it out).
  d = Step(in, kT0 + 100 * kSec);
  CHECK(d.actions.empty());
  CHECK(d.events.empty());
}

TEST_CASE("Ladder: escalation goes S1 -> S2 -> S4, S3 reported unavailable once", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 10);
  in.redistribute.available = true;
  in.redistribute.cost_seconds = 2;
  in.redistribute.cost_source = "test S2";
  std::vector<MitigationStrategy> order;
  std::vector<JobEvent> events;
  for (int t = 0; t <= 100; ++t) {
    FailSlowMitigationDecision d = Step(in, kT0 + t * kSec);
    for (const MitigationAction& a : d.actions) order.push_back(a.strategy);
    events.insert(events.end(), d.events.begin(), d.events.end());
  }
  REQUIRE(order == std::vector<MitigationStrategy>{MitigationStrategy::kRedistribute, MitigationStrategy::kReplace});
  CHECK(Count(events, "S3 remap unavailable for this job: no delivery path to the trainer either") == 1);
  CHECK(Count(events, "S2 redistribute unavailable") == 0);
  // S2 at 4 s (2 s of loss), then a fresh rent on S2: S4 at 4 + 20 s.
  CHECK(in.finding.mitigation.strategy_started_at == kT0 + 24 * kSec);
  CHECK(Count(events, "on S2 redistribute since 20.0 s") == 1);
}

TEST_CASE("Ladder: S2 and S3 unavailable are each reported once per finding", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 1e9);  // never reaches the cost
  std::vector<JobEvent> events;
  for (int t = 0; t <= 50; ++t) {
    FailSlowMitigationDecision d = Step(in, kT0 + t * kSec);
    CHECK(d.actions.empty());
    events.insert(events.end(), d.events.begin(), d.events.end());
  }
  CHECK(Count(events, "S2 redistribute unavailable for this job: no delivery path to the trainer") == 1);
  CHECK(Count(events, "S3 remap unavailable for this job") == 1);
  // A new finding reports them again.
  FailSlowMitigationInput next = Input(Compute(), 1e9);
  next.finding.id = 8;
  FailSlowMitigationDecision d = Step(next, kT0 + 60 * kSec);
  CHECK(Count(d.events, "unavailable for this job") == 2);
}

TEST_CASE("Ladder: MonitorOnly reports the break-even and never acts", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 10);
  in.spec.mitigation = FailSlowMitigation::kMonitorOnly;
  std::vector<JobEvent> events;
  for (int t = 0; t <= 1000; t += 5) {
    FailSlowMitigationDecision d = Step(in, kT0 + t * kSec);
    CHECK(d.actions.empty());
    events.insert(events.end(), d.events.begin(), d.events.end());
  }
  const FailSlowMitigationRecord& r = in.finding.mitigation;
  CHECK(r.strategy == MitigationStrategy::kIgnore);
  CHECK(r.replace_machines.empty());
  CHECK(r.break_even_at == kT0 + 20 * kSec);
  CHECK(r.loss_seconds == Approx(500));
  CHECK(Count(events, "Auto would move to S4 replace (evict machine(s) m1); mitigation MonitorOnly: no action") == 1);
}

TEST_CASE("Ladder: a finding that ends stops the ladder", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 10);
  Step(in, kT0);
  Step(in, kT0 + 10 * kSec);
  in.finding.ended_at = kT0 + 12 * kSec;
  in.finding.state = FailSlowState::kRecovered;
  FailSlowMitigationDecision d = Step(in, kT0 + 14 * kSec);
  CHECK(d.actions.empty());
  CHECK(Count(d.events, "the ladder stops on S1 ignore after 6.00 s") == 1);
  CHECK(in.finding.mitigation.stopped_at == kT0 + 14 * kSec);
  // Past the break-even time nothing happens any more.
  for (int t = 15; t <= 100; t += 5) {
    d = Step(in, kT0 + t * kSec);
    CHECK(d.actions.empty());
    CHECK(d.events.empty());
  }
  CHECK(in.finding.mitigation.loss_seconds == 6);
  // A finding that ended before the ladder ever saw it is left as is.
  FailSlowFinding old = Compute();
  old.ended_at = kT0 + kSec;
  FailSlowMitigationInput gone = Input(old);
  d = Step(gone, kT0 + 50 * kSec);
  CHECK(d.events.empty());
  CHECK(RecordJson(gone.finding) == RecordJson(old));
}

TEST_CASE("Ladder: a controller restart mid-ladder continues where it was (record through status JSON)", "[unit]") {
  // Without a restart.
  FailSlowMitigationInput straight = Input(Compute(), 10);
  std::vector<MitigationAction> straight_actions;
  for (int t = 0; t <= 30; t += 3) {
    for (auto& a : Step(straight, kT0 + t * kSec).actions) straight_actions.push_back(a);
  }
  // With the record persisted and read back (a new controller) after every round.
  FailSlowMitigationInput restarted = Input(Compute(), 10);
  std::vector<MitigationAction> restarted_actions;
  for (int t = 0; t <= 30; t += 3) {
    for (auto& a : Step(restarted, kT0 + t * kSec).actions) restarted_actions.push_back(a);
    JobStatus s;
    s.fail_slows = {restarted.finding};
    absl::StatusOr<JobStatus> back = JobStatusFromJson(JobStatusToJson(s));
    REQUIRE(back.ok());
    REQUIRE(back->fail_slows.size() == 1);
    CHECK(JobStatusToJson(*back) == JobStatusToJson(s));
    restarted.finding = back->fail_slows[0];
  }
  REQUIRE(restarted_actions.size() == 1);
  REQUIRE(straight_actions.size() == 1);
  CHECK(restarted_actions[0].machines == straight_actions[0].machines);
  CHECK(restarted.finding.mitigation.break_even_at == kT0 + 21 * kSec);  // the first round at >= 20 s
  CHECK(RecordJson(restarted.finding) == RecordJson(straight.finding));
}

TEST_CASE("Ladder: deciding again on the applied record at the same time changes nothing", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 10);
  in.spec.mitigation = GENERATE(FailSlowMitigation::kAuto, FailSlowMitigation::kMonitorOnly);
  for (int t : {0, 7, 20, 33}) {
    Step(in, kT0 + t * kSec);
    const std::string applied = RecordJson(in.finding);
    FailSlowMitigationDecision again = DecideFailSlowMitigation(in, kT0 + t * kSec);
    CHECK(again.actions.empty());
    CHECK(again.events.empty());
    in.finding.mitigation = again.record;
    CHECK(RecordJson(in.finding) == applied);
  }
}

TEST_CASE("Ladder: without a measured restart cost it does not escalate and says so", "[unit]") {
  FailSlowMitigationInput in = Input(Compute(), 0);
  in.restart_cost.source.clear();
  std::vector<JobEvent> events;
  for (int t = 0; t <= 1000; t += 10) {
    FailSlowMitigationDecision d = Step(in, kT0 + t * kSec);
    CHECK(d.actions.empty());
    events.insert(events.end(), d.events.begin(), d.events.end());
  }
  CHECK(Count(events, "one-time cost is not measured yet") == 1);
  CHECK(in.finding.mitigation.loss_seconds == Approx(500));
  // A measurement arrives: the accumulated loss already exceeds it (and a GEMM
  // re-confirmed rank 3 just before: the detection's is past S4's evidence bound).
  in.restart_cost = RestartCost{30, "measured later"};
  in.finding.validation.ended_at = kT0 + 1000 * kSec;
  FailSlowMitigationDecision d = Step(in, kT0 + 1001 * kSec);
  REQUIRE(d.actions.size() == 1);
  CHECK(Count(d.events, "(measured later)") == 1);
}

TEST_CASE("Ladder: S4 waits for localization, the validation and an attributed machine", "[unit]") {
  SECTION("profiling") {
    FailSlowFinding f = Compute();
    f.state = FailSlowState::kProfiling;
    f.kind = FailSlowKind::kUnlocalized;
    FailSlowMitigationInput in = Input(f, 1);
    std::vector<JobEvent> events;
    for (int t = 0; t <= 10; ++t) {
      auto d = Step(in, kT0 + t * kSec);
      CHECK(d.actions.empty());
      events.insert(events.end(), d.events.begin(), d.events.end());
    }
    CHECK(Count(events, "not localized yet") == 1);
    // Localized, validation paused: still waits; once done, the rent already paid counts.
    in.finding.state = FailSlowState::kLocalized;
    in.finding.kind = FailSlowKind::kCompute;
    in.finding.validation.state = ValidationState::kGemm;
    auto d = Step(in, kT0 + 11 * kSec);
    CHECK(d.actions.empty());
    CHECK(Count(d.events, "validation (training paused) is in progress") == 1);
    in.finding.validation.state = ValidationState::kDone;
    d = Step(in, kT0 + 12 * kSec);
    REQUIRE(d.actions.size() == 1);
    CHECK(d.actions[0].machines == std::vector<std::string>{"m1"});
  }
  SECTION("a communication finding without attributed GPUs stays") {
    FailSlowFinding f = Compute();
    f.kind = FailSlowKind::kCommunication;
    f.ranks = {0, 2};
    f.group = "dp 0";
    f.machines = {"m0", "m1"};
    f.validation.slow_gpus.clear();
    FailSlowMitigationInput in = Input(f, 1);
    std::vector<JobEvent> events;
    for (int t = 0; t <= 100; t += 10) {
      auto d = Step(in, kT0 + t * kSec);
      CHECK(d.actions.empty());
      events.insert(events.end(), d.events.begin(), d.events.end());
    }
    CHECK(Count(events, "communication fail-slow of dp 0: no machine is attributed") == 1);
    // The validation found rank 0's GPU slow: its machine is evicted.
    in.finding.validation.slow_gpus = {0};
    auto d = Step(in, kT0 + 101 * kSec);
    REQUIRE(d.actions.size() == 1);
    CHECK(d.actions[0].machines == std::vector<std::string>{"m0"});
  }
  SECTION("compute+communication evicts only the slow ranks' machines") {
    FailSlowFinding f = Compute();
    f.kind = FailSlowKind::kComputeAndCommunication;
    f.group = "dp 0";
    f.machines = {"m1", "m0"};
    FailSlowMitigationInput in = Input(f, 1);
    Step(in, kT0);
    auto d = Step(in, kT0 + 2 * kSec);
    REQUIRE(d.actions.size() == 1);
    CHECK(d.actions[0].machines == std::vector<std::string>{"m1"});
  }
  SECTION("a machine that left the job") {
    FailSlowMitigationInput in = Input(Compute(), 1);
    in.job_machines = {"m0", "m9"};
    std::vector<JobEvent> events;
    for (int t = 0; t <= 50; t += 5) {
      auto d = Step(in, kT0 + t * kSec);
      CHECK(d.actions.empty());
      events.insert(events.end(), d.events.begin(), d.events.end());
    }
    CHECK(Count(events, "machine m1 (rank 3) is no longer in the job") == 1);
  }
}

TEST_CASE("MeasureRestartCost: median of recovered incidents, else the start-up, else nothing", "[unit]") {
  JobStatus s;
  s.mean_iteration_seconds = 0.5;
  CHECK(MeasureRestartCost(s, 1.0).seconds == 0);
  s.first_step_seconds = 4.5;
  RestartCost c = MeasureRestartCost(s, 1.0);
  CHECK(c.seconds == 4.5);
  CHECK_THAT(c.source, Catch::Contains("start-up"));
  // A restart now would also redo the steps since the newest complete checkpoint.
  s.last_completed_step = 37;
  s.checkpoint.last_complete_step = 30;
  c = MeasureRestartCost(s, 1.0);
  CHECK(c.seconds == 4.5 + 7);
  CHECK_THAT(c.source, Catch::Contains("7 step(s) since the newest complete checkpoint"));
  s.last_completed_step = 0;
  s.checkpoint.last_complete_step = 0;
  auto incident = [](int64_t detected, int64_t resumed, uint64_t redone) {
    Incident i;
    i.detected_at = detected;
    i.decided_at = detected + kSec;
    i.resumed_at = resumed;
    i.steps_redone = redone;
    i.actions = {"restart"};
    return i;
  };
  s.incidents.push_back(incident(kT0, kT0 + 10 * kSec, 2));  // 10 + 2
  s.incidents.push_back(incident(kT0, kT0 + 3 * kSec, 0));   // 3
  s.incidents.push_back(incident(kT0, kT0 + 20 * kSec, 1));  // 21
  Incident false_alarm = incident(kT0, kT0 + kSec, 0);
  false_alarm.actions.clear();  // "signal not confirmed": nothing restarted
  s.incidents.push_back(false_alarm);
  Incident open = incident(kT0, 0, 0);  // still recovering
  s.incidents.push_back(open);
  c = MeasureRestartCost(s, 1.0);
  CHECK(c.seconds == 12);
  CHECK_THAT(c.source, Catch::Contains("median of the job's 3 recovered incident(s)"));
  // Without the finding's healthy iteration time, the job's mean one prices the redone steps.
  CHECK(MeasureRestartCost(s, 0).seconds == 11);
  s.incidents.pop_back();
  s.incidents.pop_back();
  s.incidents.pop_back();
  CHECK(MeasureRestartCost(s, 1.0).seconds == 7.5);  // (3 + 12) / 2
}

TEST_CASE("PendingFailSlowReplacement: the slots of the machines the ladder replaces", "[unit]") {
  JobStatus s;
  s.slots = {SlotStatus{0, "j-m0", "m0", true}, SlotStatus{1, "j-m1", "m1", true}};
  FailSlowFinding f = Compute();
  s.fail_slows = {f};
  CHECK_FALSE(PendingFailSlowReplacement(s, 0).has_value());
  s.fail_slows[0].mitigation.strategy = MitigationStrategy::kReplace;
  s.fail_slows[0].mitigation.replace_machines = {"m1"};
  s.fail_slows[0].mitigation.detail = "figures";
  std::optional<FailSlowReplacement> r = PendingFailSlowReplacement(s, 0);
  REQUIRE(r.has_value());
  CHECK(r->slots == std::vector<int>{1});
  CHECK(r->finding_id == 7);
  CHECK_THAT(r->reason, Catch::Contains("figures"));
  // Its incident opened: pending while that incident is the open one only.
  s.fail_slows[0].mitigation.incident_id = 4;
  CHECK(PendingFailSlowReplacement(s, 4).has_value());
  CHECK_FALSE(PendingFailSlowReplacement(s, 0).has_value());
  CHECK_FALSE(PendingFailSlowReplacement(s, 5).has_value());
  // The machine was replaced (a standby holds the slot), or the slowdown ended: nothing.
  s.slots[1].machine_id = "m7";
  CHECK_FALSE(PendingFailSlowReplacement(s, 4).has_value());
  s.slots[1].machine_id = "m1";
  s.fail_slows[0].ended_at = kT0 + kSec;
  CHECK_FALSE(PendingFailSlowReplacement(s, 4).has_value());
}

TEST_CASE("Status JSON: the mitigation record and the start-up round-trip, a bad strategy is named", "[unit]") {
  JobStatus s;
  s.first_step_seconds = 3.25;
  FailSlowFinding f = Compute();
  FailSlowMitigationRecord& m = f.mitigation;
  m.strategy = MitigationStrategy::kReplace;
  m.strategy_started_at = kT0 + 20 * kSec;
  m.accounted_until = kT0 + 20 * kSec;
  m.loss_rate = 0.5;
  m.loss_seconds = 1.5;
  m.reported_unavailable = {MitigationStrategy::kRedistribute, MitigationStrategy::kRemap};
  m.blocker = "waiting";
  m.cost_seconds = 10;
  m.cost_source = "measured";
  m.break_even_at = kT0 + 20 * kSec;
  m.replace_machines = {"m1"};
  m.incident_id = 3;
  m.stopped_at = kT0 + 40 * kSec;
  m.detail = "figures";
  s.fail_slows = {f};
  absl::StatusOr<JobStatus> back = JobStatusFromJson(JobStatusToJson(s));
  REQUIRE(back.ok());
  CHECK(back->first_step_seconds == 3.25);
  REQUIRE(back->fail_slows.size() == 1);
  const FailSlowMitigationRecord& b = back->fail_slows[0].mitigation;
  CHECK(b.strategy == MitigationStrategy::kReplace);
  CHECK(b.reported_unavailable == m.reported_unavailable);
  CHECK(b.replace_machines == m.replace_machines);
  CHECK(b.incident_id == 3);
  CHECK(b.stopped_at == m.stopped_at);
  CHECK(JobStatusToJson(*back) == JobStatusToJson(s));
  // A finding the ladder has not seen carries no record.
  JobStatus fresh;
  fresh.fail_slows = {Compute()};
  CHECK_THAT(JobStatusToJson(fresh), !Catch::Contains("mitigation"));
  std::string text = JobStatusToJson(s);
  text.replace(text.find("\"strategy\":\"replace\""), 20, "\"strategy\":\"explode\"");
  absl::StatusOr<JobStatus> bad = JobStatusFromJson(text);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("failSlows[].mitigation.strategy"));
}

// The demo job (4 machines x 2 GPUs, one standby) training one step a second; rank 3
// (slot 1) reports a verified 3x slowdown while its machine is in the job, and the
// finding is marked localized with its validation done (the profiles and the pause are
// the fail-slow policy's and validation's own tests).
struct LadderWorld : testing::PlanWorld {
  explicit LadderWorld(FailSlowMitigation mitigation) : PlanWorld(testing::DemoJob()) {
    job.spec.fail_slow.mitigation = mitigation;
    Step();
    Step();
    REQUIRE(status.attempt == 1);
    slow_machine = status.slots[1].machine_id;
  }
  JobPlan Round() {
    now += kSec;
    Progress(++step);
    for (const SlotStatus& slot : status.slots) {
      AgentObservation* a = Agent(slot.pod);
      if (a == nullptr) continue;
      a->fail_slow.clear();
      if (slot.machine_id != slow_machine) continue;
      RankFailSlowObservation fs;
      fs.slow = true;
      fs.onset = now - kSec;
      fs.severity = 2.0;
      fs.before_seconds = 0.1;
      fs.after_seconds = 0.3;
      a->fail_slow[3] = fs;
    }
    if (!status.fail_slows.empty() && status.fail_slows.back().ended_at == 0) {
      FailSlowFinding& f = status.fail_slows.back();
      f.state = FailSlowState::kLocalized;
      f.kind = FailSlowKind::kCompute;
      f.ranks = {3};
      f.machines = {slow_machine};
      f.validation.state = ValidationState::kDone;
      f.validation.verdict = ValidationVerdict::kConfirmed;
      f.validation.slow_gpus = {3};  // its GEMM named rank 3 when detected (S4's evidence)
      if (f.validation.ended_at == 0) f.validation.ended_at = f.detected_at;
    }
    JobPlan plan = Step();
    events.insert(events.end(), plan.events.begin(), plan.events.end());
    return plan;
  }
  // Profiling on/off is acknowledged; the training goes on.
  bool OnCommand(const CommandToSend& command, AgentObservation& agent) override {
    if (command.kind != CommandKind::kSetNcclMode) return false;
    agent.nccl_profiling = command.nccl_profiling;
    return true;
  }
  uint64_t step = 0;
  std::string slow_machine;
  std::vector<JobEvent> events;
};

TEST_CASE("DecideJob: the ladder's S4 evicts the slow machine once, under a FailSlow incident", "[unit]") {
  LadderWorld w(FailSlowMitigation::kAuto);
  for (int i = 0; i < 40 && w.status.incidents.empty(); ++i) w.Round();
  INFO(JobStatusToJson(w.status, 2));
  REQUIRE(w.status.first_step_seconds > 0);
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kFailSlow);
  REQUIRE(!w.status.fail_slows.empty());
  const FailSlowMitigationRecord& m = w.status.fail_slows.back().mitigation;
  CHECK(m.strategy == MitigationStrategy::kReplace);
  CHECK(m.incident_id == w.status.incidents[0].id);
  CHECK_THAT(m.cost_source, Catch::Contains("start-up"));
  CHECK(m.cost_seconds == Approx(w.status.first_step_seconds));
  // The triage window passes: the machine is evicted and quarantined, a standby takes the
  // slot, the job restarts; the finding ends with the slow machine gone.
  for (int i = 0; i < 10; ++i) w.Round();
  REQUIRE(w.status.incidents.size() == 1);
  const Incident& inc = w.status.incidents[0];
  CHECK(inc.machines == std::vector<std::string>{w.slow_machine});
  CHECK_THAT(inc.signal, Catch::Contains("accumulated loss"));
  CHECK_THAT(inc.decision, Catch::Contains("fail-slow mitigation S4"));
  CHECK(inc.resumed_at != 0);
  REQUIRE(w.status.evicted.size() == 1);
  CHECK(w.status.evicted[0].machine_id == w.slow_machine);
  CHECK(w.status.evicted[0].machine_fault);
  CHECK(w.quarantined == std::vector<std::string>{w.slow_machine});
  CHECK(w.status.slots[1].machine_id != w.slow_machine);
  CHECK(w.status.attempt == 2);
  CHECK(w.status.fail_slows.back().ended_at != 0);
  CHECK(w.status.fail_slows.back().mitigation.stopped_at != 0);
  CHECK(Count(w.events, "S4 replace: evict machine(s) " + w.slow_machine) == 1);
  // Nothing more happens afterwards.
  for (int i = 0; i < 30; ++i) w.Round();
  CHECK(w.status.incidents.size() == 1);
  CHECK(w.status.evicted.size() == 1);
}

TEST_CASE("DecideJob: with MonitorOnly the ladder reports the break-even and nothing is evicted", "[unit]") {
  LadderWorld w(FailSlowMitigation::kMonitorOnly);
  for (int i = 0; i < 60; ++i) w.Round();
  INFO(JobStatusToJson(w.status, 2));
  REQUIRE(!w.status.fail_slows.empty());
  CHECK(w.status.fail_slows.back().ended_at == 0);
  CHECK(w.status.fail_slows.back().mitigation.break_even_at != 0);
  CHECK(w.status.incidents.empty());
  CHECK(w.status.evicted.empty());
  CHECK(w.status.attempt == 1);
  CHECK(Count(w.events, "mitigation MonitorOnly: no action") == 1);
}

}  // namespace
}  // namespace peregrine
