// Fail-slow mitigation S2 (controller/core/microbatch_mitigation.h): the replicas' speeds
// from the agents' iteration summaries and data-parallel profiles, S2's availability and
// cost, the plan and its commands, idempotence, the re-plan window, withdrawal (restart,
// end of the finding, a refused plan), the ladder S1 -> S2 -> S4 with simulated time on the
// residual loss, and the whole round through DecideJob.
#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "controller/core/decision_engine.h"
#include "controller/core/failslow_mitigation.h"
#include "controller/core/microbatch_mitigation.h"
#include "controller/status_json.h"
#include "tests/controller/core/failslow_fixtures.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSec = 1'000'000'000;

// TP=1 PP=2 DP=4 on 4 machines x 2 GPUs: replica d is ranks d and d + 4.
ParallelLayout Dp4() { return testing::Layout(1, 2, 4, 2); }

// Fills `agents` (one per machine slot, by slot) as if every rank completed `step` with
// replica d running mb[d] micro-batches of t[d] seconds each: every rank's iteration is
// the step time (the slowest replica's busy time plus 2 ms of reduction), and its profile
// of its data-parallel communicator (comm id 100 + group) holds the last 12 reductions,
// one step apart, in each of which it spent the step minus its replica's busy time.
void Observe(const ParallelLayout& layout, std::vector<AgentObservation*> agents, const std::vector<int64_t>& mb,
             const std::vector<double>& t, uint64_t step) {
  double busy_max = 0;
  for (size_t d = 0; d < mb.size(); ++d) busy_max = std::max(busy_max, static_cast<double>(mb[d]) * t[d]);
  const double step_s = busy_max + 0.002;
  for (AgentObservation* a : agents) {
    a->rank_iterations.clear();
    a->comm_profiles.clear();
  }
  for (int r = 0; r < layout.world_size(); ++r) {
    AgentObservation& a = *agents[static_cast<size_t>(layout.MachineOf(r))];
    const int d = layout.Coordinates(r).dp;
    a.rank_iterations[r] = RankIterationObservation{step, step_s, static_cast<uint32_t>(mb[d])};
    a.rank_steps[r] = step;
    const CommGroup g = layout.Group(GroupKind::kData, layout.GroupIndexOf(GroupKind::kData, r));
    CommProfileObservation p;
    p.comm_id = 100 + static_cast<uint64_t>(g.index);
    p.global_rank = r;
    p.comm_size = static_cast<int>(g.ranks.size());
    p.rank_in_comm = static_cast<int>(std::find(g.ranks.begin(), g.ranks.end(), r) - g.ranks.begin());
    const int64_t step_ns = std::llround(step_s * 1e9);
    const int64_t in_collective = std::llround((step_s - static_cast<double>(mb[d]) * t[d]) * 1e9);
    for (int i = 0; i < 12; ++i) {
      const int64_t exit = kNow + i * step_ns;
      p.collectives.push_back(CollectiveObservation{step + static_cast<uint64_t>(i), "allreduce",
                                                    exit - in_collective, exit, -1});
    }
    a.comm_profiles.push_back(std::move(p));
  }
}

std::vector<AgentObservation*> Ptrs(std::vector<AgentObservation>& v) {
  std::vector<AgentObservation*> out;
  for (AgentObservation& a : v) out.push_back(&a);
  return out;
}

std::vector<AgentObservation> Observed(const ParallelLayout& layout, const std::vector<int64_t>& mb,
                                       const std::vector<double>& t, uint64_t step) {
  std::vector<AgentObservation> agents = Agents(layout);
  Observe(layout, Ptrs(agents), mb, t, step);
  return agents;
}

const std::vector<double> kSlow0 = {0.030, 0.010, 0.010, 0.010};  // replica 0's GPU 3x slower
const std::vector<double> kEven = {0.010, 0.010, 0.010, 0.010};

int Count(const std::vector<JobEvent>& events, const std::string& text) {
  int n = 0;
  for (const JobEvent& e : events) n += absl::StrContains(e.message, text) ? 1 : 0;
  return n;
}

