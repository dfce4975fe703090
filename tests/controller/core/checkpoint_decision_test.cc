// The decision engine with in-memory checkpoints (decide_checkpoint.cc, checkpoint_policy.h):
// the plan in every assignment, the complete step from the agents' reports, restarts that
// resume after it, the restore fallback, store events, and the progress and start-up
// rules that came with a real client.
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "controller/core/checkpoint_policy.h"
#include "controller/core/decision_engine.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

TrainingJob CheckpointJob(int interval = 10) {
  TrainingJob job = testing::ParsedJob(testing::DemoManifest() +
                                       "  checkpoint: {intervalSteps: " + std::to_string(interval) +
                                       ", memoryLimit: 8Gi, backupBandwidth: 100Mi, persistEverySteps: 50, "
                                       "persistPath: /ckpt}\n");
  return job;
}

struct World : testing::PlanWorld {
  explicit World(TrainingJob job = CheckpointJob()) : PlanWorld(std::move(job)) {
    Step();
    Step();
    REQUIRE(status.attempt == 1);
  }
  // Every slot's agent reports `backed_up` stored and backed up.
  void Report(const std::vector<uint64_t>& backed_up) {
    for (const SlotStatus& s : status.slots) ReportSlot(s.index, backed_up);
  }
  void ReportSlot(int slot, const std::vector<uint64_t>& backed_up) {
    CheckpointReportObservation r;
    r.stored_steps = backed_up;
    r.backed_up_steps = backed_up;
    Agent(status.slots[slot].pod)->checkpoint = r;
  }
  // Slot `slot`'s machine dies, its peers' ranks exit; the triage decides.
  JobPlan LoseMachine(int slot) {
    const std::string victim = status.slots[slot].pod;
    Pod(victim)->running = false;
    Pod(victim)->failed = true;
    Pod(victim)->reason = "node NotReady";
    now += kSecond / 10;
    Step();
    for (const SlotStatus& s : status.slots) {
      if (s.pod == victim) continue;
      AgentObservation* a = Agent(s.pod);
      a->phase = AgentTrainingPhase::kExited;
      a->exits = {RankExit{s.index * 2, 3, 0, {"NCCL error: remote process exited"}}};
    }
    now += 2 * kSecond;
    return Step();
  }
  // Every diagnostic passes (the alignment digests agree): a stop-time diagnosis finds no
  // machine and the incident ends in a reattempt.
  bool OnCommand(const CommandToSend& c, AgentObservation& a) override {
    if (c.kind != CommandKind::kRunDiagnostic) return false;
    DiagnosticOutcome d;
    d.kind = ToString(c.diagnostic.kind);
    d.passed = true;
    d.machine_id = a.machine_id;
    d.digest = "good";
    a.command_results[c.id] = CommandResultObservation{c.id, true, 0, "", now, d, false, {}};
    return true;
  }
  // Steps until a running stop-time diagnosis has its verdict.
  void Settle() {
    Step();
    for (int i = 0; i < 40 && status.diagnosis; ++i) {
      now += kSecond;
      Step();
    }
    REQUIRE_FALSE(status.diagnosis.has_value());
  }
  // Every rank reports a NaN loss at `step`.
  void NaNAt(uint64_t step) {
    for (const SlotStatus& slot : status.slots) {
      AgentObservation* a = Agent(slot.pod);
      for (int r = slot.index * 2; r < slot.index * 2 + 2; ++r) {
        a->rank_losses[r] = RankLossObservation{step, std::numeric_limits<double>::quiet_NaN(), 1.0};
      }
    }
  }
  void RestoreFailed(int slot, uint64_t step, int rank) {
    Agent(status.slots[slot].pod)->checkpoint_events.push_back(
        CheckpointEventObservation{now, CheckpointEventKind::kRestoreFailed, step, rank, "no holder has it"});
  }
};

bool HasEvent(const JobPlan& plan, const std::string& reason) {
  return std::any_of(plan.events.begin(), plan.events.end(), [&](const JobEvent& e) { return e.reason == reason; });
}

