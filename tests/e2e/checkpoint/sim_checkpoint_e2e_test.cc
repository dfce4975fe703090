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

// The demo layout with a short run, paced so that a fault lands mid-run, and checkpoints.
TrainingJob CheckpointedSimJob(int steps) {
  TrainingJob job = ShortDemoJob(steps);
  job.spec.code.command = {"sim-trainer", "--steps", std::to_string(steps), "--micro-batches", "2",
                           "--hidden", "64", "--compute-ms", "30", "--seed", "11"};
  job.spec.checkpoint.interval_steps = kInterval;
  job.spec.checkpoint.backup_copies = 1;
  return job;
}

// The final weight digests of an uninterrupted run of `job`.
std::map<int, FinalLine> ReferenceDigests(const TrainingJob& job) {
  TempDir dir;
  const JobRun run = RunJob(dir, job);
  INFO(run.timeline);
  REQUIRE(run.status.phase == JobPhase::kSucceeded);
  CHECK(run.status.incidents.empty());
  return FinalLines(run.logs, "weight_digest", kWorld);
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
  const TrainingJob job = CheckpointedSimJob(60);
  const std::map<int, FinalLine> reference = ReferenceDigests(job);

  TempDir dir;
  constexpr int kVictim = 2;  // ranks 4 and 5
  const JobRun run = RunJob(
      dir, job, [](LocalMode& mode) { return WaitCheckpointComplete(mode, kInterval, kInterval / 2); },
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

}  // namespace
}  // namespace peregrine::e2e