MicroBatchPlanInput PlanInput(std::vector<AgentObservation> agents, bool wanted = true) {
  MicroBatchPlanInput in;
  in.job_name = "j";
  in.finding_id = 7;
  in.attempt = 1;
  in.wanted = wanted;
  in.speeds = MeasureReplicaSpeeds(Dp4(), 1, agents);
  in.agents = std::move(agents);
  return in;
}

// Marks every command of `d` pending at its agent (as the registry reports it).
void Pending(const MicroBatchPlanDecision& d, std::vector<AgentObservation>& agents) {
  for (const CommandToSend& c : d.commands) {
    for (AgentObservation& a : agents) {
      if (a.pod == c.pod) a.pending_command_ids.push_back(c.id);
    }
  }
}

TEST_CASE("MeasureReplicaSpeeds: each replica's time per micro-batch from its waiting share, M from mb=", "[unit]") {
  const ParallelLayout layout = Dp4();
  const ReplicaSpeeds s = MeasureReplicaSpeeds(layout, 1, Observed(layout, {4, 4, 4, 4}, kSlow0, 50));
  INFO(s.why);
  REQUIRE(s.ok);
  REQUIRE(s.seconds_per_micro_batch.size() == 4);
  for (size_t d = 0; d < 4; ++d) CHECK(s.seconds_per_micro_batch[d] == Approx(kSlow0[d]).epsilon(1e-6));
  CHECK(s.micro_batches == std::vector<int64_t>{4, 4, 4, 4});
  CHECK(s.global_micro_batches == 16);
  CHECK(s.iteration_seconds == Approx(0.122));
  CHECK(s.min_step == 50);
  CHECK(s.max_step == 50);
  CHECK_THAT(s.detail, Catch::Contains("replica 0: 30.00 ms per micro-batch"));
  // Under a plan the counts are the ranks' own.
  const ReplicaSpeeds p = MeasureReplicaSpeeds(layout, 1, Observed(layout, {1, 5, 5, 5}, kSlow0, 80));
  REQUIRE(p.ok);
  CHECK(p.global_micro_batches == 16);
  CHECK(p.seconds_per_micro_batch[0] == Approx(0.030).epsilon(1e-6));
  CHECK(p.seconds_per_micro_batch[1] == Approx(0.010).epsilon(1e-6));
}

// Pipeline stages: a healthy replica's idle time is data-parallel waiting on one stage
// only (the stage whose reduction waits for the straggler); its other stage waits in
// pipeline receives instead, which are not data-parallel collectives. As measured on the
// local cluster: stage 1 of each healthy replica shows 20% waiting where stage 0 shows 60%.
TEST_CASE("MeasureReplicaSpeeds: with pipeline stages the replica's largest waiting share counts", "[unit]") {
  const ParallelLayout layout = Dp4();
  std::vector<AgentObservation> agents = Observed(layout, {4, 4, 4, 4}, kSlow0, 50);
  // Rewrite the stage-1 ranks (4..7) of the healthy replicas: 20% of the step in their
  // reductions (the rest of their idle time is in pipeline receives).
  for (AgentObservation& a : agents) {
    for (CommProfileObservation& p : a.comm_profiles) {
      if (p.global_rank < 5) continue;
      for (CollectiveObservation& c : p.collectives) c.enter = c.exit - std::llround(0.2 * 0.122 * 1e9);
    }
  }
  const ReplicaSpeeds s = MeasureReplicaSpeeds(layout, 1, agents);
  INFO(s.why << s.detail);
  REQUIRE(s.ok);
  // The stage-0 ranks' waiting (the straggler's level) still sets the healthy replicas'
  // speed: 10 ms per micro-batch, a third of replica 0's.
  CHECK(s.seconds_per_micro_batch[0] == Approx(0.030).epsilon(1e-6));
  for (size_t d = 1; d < 4; ++d) CHECK(s.seconds_per_micro_batch[d] == Approx(0.010).epsilon(1e-6));
}