TEST_CASE("checkpoints on: every assignment carries the plan, copies go outside the slot's groups", "[unit]") {
  testing::PlanWorld w(CheckpointJob());
  w.Step();
  const JobPlan plan = w.Step();
  REQUIRE(plan.commands.size() == 4);
  REQUIRE(w.status.checkpoint.placement.size() == 4);
  CHECK(w.status.checkpoint.degraded_reason.empty());
  for (const CommandToSend& c : plan.commands) {
    const CheckpointPlanSpec& p = c.assignment.checkpoint;
    CHECK(p.interval_steps == 10);
    CHECK(p.backup_copies == 1);
    REQUIRE(p.backup_to.size() == 1);
    CHECK(p.backup_to != std::vector<int>{c.assignment.slot});
    CHECK(p.restore_from == p.backup_to);
    CHECK(p.restore_step == 0);
    CHECK(p.memory_limit_bytes == 8ull << 30);
    CHECK(p.backup_bandwidth_bytes_per_second == 100ull << 20);
    CHECK(p.persist_every_steps == 50);
    CHECK(p.persist_dir == "/ckpt");
    // The slot holds copies for exactly the slots whose holder it is.
    for (const CheckpointSlotPlacement& other : w.status.checkpoint.placement) {
      const bool holds = std::count(p.hold_for.begin(), p.hold_for.end(), other.slot) == 1;
      CHECK(holds == (other.holders == std::vector<int>{c.assignment.slot}));
    }
  }
  // Checkpoints off: no plan.
  testing::PlanWorld off(testing::DemoJob());
  off.Step();
  for (const CommandToSend& c : off.Step().commands) CHECK(c.assignment.checkpoint.interval_steps == 0);
  CHECK(off.status.checkpoint.placement.empty());
}

void CheckSamePlan(const CheckpointPlanSpec& a, const CheckpointPlanSpec& b) {
  CHECK(a.interval_steps == b.interval_steps);
  CHECK(a.backup_copies == b.backup_copies);
  CHECK(a.backup_to == b.backup_to);
  CHECK(a.hold_for == b.hold_for);
  CHECK(a.restore_step == b.restore_step);
  CHECK(a.restore_from == b.restore_from);
  CHECK(a.memory_limit_bytes == b.memory_limit_bytes);
  CHECK(a.backup_bandwidth_bytes_per_second == b.backup_bandwidth_bytes_per_second);
  CHECK(a.persist_every_steps == b.persist_every_steps);
  CHECK(a.persist_dir == b.persist_dir);
  CHECK(a.committed_step == b.committed_step);
}

TEST_CASE("every slot's checkpoint plan in one pass is the per-slot plan (DesiredAgents at scale)", "[unit]") {
  // The placement the engine made for a running job.
  World w;
  const std::map<int, CheckpointPlanSpec> plans = CheckpointPlansBySlot(w.job.spec, w.status);
  REQUIRE(plans.size() == w.status.slots.size());
  for (const SlotStatus& s : w.status.slots) {
    INFO("slot " << s.index);
    CheckSamePlan(plans.at(s.index), CheckpointPlanFor(w.job.spec, w.status, s.index));
  }
  // A hand-made one: two copies, a holder named twice, a slot the placement does not name,
  // a holder that is no slot.
  JobStatus st = w.status;
  st.resume_step = 40;
  st.checkpoint.last_complete_step = 30;
  st.checkpoint.placement = {{0, {1, 2}}, {1, {2, 2}}, {2, {0, 7}}};
  const std::map<int, CheckpointPlanSpec> hand = CheckpointPlansBySlot(w.job.spec, st);
  for (int slot : {0, 1, 2, 3, 7}) {
    INFO("slot " << slot);
    auto it = hand.find(slot);
    const CheckpointPlanSpec one = CheckpointPlanFor(w.job.spec, st, slot);
    REQUIRE(it != hand.end());
    CheckSamePlan(it->second, one);
  }
  CHECK(hand.at(2).hold_for == std::vector<int>{0, 1});
  CHECK(hand.at(3).backup_to.empty());
  // DesiredAgents hands every slot exactly that plan.
  for (const auto& [pod, want] : DesiredAgents(w.job.spec, st)) {
    if (want.standby) continue;
    CheckSamePlan(want.assignment.checkpoint, CheckpointPlanFor(w.job.spec, st, want.assignment.slot));
  }
  // Checkpoints off: no plans.
  CHECK(CheckpointPlansBySlot(testing::DemoJob().spec, st).empty());
}

