// Persisted checkpoints and controller restarts end to end with sim-trainer (the demo
// layout, TP=2 PP=2 DP=2 on 4 machines x 2 GPUs, one warm standby, a checkpoint every
// 10 steps with one backup copy, every 20 steps also persisted to the local mode's
// default persistPath, <state dir>/checkpoints): the real controller in local mode, real
// agents with their stores, data channels and persistence writers, real sim-trainer
// ranks. Every faulted run's final weight digests are compared with an uninterrupted run
// of the same job in the same test (a rank that resumed from anything but exactly the
// state it saved ends with other weights).
#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/str_format.h"
#include "checkpoint/shard_format.h"

#include "tests/e2e/checkpoint/checkpoint_e2e_util.h"

namespace peregrine::e2e {
namespace {

namespace fs = std::filesystem;

constexpr int kInterval = 10;
constexpr int kPersistEvery = 2 * kInterval;  // so some complete steps are not persisted
constexpr int kWorld = 8;

TrainingJob PersistedSimJob(int steps, int compute_ms) {
  TrainingJob job = ShortDemoJob(steps);
  job.spec.code.command = {"sim-trainer", "--steps", std::to_string(steps), "--micro-batches", "2",
                           "--hidden", "64", "--compute-ms", std::to_string(compute_ms), "--seed", "7"};
  job.spec.checkpoint.interval_steps = kInterval;
  job.spec.checkpoint.backup_copies = 1;
  job.spec.checkpoint.persist_every_steps = kPersistEvery;  // persistPath: local mode's default
  return job;
}

std::map<int, FinalLine> ReferenceDigests(const TrainingJob& job) {
  TempDir dir;
  const JobRun run = UninterruptedRun(dir, job);
  // The uninterrupted run persisted too, into its state dir, every slot the same steps.
  CHECK(run.status.checkpoint.last_persisted_step >= static_cast<uint64_t>(kPersistEvery));
  CHECK(fs::exists(fs::path(dir.path()) / "checkpoints" /
                   absl::StrFormat("step-%020d", run.status.checkpoint.last_persisted_step) / "slot-3.manifest"));
  return FinalLines(run.logs, "weight_digest", kWorld);
}

// Flips one payload byte in every backup of `slot` that the pod `holder_pod` holds.
int CorruptHeldBackups(const std::string& state_dir, const TrainingJob& job, const std::string& holder_pod, int slot) {
  const fs::path root = fs::read_symlink(fs::path(state_dir) / "shm");
  const fs::path held = root / (job.metadata.namespace_ + "." + job.metadata.name) / holder_pod / "held" /
                        ("slot-" + std::to_string(slot));
  int corrupted = 0;
  for (const fs::directory_entry& rank : fs::directory_iterator(held)) {
    for (const fs::directory_entry& shard : fs::directory_iterator(rank.path())) {
      if (shard.path().extension() != ".shard") continue;
      std::fstream f(shard.path(), std::ios::in | std::ios::out | std::ios::binary);
      const std::streamoff at = static_cast<std::streamoff>(checkpoint::kShardHeaderBytes) + 17;
      f.seekg(at);
      char byte = 0;
      f.read(&byte, 1);
      byte = static_cast<char>(byte ^ 0x5a);
      f.seekp(at);
      f.write(&byte, 1);
      REQUIRE(f.good());
      ++corrupted;
    }
  }
  return corrupted;
}

std::string EventsText(const JobStatus& s, CheckpointEventKind kind) {
  std::string out;
  for (const CheckpointEventRecord& e : CheckpointEvents(s, kind)) {
    out += "step " + std::to_string(e.step) + " rank " + std::to_string(e.global_rank) + ": " + e.detail + "\n";
  }
  return out;
}

TEST_CASE("persisted checkpoints: corrupt backups of a killed machine fall back to the persisted copy and the digests match an uninterrupted run", "[e2e]") {
  const TrainingJob job = PersistedSimJob(80, 40);
  const std::map<int, FinalLine> reference = ReferenceDigests(job);

  TempDir dir;
  constexpr int kVictim = 1;  // ranks 2 and 3
  int holder = -1;
  uint64_t complete_at_fault = 0;
  const JobRun run = RunJob(
      dir, job,
      [](LocalMode& mode) {
        // A complete step that is not persisted (persisting every 20 steps, the newest
        // persisted one is older), with the ranks before the next save (a step becomes
        // complete some steps after it was saved: the backups take their time).
        JobStatus status;
        REQUIRE(WaitForStatus(mode, [&](const JobStatus& s) {
          status = s;
          const auto& c = s.checkpoint;
          return Finished(s) || (s.phase == JobPhase::kRunning && c.last_persisted_step >= kPersistEvery &&
                                 c.last_complete_step > c.last_persisted_step &&
                                 s.max_completed_step <= c.last_complete_step + kInterval - 2);
        }));
        INFO(TimelineText(mode, status));
        REQUIRE(status.phase == JobPhase::kRunning);
        return status;
      },
      [&](LocalMode& mode, const JobStatus& st) {
        REQUIRE(st.checkpoint.placement.size() == 4);
        REQUIRE(!st.checkpoint.placement[kVictim].holders.empty());
        holder = st.checkpoint.placement[kVictim].holders[0];
        complete_at_fault = st.checkpoint.last_complete_step;
        // The machine dies first (no newer backup can reach the holder after that), then
        // every copy its holder keeps of it is damaged.
        KillSlot(mode, kVictim);
        CHECK(CorruptHeldBackups(dir.path(), job, st.slots[static_cast<size_t>(holder)].pod, kVictim) >= 2);
      });
  INFO(run.timeline);
  const JobStatus& st = run.status;
  REQUIRE(st.phase == JobPhase::kSucceeded);
  const std::string persist_dir = fs::path(dir.path()) / "checkpoints";

  // The standby's fetch found the holder's copy corrupt, naming the holder.
  const std::string corrupt = EventsText(st, CheckpointEventKind::kCorruptShard);
  INFO("CorruptShard events:\n" << corrupt);
  CHECK_THAT(corrupt, Catch::Contains("backup held by slot " + std::to_string(holder) + ": fetch from 127.0.0.1:"));
  // The controller fell back from the complete step to the persisted one, saying why.
  CHECK_THAT(run.events, Catch::Contains("CheckpointRestoreFallback"));
  // (The step that failed is the complete one, or a newer one every slot could restore
  // from memory at the kill: the victim's newest backup, corrupted as well.)
  CHECK_THAT(run.events, Catch::Contains("could not restore checkpoint step "));
  CHECK_THAT(run.events, Catch::Contains("to the persisted step"));
  CHECK_THAT(run.events, Catch::Contains("persisted in " + persist_dir));
  // The ranks got the persisted step's shards from the persisted copy.
  const std::string restored = EventsText(st, CheckpointEventKind::kRestored);
  INFO("Restored events:\n" << restored);
  CHECK_THAT(restored, Catch::Contains("from the persisted copy in " + persist_dir));
  bool resumed_persisted = false;
  for (const Incident& inc : st.incidents) {
    resumed_persisted |= inc.resume_step < complete_at_fault && inc.resume_step % kPersistEvery == 0 && inc.resume_step > 0;
  }
  CHECK(resumed_persisted);

  CHECK(FinalLines(run.logs, "weight_digest", kWorld) == reference);
}

TEST_CASE("persisted checkpoints: a machine lost while the controller is down resumes from status.checkpoint.lastCompleteStep and the digests match", "[e2e]") {
  const TrainingJob job = PersistedSimJob(70, 60);
  const std::map<int, FinalLine> reference = ReferenceDigests(job);

  TempDir dir;
  constexpr int kVictim = 2;
  JobStatus before;
  std::string checkpoint_root;
  pid_t victim_agent = 0;
  {
    ModeGuard mode = StartMode(job, Options(dir.path()));
    checkpoint_root = fs::read_symlink(fs::path(dir.path()) / "shm").string();
    before = WaitCheckpointComplete(*mode, kInterval, 2);
    victim_agent = mode->cluster().AgentPid(before.slots.at(kVictim).pod);
    mode.teardown = false;  // the controller goes away; the pods stay
  }
  // While no controller runs, the victim's machine dies (its agent and its ranks: the pod
  // is the agent's session).
  const SlotStatus& victim = before.slots.at(kVictim);
  REQUIRE(victim_agent > 0);
  REQUIRE(SignalSession(victim_agent, SIGKILL) > 0);

  ModeGuard mode = StartMode(job, Options(dir.path()));
  const JobStatus st = WaitFinished(*mode);
  const std::string timeline = TimelineText(*mode, st);
  INFO(timeline);
  REQUIRE(st.phase == JobPhase::kSucceeded);
  REQUIRE(st.incidents.size() == 1);
  const Incident& inc = st.incidents[0];
  // The restarted controller resumed after the complete step the status held when it went
  // away (the lost slot reports nothing newer), redoing at most one interval.
  CHECK(inc.resume_step == before.checkpoint.last_complete_step);
  CHECK(inc.steps_redone == inc.step_at_failure - inc.resume_step);
  CHECK(inc.steps_redone <= static_cast<uint64_t>(kInterval));
  CHECK(EvictedMachines(st) == std::set<std::string>{victim.machine_id});
  CHECK(FinalLines(ReadRankLogs(dir.path()), "weight_digest", kWorld) == reference);
  mode.mode->Shutdown(true);
  CHECK_FALSE(fs::exists(checkpoint_root));
}

}  // namespace
}  // namespace peregrine::e2e