TEST_CASE("MeasureReplicaSpeeds: what it cannot measure is named", "[unit]") {
  const ParallelLayout layout = Dp4();
  std::vector<AgentObservation> agents = Observed(layout, {4, 4, 4, 4}, kSlow0, 50);
  SECTION("a rank without mb=") {
    agents[2].rank_iterations[5].micro_batches = 0;
    const ReplicaSpeeds s = MeasureReplicaSpeeds(layout, 1, agents);
    CHECK_FALSE(s.follows_plans);
    CHECK(s.why == "the trainer does not read micro-batch plans (no mb= in its progress lines)");
  }
  SECTION("a rank that has not reported") {
    agents[3].rank_iterations.erase(6);
    CHECK(MeasureReplicaSpeeds(layout, 1, agents).why == "rank 6 has not reported an iteration of attempt 1 yet");
  }
  SECTION("another attempt's agents do not count") {
    CHECK_FALSE(MeasureReplicaSpeeds(layout, 2, agents).ok);
  }
  SECTION("no profile of a data-parallel communicator") {
    agents[0].comm_profiles.clear();
    const ReplicaSpeeds s = MeasureReplicaSpeeds(layout, 1, agents);
    CHECK(s.follows_plans);
    CHECK_FALSE(s.ok);
    CHECK_THAT(s.why, Catch::Contains("no profile of rank 0's data-parallel communicator"));
  }
  SECTION("ranks of one replica running different counts") {
    agents[2].rank_iterations[4].micro_batches = 2;
    CHECK_THAT(MeasureReplicaSpeeds(layout, 1, agents).why, Catch::Contains("a plan is taking effect"));
  }
  SECTION("too few collectives") {
    agents[1].comm_profiles[0].collectives.resize(5);
    CHECK_THAT(MeasureReplicaSpeeds(layout, 1, agents).why, Catch::Contains("has 5 collectives (9 needed)"));
  }
}

TEST_CASE("RedistributionAvailability: DP 1, no mb=, balanced replicas, and the cost of the switch", "[unit]") {
  const ParallelLayout layout = Dp4();
  FailSlowSpec spec;
  const ParallelLayout dp1 = testing::Layout(2, 2, 1, 2);
  CHECK(RedistributionAvailability(spec, dp1, {}).unavailable_reason ==
        "data parallelism is 1 (no replicas to move micro-batches between)");
  std::vector<AgentObservation> agents = Observed(layout, {4, 4, 4, 4}, kSlow0, 50);
  agents[0].rank_iterations[0].micro_batches = 0;
  StrategyAvailability a = RedistributionAvailability(spec, layout, MeasureReplicaSpeeds(layout, 1, agents));
  CHECK_FALSE(a.available);
  CHECK(a.unavailable_reason == "the trainer does not read micro-batch plans (no mb= in its progress lines)");
  a = RedistributionAvailability(spec, layout, MeasureReplicaSpeeds(layout, 1, Observed(layout, {4, 4, 4, 4}, kEven, 50)));
  CHECK_FALSE(a.available);
  CHECK_THAT(a.unavailable_reason, Catch::Contains("leave little to redistribute"));
  // A slow replica: the switch costs the steps until from_step at the current 122 ms:
  // 1 + ceil(2 s / 0.122 s) = 18 steps.
  const ReplicaSpeeds slow = MeasureReplicaSpeeds(layout, 1, Observed(layout, {4, 4, 4, 4}, kSlow0, 50));
  CHECK(PlanFromStep(slow) == 68);
  a = RedistributionAvailability(spec, layout, slow);
  REQUIRE(a.available);
  CHECK(a.cost_seconds == Approx(18 * 0.122));
  CHECK_THAT(a.cost_source, Catch::Contains("18 x 122.0 ms"));
  // Once a plan was measured switching, that measurement is the cost.
  a = RedistributionAvailability(spec, layout, slow, 1.75);
  CHECK(a.cost_seconds == 1.75);
  CHECK_THAT(a.cost_source, Catch::Contains("measured"));
  // Following plans but not measured yet (no profiles): offered at the estimated cost, the
  // plan waits for the measurements.
  std::vector<AgentObservation> unprofiled = Observed(layout, {4, 4, 4, 4}, kSlow0, 50);
  for (AgentObservation& x : unprofiled) x.comm_profiles.clear();
  const ReplicaSpeeds unmeasured = MeasureReplicaSpeeds(layout, 1, unprofiled);
  REQUIRE_FALSE(unmeasured.ok);
  a = RedistributionAvailability(spec, layout, unmeasured);
  CHECK(a.available);
  CHECK(a.cost_seconds == Approx(18 * 0.122));
  MicroBatchPlanInput wait = PlanInput(unprofiled);
  const MicroBatchPlanDecision waited = DecideMicroBatchPlan(wait, kNow);
  CHECK(waited.commands.empty());
  CHECK(Count(waited.events, "S2 waits for measurements: no profile of rank 0") == 1);
  // A gain below verifyThreshold leaves S2 out.
  spec.verify_threshold = 0.7;
  CHECK_FALSE(RedistributionAvailability(spec, layout, slow).available);
}