TEST_CASE("lastCompleteStep is the newest step every slot backed up, a restart resumes after it", "[unit]") {
  World w;
  w.Progress(27);
  w.Report({10, 20});
  w.ReportSlot(3, {10});  // slot 3's step 20 is not backed up yet
  w.now += kSecond;
  w.Step();
  CHECK(w.status.checkpoint.last_complete_step == 10);
  w.ReportSlot(3, {10, 20});
  w.Step();
  CHECK(w.status.checkpoint.last_complete_step == 20);
  CHECK(w.status.last_completed_step == 27);
  const JobPlan plan = w.LoseMachine(2);
  REQUIRE(w.status.attempt == 2);
  const Incident& inc = w.status.incidents.back();
  CHECK(inc.step_at_failure == 27);
  CHECK(inc.resume_step == 20);
  CHECK(inc.steps_redone == 7);
  CHECK(w.status.resume_step == 20);
  CHECK(w.status.last_completed_step == 20);  // this attempt's progress starts at the checkpoint
  for (const CommandToSend& c : plan.commands) {
    CHECK(c.assignment.resume_step == 20);
    CHECK(c.assignment.checkpoint.restore_step == 20);
    CHECK(c.assignment.checkpoint.committed_step == 20);
  }
  // Training passes the checkpoint: the incident closes, the redone steps' time is lost.
  const double lost_before = w.status.training_time_lost_seconds;
  w.Progress(21);
  w.now += kSecond;
  w.Step();
  REQUIRE(w.status.incidents.back().resumed_at != 0);
  const double downtime = static_cast<double>(w.now - inc.detected_at) / kSecond;
  CHECK(w.status.training_time_lost_seconds - lost_before == Approx(downtime + 7 * 0.1));
}

TEST_CASE("a restart resumes from the newest step every slot can restore now when the committed one lags", "[unit]") {
  for (const bool held_by_peer : {true, false}) {
    INFO("slot 2's step 30 held by its backup holder: " << held_by_peer);
    World w;
    w.Progress(34);
    w.Report({10, 20});
    w.now += kSecond;
    w.Step();
    REQUIRE(w.status.checkpoint.last_complete_step == 20);
    // Every slot stored step 30; its backups are still in flight, so 20 is the committed
    // step, while the stores may already have pruned it.
    for (const SlotStatus& s : w.status.slots) w.Agent(s.pod)->checkpoint->stored_steps = {20, 30};
    const int holder = w.status.checkpoint.placement[2].holders.at(0);
    if (held_by_peer) w.Agent(w.status.slots[holder].pod)->checkpoint->held = {{2, 20}, {2, 30}};
    else w.Agent(w.status.slots[holder].pod)->checkpoint->held = {{2, 20}};
    const JobPlan plan = w.LoseMachine(2);
    REQUIRE(w.status.attempt == 2);
    // Slot 2's machine is gone: its own copies do not count; the holder's do.
    const uint64_t expected = held_by_peer ? 30 : 20;
    CHECK(w.status.resume_step == expected);
    CHECK(w.status.incidents.back().steps_redone == 34 - expected);
    for (const CommandToSend& c : plan.commands) CHECK(c.assignment.checkpoint.restore_step == expected);
  }
}

