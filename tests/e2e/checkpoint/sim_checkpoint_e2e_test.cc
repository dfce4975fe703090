// In-memory checkpoints end to end with sim-trainer (TP=2 PP=2 DP=2 on 4 machines x 2
// GPUs, one warm standby, a checkpoint every 10 steps with one backup copy): the real
// controller in local mode, real agents with their shared-memory stores and data
// channels, real sim-trainer ranks saving their weight shards through the client library.
// Every faulted run is compared with an uninterrupted run of the same job in the same
// test: the final weight digest of every rank must be the same, which holds only when
// every restarted rank got back exactly the state it saved (a lost or stale state changes
// the weights; tests/sim/trainer_test.cc shows that).
#include <catch2/catch.hpp>

#include <set>

#include "tests/e2e/checkpoint/checkpoint_e2e_util.h"

namespace peregrine::e2e {
namespace {

constexpr int kInterval = 10;
constexpr int kWorld = 8;

// The demo layout with a short run, paced so that a fault lands mid-run (`compute_ms` per
// micro-batch), and checkpoints.
TrainingJob CheckpointedSimJob(int steps, int compute_ms = 30) {
  TrainingJob job = ShortDemoJob(steps);
  job.spec.code.command = {"sim-trainer", "--steps", std::to_string(steps), "--micro-batches", "2",
                           "--hidden", "64", "--compute-ms", std::to_string(compute_ms), "--seed", "11"};
  job.spec.checkpoint.interval_steps = kInterval;
  job.spec.checkpoint.backup_copies = 1;
  return job;
}

// The final weight digests of an uninterrupted run of `job`.
std::map<int, FinalLine> ReferenceDigests(const TrainingJob& job) {
  TempDir dir;
  return FinalLines(UninterruptedRun(dir, job).logs, "weight_digest", kWorld);
}

// The RESTORED events of the final status as "rank <g> <detail>" lines.
std::set<int> RestoredRanks(const JobStatus& s, uint64_t step, std::string* details) {
  std::set<int> ranks;
  for (const CheckpointEventRecord& e : CheckpointEvents(s, CheckpointEventKind::kRestored)) {
    if (e.step != step) continue;
    ranks.insert(e.global_rank);
    *details += "rank " + std::to_string(e.global_rank) + ": " + e.detail + "\n";
  }
  return ranks;
}

TEST_CASE("sim-trainer TPxPPxDP: a killed machine's shards come from its backup holder and the digests match an uninterrupted run", "[e2e]") {
  // Slower steps (about 0.1 s): the ranks are at most a few steps past the complete
  // checkpoint the controller has seen when the machine dies, so stepsRedone <= interval.
  const TrainingJob job = CheckpointedSimJob(60, 50);
  const std::map<int, FinalLine> reference = ReferenceDigests(job);

  TempDir dir;
  constexpr int kVictim = 2;  // ranks 4 and 5
  const JobRun run = RunJob(
      dir, job, [](LocalMode& mode) { return WaitCheckpointComplete(mode, kInterval, 3 * kInterval, kInterval / 2); },
      [](LocalMode& mode, const JobStatus&) { KillSlot(mode, kVictim); });
  INFO(run.timeline);
  const JobStatus& st = run.status;
  REQUIRE(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  const Incident& inc = st.incidents[0];
  CHECK(inc.kind == IncidentKind::kMachineLost);
  CheckOnlyEvicted(run.before_fault, st, {kVictim});
  // Resumed from the complete checkpoint, not from the last printed step.
  CHECK(inc.resume_step >= static_cast<uint64_t>(kInterval));
  CHECK(inc.resume_step % kInterval == 0);
  CHECK(inc.steps_redone == inc.step_at_failure - inc.resume_step);
  CHECK(inc.steps_redone <= static_cast<uint64_t>(kInterval));

  // The standby in the victim's slot fetched both of its ranks' shards from the holder the
  // placement names (the victim's own copy died with it).
  REQUIRE(st.checkpoint.placement.size() == 4);
  REQUIRE(!st.checkpoint.placement[kVictim].holders.empty());
  const int holder = st.checkpoint.placement[kVictim].holders[0];
  CHECK(holder != kVictim);
  std::string details;
  CHECK(RestoredRanks(st, inc.resume_step, &details) == std::set<int>{2 * kVictim, 2 * kVictim + 1});
  INFO(details);
  CHECK_THAT(details, Catch::Contains("fetched from slot " + std::to_string(holder) + " ("));
  CHECK_THAT(run.events, Catch::Contains("CheckpointRestored: pod " + st.slots[kVictim].pod));

  CHECK(FinalLines(run.logs, "weight_digest", kWorld) == reference);
}

// With no standby pool, a lost machine's slot goes to a new pod whose agent registers
// only after the surviving slots were told the attempt's backup peers. They must learn its
// address then and back up to it again: the job's complete checkpoint advances past the
// resume step (a step counts as complete only when every slot's backups are
// acknowledged), and a second machine loss restores its shards from the new pod.
TEST_CASE("sim-trainer without standbys: the new pod of a lost machine receives backups again and a second loss restores from it", "[e2e]") {
  TrainingJob job = CheckpointedSimJob(150, 50);
  job.spec.standby.min = 0;
  job.spec.standby.max = 0;
  const std::map<int, FinalLine> reference = ReferenceDigests(job);

  TempDir dir;
  constexpr int kFirst = 2;
  int second = -1;
  const JobRun run = RunJob(
      dir, job, [](LocalMode& mode) { return WaitCheckpointComplete(mode, kInterval, 3 * kInterval, kInterval / 2); },
      [&second](LocalMode& mode, const JobStatus&) {
        KillSlot(mode, kFirst);
        JobStatus after;
        REQUIRE(WaitForStatus(mode, [&after](const JobStatus& s) {
          after = s;
          return Finished(s) || (s.phase == JobPhase::kRunning && s.incidents.size() == 1 &&
                                 s.checkpoint.last_complete_step >= s.incidents[0].resume_step + kInterval);
        }));
        INFO(TimelineText(mode, after));
        INFO("complete checkpoint step " << after.checkpoint.last_complete_step << ", steps completed up to "
                                         << after.max_completed_step);
        REQUIRE(after.phase == JobPhase::kRunning);
        // The slot whose backups the new pod in kFirst's slot holds.
        for (const CheckpointSlotPlacement& p : after.checkpoint.placement) {
          if (p.slot != kFirst && !p.holders.empty() && p.holders[0] == kFirst) second = p.slot;
        }
        REQUIRE(second >= 0);
        KillSlot(mode, second);
      });
  INFO(run.timeline);
  const JobStatus& st = run.status;
  REQUIRE(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 2);
  CHECK(st.incidents[0].kind == IncidentKind::kMachineLost);
  CHECK(st.incidents[1].kind == IncidentKind::kMachineLost);
  CHECK(st.incidents[1].resume_step >= st.incidents[0].resume_step + kInterval);
  std::string details;
  CHECK(RestoredRanks(st, st.incidents[1].resume_step, &details) == std::set<int>{2 * second, 2 * second + 1});
  INFO(details);
  CHECK_THAT(details, Catch::Contains("fetched from slot " + std::to_string(kFirst) + " ("));
  CHECK(FinalLines(run.logs, "weight_digest", kWorld) == reference);
}

bool HaveStackTool() {
  return std::filesystem::exists("/usr/bin/eu-stack") || std::filesystem::exists("/usr/bin/gdb");
}

// The hang-pp-stage fault (tests/e2e/robust/hang_e2e_test.cc): slot 2's ranks block in
// their compute, and the stack aggregation over-evicts pipeline group pp 0, slots 0 and 2.
// Their backups were placed outside their parallel groups, so neither holds the other's
// shards and both standbys find every shard on a surviving holder.
TEST_CASE("sim-trainer: a hang over-evicts a pipeline group and every evicted machine's shards come back from backups", "[e2e]") {
  if (!HaveStackTool()) {
    WARN("neither eu-stack nor gdb is installed: stacks cannot be captured here");
    return;
  }
  TrainingJob job = CheckpointedSimJob(60);
  job.spec.fault_tolerance.hang_timeout_seconds = 5;
  const std::map<int, FinalLine> reference = ReferenceDigests(job);

  TempDir dir;
  const JobRun run = RunJob(
      dir, job, [](LocalMode& mode) { return WaitCheckpointComplete(mode, kInterval, 3 * kInterval, kInterval); },
      [&job](LocalMode& mode, const JobStatus&) {
        auto scenario = ScenarioByName("hang-pp-stage", job);
        REQUIRE(scenario.ok());
        REQUIRE(scenario->steps.size() == 1);
        REQUIRE(scenario->steps[0].faults.size() == 1);
        REQUIRE(scenario->steps[0].faults[0].slot == 2);
        auto injected = mode.Inject(scenario->steps[0].faults[0]);
        REQUIRE(injected.ok());
      });
  INFO(run.timeline);
  const JobStatus& st = run.status;
  REQUIRE(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  const Incident& inc = st.incidents[0];
  CHECK(inc.kind == IncidentKind::kHang);
  CheckOnlyEvicted(run.before_fault, st, {0, 2});
  CHECK(inc.resume_step >= static_cast<uint64_t>(kInterval));
  CHECK(inc.resume_step % kInterval == 0);

  // Placement outside the groups: the holders of slots 0 and 2 are slots 1 and 3.
  REQUIRE(st.checkpoint.placement.size() == 4);
  for (int evicted : {0, 2}) {
    INFO("slot " << evicted);
    REQUIRE(!st.checkpoint.placement[evicted].holders.empty());
    const int holder = st.checkpoint.placement[evicted].holders[0];
    CHECK((holder == 1 || holder == 3));
  }
  // Every rank of both evicted machines restored from a holder; nothing else restored.
  std::string details;
  CHECK(RestoredRanks(st, inc.resume_step, &details) == std::set<int>{0, 1, 4, 5});
  INFO(details);
  for (int evicted : {0, 2}) {
    const int holder = st.checkpoint.placement[evicted].holders[0];
    CHECK_THAT(run.events, Catch::Contains("CheckpointRestored: pod " + st.slots[evicted].pod) &&
                               Catch::Contains("fetched from slot " + std::to_string(holder) + " ("));
  }
  CHECK(CheckpointEvents(st, CheckpointEventKind::kRestoreFailed).empty());

  CHECK(FinalLines(run.logs, "weight_digest", kWorld) == reference);
}

// A small /dev/shm is modelled with spec.checkpoint.memoryLimit (a real small tmpfs needs
// root to mount): the agents take the least of /dev/shm's size, the pod's memory limit and
// memoryLimit as their budget. Each sim-trainer shard here (hidden 64, a quarter of the
// model per rank) is 20608 bytes; a machine has 2 ranks and holds one backed-up step of a
// peer (2 shards). 100Ki = 102400 bytes, about 5 shards: the first saves fit (2 ranks x 2
// versions = 4 shards), but once a peer's backup is held (2 shards) fewer than two
// versions per rank fit: MEMORY_SHORT, one version each, saves that do not fit are skipped
// and training goes on.
TEST_CASE("sim-trainer: memory for fewer than two checkpoint versions gives a MEMORY_SHORT event and training finishes", "[e2e]") {
  TrainingJob job = CheckpointedSimJob(60);
  job.spec.checkpoint.memory_limit_bytes = 100 * 1024;
  TempDir dir;
  const JobRun run = RunJob(dir, job);
  INFO(run.timeline);
  const JobStatus& st = run.status;
  CHECK(st.phase == JobPhase::kSucceeded);
  CHECK(st.incidents.empty());
  CHECK(st.last_completed_step == 60);
  const std::vector<CheckpointEventRecord> short_events = CheckpointEvents(st, CheckpointEventKind::kMemoryShort);
  REQUIRE(!short_events.empty());
  CHECK_THAT(short_events[0].detail, Catch::Contains("budget 102400 bytes") &&
                                         Catch::Contains("fewer than two 20608-byte versions for 2 rank(s)"));
  CHECK_THAT(run.events, Catch::Contains("CheckpointMemoryShort: pod "));
  // Every rank trained to the end.
  for (const auto& [rank, line] : FinalLines(run.logs, "weight_digest", kWorld)) CHECK(line.step == 60);
}

}  // namespace
}  // namespace peregrine::e2e