TEST_CASE("DecideMicroBatchPlan: the exact plan goes to every active pod with deterministic ids, once", "[unit]") {
  std::vector<AgentObservation> agents = Observed(Dp4(), {4, 4, 4, 4}, kSlow0, 50);
  MicroBatchPlanInput in = PlanInput(agents);
  MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow);
  const MicroBatchPlanRecord& r = d.record;
  REQUIRE(d.planned);
  CHECK(r.plan_id == 1);
  CHECK(r.counts == std::vector<int64_t>{1, 5, 5, 5});
  CHECK(r.gradient_scale == 0.25);
  CHECK(r.global_micro_batches == 16);
  CHECK(r.from_step == 68);
  CHECK(r.predicted_step_seconds == Approx(0.05));
  CHECK(r.previous_step_seconds == Approx(0.12));
  CHECK(r.decided_at == kNow);
  CHECK(PlanInForce(r));
  REQUIRE(d.commands.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    const CommandToSend& c = d.commands[i];
    CHECK(c.pod == "j-m" + std::to_string(i));
    CHECK(c.id == "j-mbplan-1-j-m" + std::to_string(i));
    CHECK(c.kind == CommandKind::kSetMicroBatchPlan);
    CHECK(c.microbatch_plan.plan_id == 1);
    CHECK(c.microbatch_plan.from_step == 68);
    CHECK(c.microbatch_plan.counts == std::vector<uint32_t>{1, 5, 5, 5});
    CHECK(c.microbatch_plan.gradient_scale == 0.25);
    CHECK(c.microbatch_plan.global_micro_batches == 16);
  }
  REQUIRE(Count(d.events, "S2 plan 1 from step 68") == 1);
  CHECK(Count(d.events, "{30.00,10.00,10.00,10.00} ms") == 1);
  CHECK(Count(d.events, "was {4,4,4,4}") == 1);
  // Deciding again on the applied record: nothing new (the commands are pending).
  Pending(d, agents);
  in = PlanInput(agents);
  in.record = d.record;
  in.next_plan_id = 2;
  const MicroBatchPlanDecision again = DecideMicroBatchPlan(in, kNow);
  CHECK_FALSE(again.planned);
  CHECK(again.commands.empty());
  CHECK(again.events.empty());
  CHECK(again.record.plan_id == 1);
  CHECK(again.record.from_step == 68);
  // A pod whose result is in, or that refused it, gets nothing either; a new pod of the
  // attempt gets the plan.
  agents[0].pending_command_ids.clear();
  agents[0].command_results["j-mbplan-1-j-m0"] = CommandResultObservation{};
  agents[1].pending_command_ids.clear();
  in = PlanInput(agents);
  in.record = d.record;
  const MicroBatchPlanDecision resend = DecideMicroBatchPlan(in, kNow);
  REQUIRE(resend.commands.size() == 1);
  CHECK(resend.commands[0].id == "j-mbplan-1-j-m1");
}