TEST_CASE("a restored state that goes NaN at once falls back to the previous checkpoint instead of looping", "[unit]") {
  World w;
  w.Progress(27);
  w.Report({10, 20});
  w.now += kSecond;
  w.Step();
  w.LoseMachine(2);
  REQUIRE(w.status.resume_step == 20);
  // The standby in slot 2 fetched only step 20; its holder keeps steps 10 and 20 of slot 2.
  w.ReportSlot(2, {20});
  const int holder = w.status.checkpoint.placement[2].holders.at(0);
  w.Agent(w.status.slots[holder].pod)->checkpoint->held = {{2, 10}, {2, 20}};
  // The restored step-20 state makes NaN two steps later: step 20 is marked failed and
  // the reattempt resumes from step 10, which every store still holds.
  w.Progress(22);
  w.NaNAt(22);
  w.now += kSecond;
  w.Step();
  REQUIRE(w.status.incidents.back().kind == IncidentKind::kNaNLoss);
  w.now += 2 * kSecond;
  w.Settle();
  CHECK(w.status.resume_step == 10);
  CHECK(w.status.checkpoint.failed_steps == std::vector<uint64_t>{20});
  const Incident& inc = w.status.incidents.back();
  CHECK_THAT(absl::StrJoin(inc.actions, "\n"), Catch::Contains("restored from checkpoint step 20 went bad at once"));
  CHECK_THAT(absl::StrJoin(inc.actions, "\n"), Catch::Contains("older in-memory step 10"));

  // A NaN long after the restore (a newer checkpoint completed since) is not the
  // restored state's fault: the resume point is the newest complete step as usual.
  World later;
  later.Progress(27);
  later.Report({10, 20});
  later.now += kSecond;
  later.Step();
  later.LoseMachine(2);
  later.Progress(45);
  later.Report({20, 30, 40});
  later.now += kSecond;
  later.Step();
  REQUIRE(later.status.checkpoint.last_complete_step == 40);
  later.NaNAt(45);
  later.now += kSecond;
  later.Step();
  later.now += 2 * kSecond;
  later.Settle();
  CHECK(later.status.resume_step == 40);
  CHECK(later.status.checkpoint.failed_steps.empty());
}

TEST_CASE("checkpoints on but none complete yet: a restart starts from scratch", "[unit]") {
  World w;
  w.Progress(8);
  w.now += kSecond;
  w.Step();
  w.LoseMachine(1);
  REQUIRE(w.status.attempt == 2);
  CHECK(w.status.resume_step == 0);
  CHECK(w.status.incidents.back().steps_redone == 8);
}

TEST_CASE("checkpoints off: a restart resumes after the last step every rank completed", "[unit]") {
  World w(testing::DemoJob());
  w.Progress(27);
  w.Report({10, 20});  // ignored: checkpoints are off
  w.now += kSecond;
  w.Step();
  w.LoseMachine(2);
  CHECK(w.status.resume_step == 27);
  CHECK(w.status.incidents.back().steps_redone == 0);
  CHECK(w.status.checkpoint.last_complete_step == 0);
}

TEST_CASE("a failed restore falls back to an older complete step, then fails the job naming rank and step",
          "[unit]") {
  World w;
  w.Progress(27);
  w.Report({10, 20});
  w.now += kSecond;
  w.Step();
  w.LoseMachine(2);
  REQUIRE(w.status.resume_step == 20);
  // The standby now in slot 2 has nothing of its own; slot 3 holds slot 2's step 10 only.
  w.ReportSlot(2, {});
  w.Agent(w.status.slots[3].pod)->checkpoint->held = {{2, 10}};
  w.RestoreFailed(2, 20, 4);
  w.now += kSecond;
  JobPlan plan = w.Step();
  CHECK(HasEvent(plan, "CheckpointRestoreFallback"));
  CHECK(w.status.attempt == 3);
  CHECK(w.status.resume_step == 10);
  CHECK(w.status.checkpoint.last_complete_step == 10);
  CHECK(w.status.checkpoint.failed_steps == std::vector<uint64_t>{20});
  CHECK_THAT(w.status.incidents.back().actions.back(), Catch::Contains("from step 10"));
  for (const CommandToSend& c : plan.commands) CHECK(c.assignment.checkpoint.restore_step == 10);
  // Step 20 stays excluded even though the reports still name it.
  w.Step();
  CHECK(w.status.checkpoint.last_complete_step == 10);
  // Step 10 fails too and nothing older is left: the job fails, naming rank and step.
  w.RestoreFailed(2, 10, 5);
  w.now += kSecond;
  plan = w.Step();
  CHECK(w.status.phase == JobPhase::kFailed);
  const auto failed = std::find_if(w.status.conditions.begin(), w.status.conditions.end(),
                                   [](const Condition& c) { return c.type == "Failed"; });
  REQUIRE(failed != w.status.conditions.end());
  CHECK(failed->reason == "CheckpointRestoreFailed");
  CHECK_THAT(failed->message, Catch::Contains("rank 5") && Catch::Contains("step 10"));
}