TEST_CASE("DecideMicroBatchPlan: in force once every rank runs it, re-solved at most once per window", "[unit]") {
  const ParallelLayout layout = Dp4();
  MicroBatchPlanInput in = PlanInput(Observed(layout, {4, 4, 4, 4}, kSlow0, 50));
  MicroBatchPlanRecord rec = DecideMicroBatchPlan(in, kNow).record;
  REQUIRE(rec.from_step == 68);
  // Step 68 completed under the plan: in force, no re-plan yet.
  in = PlanInput(Observed(layout, {1, 5, 5, 5}, kSlow0, 68));
  in.record = rec;
  in.next_plan_id = 2;
  MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow + 3 * kSec);
  CHECK(d.record.in_force_at == kNow + 3 * kSec);
  CHECK(Count(d.events, "S2 plan 1 in force 3.00 s after its decision") == 1);
  CHECK_FALSE(d.planned);
  rec = d.record;
  // Replica 1 slows down as well: within the window (20 steps past from_step) nothing changes.
  const std::vector<double> two_slow = {0.030, 0.030, 0.010, 0.010};
  in = PlanInput(Observed(layout, {1, 5, 5, 5}, two_slow, 87));
  in.record = rec;
  in.next_plan_id = 2;
  d = DecideMicroBatchPlan(in, kNow + 5 * kSec);
  CHECK_FALSE(d.planned);
  CHECK(d.record.plan_id == 1);
  // At the end of the window it is re-solved: plan 2 with a new from_step.
  in = PlanInput(Observed(layout, {1, 5, 5, 5}, two_slow, 88));
  in.record = rec;
  in.next_plan_id = 2;
  d = DecideMicroBatchPlan(in, kNow + 6 * kSec);
  REQUIRE(d.planned);
  CHECK(d.record.plan_id == 2);
  CHECK(d.record.counts == std::vector<int64_t>{2, 2, 6, 6});
  CHECK(d.record.from_step > 88);
  CHECK(d.record.in_force_at == 0);
  CHECK(d.record.plans == 2);
  REQUIRE(d.commands.size() == 4);
  CHECK(d.commands[0].id == "j-mbplan-2-j-m0");
  // The GPU recovers: once plan 2 ran a window, the even split is optimal again and the
  // plan is withdrawn.
  rec = d.record;
  rec.in_force_at = kNow + 7 * kSec;
  in = PlanInput(Observed(layout, {2, 2, 6, 6}, kEven, rec.from_step + 20));
  in.record = rec;
  in.next_plan_id = 3;
  d = DecideMicroBatchPlan(in, kNow + 9 * kSec);
  CHECK(d.record.cleared_at == kNow + 9 * kSec);
  CHECK_THAT(d.record.cleared_reason, Catch::Contains("even split optimal again"));
  REQUIRE(d.commands.size() == 4);
  CHECK(d.commands[3].id == "j-mbplan-2-clear-j-m3");
  CHECK(d.commands[3].microbatch_plan.counts.empty());
  CHECK(d.commands[3].microbatch_plan.plan_id == 0);
}

TEST_CASE("DecideMicroBatchPlan: a restart, a refused plan and the end of the finding withdraw it", "[unit]") {
  const ParallelLayout layout = Dp4();
  MicroBatchPlanRecord rec = DecideMicroBatchPlan(PlanInput(Observed(layout, {4, 4, 4, 4}, kSlow0, 50)), kNow).record;
  rec.in_force_at = kNow + kSec;
  SECTION("the attempt changes: the empty plan to the new attempt's pods, a new plan when still wanted") {
    std::vector<AgentObservation> agents = Observed(layout, {4, 4, 4, 4}, kSlow0, 10);
    for (AgentObservation& a : agents) a.attempt = 2;
    MicroBatchPlanInput in = PlanInput(agents);
    in.attempt = 2;
    in.speeds = MeasureReplicaSpeeds(layout, 2, agents);
    in.record = rec;
    in.next_plan_id = 2;
    const MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow + 5 * kSec);
    CHECK(Count(d.events, "S2 plan 1 withdrawn") == 1);
    CHECK(Count(d.events, "attempt 1 -> 2") == 1);
    // The new plan replaces the file; the new attempt's agents removed plan 1 at launch.
    REQUIRE(d.commands.size() == 4);
    CHECK(d.commands[0].id == "j-mbplan-2-j-m0");
    CHECK(d.record.plan_id == 2);
    CHECK(d.record.attempt == 2);
    CHECK(PlanInForce(d.record));
  }
  SECTION("an agent refuses it: withdrawn, and no further plan for the finding") {
    std::vector<AgentObservation> agents = Observed(layout, {1, 5, 5, 5}, kSlow0, 70);
    agents[2].failed_commands["j-mbplan-1-j-m2"] = "counts: 4 counts for 3 replicas";
    MicroBatchPlanInput in = PlanInput(agents);
    in.record = rec;
    const MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow + 2 * kSec);
    CHECK_FALSE(PlanInForce(d.record));
    CHECK(d.record.failed == "j-m2: counts: 4 counts for 3 replicas");
    REQUIRE(d.commands.size() == 4);
    CHECK(d.commands[1].id == "j-mbplan-1-clear-j-m1");
    Pending(d, agents);
    in = PlanInput(agents);
    in.record = d.record;
    const MicroBatchPlanDecision later = DecideMicroBatchPlan(in, kNow + 3 * kSec);
    CHECK_FALSE(later.planned);
    CHECK(later.commands.empty());
  }
  SECTION("the finding ended but the speeds still favour the plan: kept, said once") {
    MicroBatchPlanInput in = PlanInput(Observed(layout, {1, 5, 5, 5}, kSlow0, 90), false);
    in.record = rec;
    const MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow + 2 * kSec);
    CHECK(PlanInForce(d.record));
    CHECK(Count(d.events, "keeping S2 plan 1 after the fail-slow ended") == 1);
    in.record = d.record;
    CHECK(DecideMicroBatchPlan(in, kNow + 3 * kSec).events.empty());
  }
  SECTION("the finding ended and the replicas are even again: withdrawn") {
    MicroBatchPlanInput in = PlanInput(Observed(layout, {1, 5, 5, 5}, kEven, 90), false);
    in.record = rec;
    const MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow + 2 * kSec);
    CHECK_FALSE(PlanInForce(d.record));
    CHECK_THAT(d.record.cleared_reason, Catch::Contains("no longer favour the plan"));
    CHECK(d.commands.size() == 4);
  }
  SECTION("the finding ended and nothing can be measured any more: withdrawn") {
    std::vector<AgentObservation> agents = Observed(layout, {1, 5, 5, 5}, kSlow0, 90);
    for (AgentObservation& a : agents) a.comm_profiles.clear();
    MicroBatchPlanInput in = PlanInput(agents, false);
    in.record = rec;
    const MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow + 2 * kSec);
    CHECK_FALSE(PlanInForce(d.record));
    CHECK_THAT(d.record.cleared_reason, Catch::Contains("can no longer be checked"));
  }
  SECTION("not wanted and no plan: nothing") {
    MicroBatchPlanInput in = PlanInput(Observed(layout, {4, 4, 4, 4}, kSlow0, 50), false);
    const MicroBatchPlanDecision d = DecideMicroBatchPlan(in, kNow);
    CHECK(d.commands.empty());
    CHECK(d.record.plan_id == 0);
  }
}