TEST_CASE("a failed restore falls back to the persisted step when memory holds nothing older", "[unit]") {
  World w;
  w.Progress(27);
  w.Report({20});
  for (const SlotStatus& s : w.status.slots) w.Agent(s.pod)->checkpoint->persisted_steps = {5};
  w.now += kSecond;
  w.Step();
  CHECK(w.status.checkpoint.last_persisted_step == 5);
  w.LoseMachine(0);
  w.ReportSlot(0, {});
  w.RestoreFailed(0, 20, 1);
  w.now += kSecond;
  const JobPlan plan = w.Step();
  CHECK(w.status.resume_step == 5);
  const auto e = std::find_if(plan.events.begin(), plan.events.end(),
                              [](const JobEvent& x) { return x.reason == "CheckpointRestoreFallback"; });
  REQUIRE(e != plan.events.end());
  CHECK_THAT(e->message, Catch::Contains("persisted") && Catch::Contains("/ckpt") && Catch::Contains("rank 1"));
}

TEST_CASE("a restore that met a corrupt peer copy falls back to the persisted step, not to that peer's older copy", "[unit]") {
  World w;
  w.Progress(37);
  w.Report({20, 30});
  for (const SlotStatus& s : w.status.slots) w.Agent(s.pod)->checkpoint->persisted_steps = {20};
  w.now += kSecond;
  w.Step();
  w.LoseMachine(2);
  REQUIRE(w.status.resume_step == 30);
  // The standby in slot 2 has nothing; slot 3 holds slot 2's steps 20 and 30, and its copy
  // of 30 failed the checksum.
  w.ReportSlot(2, {});
  w.Agent(w.status.slots[3].pod)->checkpoint->held = {{2, 20}, {2, 30}};
  w.Agent(w.status.slots[2].pod)->checkpoint_events.push_back(CheckpointEventObservation{
      w.now, CheckpointEventKind::kCorruptShard, 30, 4, "backup held by slot 3: checksum mismatch"});
  w.RestoreFailed(2, 30, 4);
  w.now += kSecond;
  const JobPlan plan = w.Step();
  CHECK(w.status.resume_step == 20);
  const auto e = std::find_if(plan.events.begin(), plan.events.end(),
                              [](const JobEvent& x) { return x.reason == "CheckpointRestoreFallback"; });
  REQUIRE(e != plan.events.end());
  CHECK_THAT(e->message, Catch::Contains("to the persisted step 20") && Catch::Contains("persisted in /ckpt"));

  // Without the corrupt copy the same reports fall back to the peer's copy in memory.
  std::vector<const CheckpointReportObservation*> slots;
  std::vector<const CheckpointReportObservation*> holders;
  for (const SlotStatus& s : w.status.slots) {
    slots.push_back(&*w.Agent(s.pod)->checkpoint);
    holders.push_back(&*w.Agent(s.pod)->checkpoint);
  }
  const std::optional<RestoreFallback> memory = FallbackStep(slots, holders, 30, {30}, 20, "/ckpt");
  REQUIRE(memory);
  CHECK_FALSE(memory->persisted);
  CHECK(memory->step == 20);
  const std::optional<RestoreFallback> persisted = FallbackStep(slots, holders, 30, {30}, 20, "/ckpt", {2});
  REQUIRE(persisted);
  CHECK(persisted->persisted);
  CHECK(FallbackStep(slots, holders, 30, {30}, 0, "", {2}) == std::nullopt);
}

TEST_CASE("store events become job events once each", "[unit]") {
  World w;
  AgentObservation* a = w.Agent(w.status.slots[1].pod);
  a->checkpoint_events.push_back({w.now, CheckpointEventKind::kMemoryShort, 10, -1, "budget 1 GiB < 2 x 600 MiB"});
  a->checkpoint_events.push_back({w.now + 1, CheckpointEventKind::kSkipped, 20, 3, "shard over the allowance"});
  JobPlan plan = w.Step();
  CHECK(HasEvent(plan, "CheckpointMemoryShort"));
  CHECK(HasEvent(plan, "CheckpointSkipped"));
  CHECK(w.status.checkpoint.events.size() == 2);
  plan = w.Step();
  CHECK_FALSE(HasEvent(plan, "CheckpointMemoryShort"));
  CHECK(w.status.checkpoint.events.size() == 2);
  a->checkpoint_events.push_back({w.now + 2, CheckpointEventKind::kCorruptShard, 20, 2, "crc mismatch"});
  plan = w.Step();
  CHECK(HasEvent(plan, "CheckpointCorruptShard"));
  CHECK_FALSE(HasEvent(plan, "CheckpointSkipped"));
}