TEST_CASE("Ladder with S2: S1 -> S2 at the switch cost, then S4 when the residual loss reaches the restart cost", "[unit]") {
  const ParallelLayout layout = Dp4();
  const ReplicaSpeeds slow = MeasureReplicaSpeeds(layout, 1, Observed(layout, {4, 4, 4, 4}, kSlow0, 50));
  FailSlowMitigationInput in;
  in.finding.id = 7;
  in.finding.state = FailSlowState::kLocalized;
  in.finding.kind = FailSlowKind::kCompute;
  in.finding.ranks = {0};
  in.finding.severity = 0.122 / 0.042 - 1;
  in.finding.healthy_iteration_seconds = 0.042;
  in.finding.slow_iteration_seconds = 0.122;
  in.finding.detected_at = kNow;
  in.finding.validation.state = ValidationState::kDone;
  in.finding.validation.verdict = ValidationVerdict::kConfirmed;  // its GEMM named rank 0 (S4's evidence)
  in.finding.validation.slow_gpus = {0};
  in.finding.validation.ended_at = kNow;
  in.rank_machines = {{0, "m0"}};
  in.job_machines = {"m0", "m1", "m2", "m3"};
  in.remap.unavailable_reason = "no";
  in.redistribute = RedistributionAvailability(in.spec, layout, slow);
  REQUIRE(in.redistribute.available);
  in.restart_cost = RestartCost{9.5, "test"};
  const double w1 = (0.122 - 0.042) / 0.122;
  const int s2_round = static_cast<int>(std::ceil(in.redistribute.cost_seconds / w1));
  int64_t s2_at = 0;
  for (int i = 0; i <= s2_round + 1 && s2_at == 0; ++i) {
    const FailSlowMitigationDecision d = DecideFailSlowMitigation(in, kNow + i * kSec);
    in.finding.mitigation = d.record;
    if (!d.actions.empty()) {
      CHECK(d.actions[0].strategy == MitigationStrategy::kRedistribute);
      CHECK(i == s2_round);
      s2_at = kNow + i * kSec;
    }
  }
  REQUIRE(s2_at != 0);
  CHECK(in.finding.mitigation.cost_seconds == Approx(18 * 0.122));
  // The plan runs: 52 ms iterations against the healthy 42 ms, so the residual rent is
  // 10/52 of wall time. The second after the decision is still charged at the slow rate
  // in force when it began (the switch), so S4 comes at 1 + ceil((9.5 - w1) / (10/52)) = 47 s.
  in.measured_iteration_seconds = 0.052;
  const double w2 = (0.052 - 0.042) / 0.052;
  const int s4_round = 1 + static_cast<int>(std::ceil((9.5 - w1) / w2));
  REQUIRE(s4_round == 47);
  int64_t s4_at = 0;
  for (int i = 1; i <= s4_round + 1 && s4_at == 0; ++i) {
    const FailSlowMitigationDecision d = DecideFailSlowMitigation(in, s2_at + i * kSec);
    in.finding.mitigation = d.record;
    if (!d.actions.empty()) {
      CHECK(d.actions[0].strategy == MitigationStrategy::kReplace);
      CHECK(d.actions[0].machines == std::vector<std::string>{"m0"});
      CHECK(i == s4_round);
      CHECK_THAT(d.actions[0].reason, Catch::Contains("52.0 ms"));
      s4_at = s2_at + i * kSec;
    }
  }
  CHECK(s4_at != 0);
  // Without the measurement the finding's own slow level would have escalated 3x sooner.
  CHECK(std::ceil(9.5 / w1) < s4_round / 3.0);
}

TEST_CASE("Status JSON: the S2 plan record round-trips", "[unit]") {
  JobStatus s;
  FailSlowFinding f;
  f.id = 3;
  f.mitigation.strategy = MitigationStrategy::kRedistribute;
  f.mitigation.strategy_started_at = kNow;
  f.mitigation.microbatch_plan =
      DecideMicroBatchPlan(PlanInput(Observed(Dp4(), {4, 4, 4, 4}, kSlow0, 50)), kNow).record;
  f.mitigation.microbatch_plan.in_force_at = kNow + kSec;
  f.mitigation.microbatch_plan.cleared_at = kNow + 2 * kSec;
  f.mitigation.microbatch_plan.cleared_reason = "why";
  s.fail_slows = {f};
  absl::StatusOr<JobStatus> back = JobStatusFromJson(JobStatusToJson(s));
  REQUIRE(back.ok());
  const MicroBatchPlanRecord& b = back->fail_slows[0].mitigation.microbatch_plan;
  CHECK(b.plan_id == 1);
  CHECK(b.counts == std::vector<int64_t>{1, 5, 5, 5});
  CHECK(b.seconds_per_micro_batch == f.mitigation.microbatch_plan.seconds_per_micro_batch);
  CHECK(b.in_force_at == kNow + kSec);
  CHECK(b.cleared_reason == "why");
  CHECK(JobStatusToJson(*back) == JobStatusToJson(s));
}