TEST_CASE("a layout with no safe peer degrades the placement but still checkpoints", "[unit]") {
  World w(testing::ParsedJob(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: dp}
spec:
  machines: 2
  gpusPerMachine: 1
  parallelism: {tensor: 1, pipeline: 1, data: 2}
  codeVersion: {command: [train]}
  checkpoint: {intervalSteps: 5}
)"));
  CHECK_THAT(w.status.checkpoint.degraded_reason, Catch::StartsWith("placement degraded: "));
  REQUIRE(w.status.checkpoint.placement.size() == 2);
  CHECK(w.status.checkpoint.placement[0].holders == std::vector<int>{1});
  CHECK(w.status.checkpoint.placement[1].holders == std::vector<int>{0});
}

TEST_CASE("progress: ranks that print no step line do not hold the job back", "[unit]") {
  World w(testing::DemoJob());
  w.Agent(w.status.slots[0].pod)->rank_steps[0] = 15;  // only rank 0 reports
  w.now += kSecond;
  w.Step();
  CHECK(w.status.last_completed_step == 15);
  w.Agent(w.status.slots[2].pod)->rank_steps[4] = 12;  // a second reporting rank is behind
  w.Step();
  CHECK(w.status.last_completed_step == 15);  // monotonic within the attempt
  CHECK(w.status.max_completed_step == 15);
}

TEST_CASE("every rank failing at start-up with the same error: reattempts, then Failed(UserCodeError), ETTR 0",
          "[unit]") {
  World w(testing::DemoJob());
  auto fail_all = [&w] {
    for (const SlotStatus& s : w.status.slots) {
      AgentObservation* a = w.Agent(s.pod);
      a->phase = AgentTrainingPhase::kExited;
      a->exits = {RankExit{s.index * 2, 1, 0, {"[rank" + std::to_string(s.index * 2) + "]: RuntimeError: no GPU"}},
                  RankExit{s.index * 2 + 1, 1, 0, {"RuntimeError: no GPU  "}}};
    }
    w.Step();
    w.now += 2 * kSecond;
    return w.Step();
  };
  fail_all();
  REQUIRE(w.status.incidents.size() == 1);
  CHECK(w.status.incidents[0].kind == IncidentKind::kUserCodeError);
  CHECK_FALSE(w.status.diagnosis.has_value());
  CHECK(w.status.attempt == 2);  // reattempt 1 of maxReattempts (1)
  CHECK(w.status.ettr == 0);      // no step was ever trained
  fail_all();
  CHECK(w.status.phase == JobPhase::kFailed);
  CHECK_FALSE(w.status.diagnosis.has_value());
  CHECK(w.status.incidents.back().kind == IncidentKind::kUserCodeError);
  CHECK_THAT(w.status.incidents.back().decision, Catch::Contains("RuntimeError: no GPU"));
  CHECK(w.status.ettr == 0);
}

TEST_CASE("ranks failing at start-up with different errors take the usual ladder", "[unit]") {
  World w(testing::DemoJob());
  for (const SlotStatus& s : w.status.slots) {
    AgentObservation* a = w.Agent(s.pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{s.index * 2, 1, 0, {"RuntimeError: no GPU"}},
                RankExit{s.index * 2 + 1, 1, 0, {s.index == 3 ? "RuntimeError: NCCL timeout" : "RuntimeError: no GPU"}}};
  }
  w.Step();
  w.now += 2 * kSecond;
  w.Step();
  CHECK(w.status.incidents.back().kind == IncidentKind::kProcessCrash);
  CHECK(w.status.diagnosis.has_value());  // no culprit: stop-time diagnosis
}

}  // namespace
}  // namespace peregrine