// The demo job with DP=4 (TP=1 PP=2, 4 machines x 2 GPUs), Auto, one standby; replica 0's
// GPUs compute 3x slower; the finding is localized on rank 0 with its validation done.
// Agents report iteration summaries with mb= and their DP profiles every round; a plan
// command is acknowledged and followed from its from_step.
struct S2World : testing::PlanWorld {
  S2World() : PlanWorld(Dp4Job()) {
    Step();
    Step();
    REQUIRE(status.attempt == 1);
    slow_machine = status.slots[0].machine_id;
  }
  static TrainingJob Dp4Job() {
    TrainingJob job = testing::DemoJob();
    job.spec.parallelism.tensor = 1;
    job.spec.parallelism.data = 4;
    return job;
  }
  JobPlan Round() {
    now += kSec;
    step += 10;
    Progress(step);
    std::vector<AgentObservation*> agents;
    for (const SlotStatus& slot : status.slots) agents.push_back(Agent(slot.pod));
    std::vector<int64_t> mb = {4, 4, 4, 4};
    if (!counts.empty() && step >= from_step) mb = counts;
    const bool slow_in_job = status.slots[0].machine_id == slow_machine;
    Observe(layout, agents, mb, slow_in_job ? kSlow0 : kEven, step);
    for (AgentObservation* a : agents) {
      a->fail_slow.clear();
      if (a->machine_id != slow_machine) continue;
      RankFailSlowObservation fs;
      fs.slow = true;
      fs.onset = now - kSec;
      fs.severity = 1.9;
      fs.before_seconds = 0.042;
      fs.after_seconds = 0.122;
      a->fail_slow[0] = fs;
    }
    if (!status.fail_slows.empty() && status.fail_slows.back().ended_at == 0) {
      FailSlowFinding& f = status.fail_slows.back();
      f.state = FailSlowState::kLocalized;
      f.kind = FailSlowKind::kCompute;
      f.ranks = {0};
      f.machines = {slow_machine};
      f.validation.state = ValidationState::kDone;
      f.validation.verdict = ValidationVerdict::kConfirmed;
      f.validation.slow_gpus = {0};  // its GEMM named rank 0 when detected (S4's evidence)
      if (f.validation.ended_at == 0) f.validation.ended_at = f.detected_at;
    }
    JobPlan plan = Step();
    events.insert(events.end(), plan.events.begin(), plan.events.end());
    return plan;
  }
  bool OnCommand(const CommandToSend& command, AgentObservation& agent) override {
    if (command.kind == CommandKind::kSetNcclMode) {
      agent.nccl_profiling = command.nccl_profiling;
      return true;
    }
    if (command.kind != CommandKind::kSetMicroBatchPlan) return false;
    agent.command_results[command.id] = CommandResultObservation{command.id, true, 0, "", now, std::nullopt, false, {}};
    ++plan_commands;
    counts.assign(command.microbatch_plan.counts.begin(), command.microbatch_plan.counts.end());
    from_step = command.microbatch_plan.from_step;
    return true;
  }
  const ParallelLayout layout = Dp4();
  uint64_t step = 0, from_step = 0;
  std::vector<int64_t> counts;
  int plan_commands = 0;
  std::string slow_machine;
  std::vector<JobEvent> events;
};

TEST_CASE("DecideJob: S2 sends the plan to every pod, S4 replaces the machine on the residual loss, the plan is cleared", "[unit]") {
  S2World w;
  for (int i = 0; i < 20 && w.counts.empty(); ++i) w.Round();
  INFO(JobStatusToJson(w.status, 2));
  REQUIRE(w.counts == std::vector<int64_t>{1, 5, 5, 5});
  CHECK(w.plan_commands == 4);
  REQUIRE(!w.status.fail_slows.empty());
  CHECK(w.status.fail_slows.back().mitigation.strategy == MitigationStrategy::kRedistribute);
  CHECK(Count(w.events, "S2 redistribute: S2 redistribute") == 1);
  CHECK(Count(w.events, "S2 plan 1 from step") == 1);
  CHECK(w.status.incidents.empty());
  // The plan runs; the residual slowdown (52 ms against 42 ms) accumulates against the
  // start-up cost until S4 evicts the slow machine; the restart withdraws the plan.
  for (int i = 0; i < 200 && w.status.attempt == 1; ++i) w.Round();
  for (int i = 0; i < 5; ++i) w.Round();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kFailSlow);
  CHECK(w.status.incidents[0].machines == std::vector<std::string>{w.slow_machine});
  CHECK(w.status.attempt == 2);
  CHECK(Count(w.events, "S2 plan 1 in force") == 1);
  CHECK(Count(w.events, "S4 replace: evict machine(s) " + w.slow_machine) == 1);
  CHECK(Count(w.events, "S2 plan 1 withdrawn") == 1);
  CHECK(w.plan_commands == 8);  // the plan, then the empty plan
  CHECK(w.counts.empty());
}

}  // namespace
}  // namespace peregrine
