// Images (controller/core/decide_images.cc): every pod the controller creates carries the
// image of the version the job runs (status.code), and a version with another image moves
// the job to new pods in a controlled order: standbys first, then every slot at once.
//
// The invariant checked after every round: the pods in the job's slots (the pods that
// train) all run the running version's image, and so do the pods whose agents are
// training; idle standbys may already carry the image of the update being prepared.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "controller/core/decision_engine.h"
#include "controller/core/job_state.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr char kImageA[] = "registry.example.com/train:a";
constexpr char kImageB[] = "registry.example.com/train:b";

CodeVersionSpec Version(const char* image, const char* revision) {
  CodeVersionSpec v;
  v.image = image;
  v.command = {"python", "train.py"};
  v.revision = revision;
  return v;
}

struct ImageWorld : testing::PlanWorld {
  // DemoJob (4 machines, pool of 1-2 standbys) on image A, with in-memory checkpoints
  // persisted every `persist_every` steps (0: never).
  explicit ImageWorld(int persist_every, int standbys_max = 2) : PlanWorld(testing::DemoJob()) {
    job.spec.code = Version(kImageA, "r1");
    job.spec.standby.min = std::min(1, standbys_max);
    job.spec.standby.max = standbys_max;
    job.spec.checkpoint.interval_steps = 10;
    job.spec.checkpoint.persist_every_steps = persist_every;
    if (persist_every > 0) job.spec.checkpoint.persist_path = "/ckpt";
  }

  // One round, then the invariant.
  JobPlan Round() {
    JobPlan plan = Step();
    CheckOneImage(plan);
    now += kSecond;
    return plan;
  }

  void CheckOneImage(const JobPlan& plan) {
    INFO("attempt " << status.attempt << ", running " << status.code.image);
    std::set<std::string> slot_images;
    for (const SlotStatus& s : status.slots) {
      const PodObservation* p = Pod(s.pod);
      REQUIRE(p != nullptr);  // PlanWorld creates pods at once
      slot_images.insert(p->image);
    }
    CHECK(slot_images == std::set<std::string>{status.code.image});
    std::set<std::string> training_images;
    for (const AgentObservation& a : obs.agents) {
      if (a.phase == AgentTrainingPhase::kRunning) training_images.insert(Pod(a.pod)->image);
    }
    CHECK(training_images.size() <= 1);
    for (const CommandToSend& c : plan.commands) {
      if (c.kind != CommandKind::kRestartInPlace && c.kind != CommandKind::kActivate) continue;
      CHECK(Pod(c.pod)->image == status.code.image);
      CHECK(c.assignment.code.image == status.code.image);
    }
    for (const PodToCreate& c : plan.create_pods) {
      if (c.role == PodRole::kActive) CHECK(c.image == status.code.image);
    }
  }

  // Every slot's agent reports its store: `stored` stored and backed up, `persisted` persisted.
  void Report(std::vector<uint64_t> stored, std::vector<uint64_t> persisted) {
    for (const SlotStatus& s : status.slots) {
      CheckpointReportObservation r;
      r.stored_steps = stored;
      r.backed_up_steps = stored;
      r.persisted_steps = persisted;
      Agent(s.pod)->checkpoint = r;
    }
  }

  // Slot `slot`'s machine is lost; its peers' ranks fail after it.
  void LoseMachine(int slot) {
    const std::string victim = status.slots[slot].pod;
    Pod(victim)->running = false;
    Pod(victim)->failed = true;
    Pod(victim)->reason = "pod process group killed by signal 9";
    for (const SlotStatus& s : status.slots) {
      if (s.pod == victim) continue;
      AgentObservation* a = Agent(s.pod);
      a->phase = AgentTrainingPhase::kExited;
      a->exits = {RankExit{s.index * 2, 3, 0, {"NCCL error: remote process exited"}}};
    }
  }

  std::set<std::string> StandbyImages() {
    std::set<std::string> images;
    for (const StandbyStatus& sb : status.standbys) images.insert(Pod(sb.pod)->image);
    return images;
  }

  bool HasEvent(const JobPlan& plan, const std::string& reason) {
    for (const JobEvent& e : plan.events) {
      if (e.reason == reason) return true;
    }
    return false;
  }

  // Rounds until attempt `attempt` runs on every slot (at most 5).
  void Converge(uint64_t attempt) {
    for (int i = 0; i < 5; ++i) {
      bool all = true;
      for (const SlotStatus& s : status.slots) {
        const AgentObservation* a = Agent(s.pod);
        all = all && a != nullptr && a->attempt == attempt && a->phase == AgentTrainingPhase::kRunning;
      }
      if (all) return;
      Round();
    }
    FAIL("attempt " << attempt << " does not run on every slot");
  }
};

TEST_CASE("A replacement pod carries the running version's image, not the desired spec's", "[unit]") {
  // No standbys, checkpoints in memory only: an update to image B cannot move the pods
  // (every step would be lost), so the job keeps running A while the spec asks for B.
  ImageWorld w(/*persist_every=*/0, /*standbys_max=*/0);
  w.Round();
  w.Round();
  w.Converge(1);
  w.Progress(30);
  w.Report({30}, {});
  w.Round();
  w.job.spec.code = Version(kImageB, "r2");
  w.job.metadata.annotations["peregrine.dev/hot-update"] = "urgent";
  JobPlan plan = w.Round();
  CHECK(w.HasEvent(plan, "ImageUpdateBlocked"));
  CHECK(w.status.code.image == kImageA);
  REQUIRE(w.status.pending_code.has_value());
  CHECK(w.status.pending_code->image == kImageB);
  // A machine is lost: its replacement is built on A, the image the other slots run.
  w.LoseMachine(1);
  w.Round();
  plan = w.Round();
  REQUIRE(plan.create_pods.size() == 1);
  CHECK(plan.create_pods[0].role == PodRole::kActive);
  CHECK(plan.create_pods[0].image == kImageA);
  CHECK(w.status.code.image == kImageA);  // the lazy application waits too
  w.Converge(2);
}

TEST_CASE("An image update, a machine lost during it and a rollback never run two images at once", "[unit]") {
  ImageWorld w(/*persist_every=*/10);
  w.Round();
  w.Round();
  w.Converge(1);
  CHECK(w.StandbyImages() == std::set<std::string>{kImageA});
  w.Progress(30);
  w.Report({20, 30}, {20});
  w.Round();
  REQUIRE(w.status.checkpoint.last_persisted_step == 20);
  REQUIRE(w.status.checkpoint.last_complete_step == 30);

  // 1. Urgent update to image B: standbys first, training goes on on A.
  w.job.spec.code = Version(kImageB, "r2");
  w.job.metadata.annotations["peregrine.dev/hot-update"] = "urgent";
  JobPlan plan = w.Round();
  CHECK(w.HasEvent(plan, "StandbyImageUpdated"));
  CHECK(w.status.code.image == kImageA);
  CHECK(w.status.attempt == 1);
  CHECK(w.StandbyImages() == std::set<std::string>{kImageB});
  for (const PodToCreate& c : plan.create_pods) CHECK((c.role == PodRole::kStandby && c.image == kImageB));

  // 2. A machine is lost before the switch: the incident applies the pending version, a
  // standby on B takes the lost slot and the other slots are recreated on B.
  const std::string standby = w.status.standbys.at(0).pod;
  w.LoseMachine(2);
  w.Round();  // triage window
  plan = w.Round();
  CHECK(w.status.code.image == kImageB);
  CHECK(w.status.attempt == 2);
  CHECK(w.status.slots[2].pod == standby);
  CHECK(w.HasEvent(plan, "ImageUpdated"));
  int recreated = 0;
  for (const PodToCreate& c : plan.create_pods) recreated += c.role == PodRole::kActive ? 1 : 0;
  CHECK(recreated == 3);
  // The old pods' memory is gone: attempt 2 resumes from the persisted step.
  CHECK(w.status.resume_step == 20);
  CHECK(w.status.incidents.back().resume_step == 20);
  CHECK(w.status.incidents.back().steps_redone == 10);
  w.Converge(2);
  for (const SlotStatus& s : w.status.slots) {
    CHECK(w.Agent(s.pod)->attempt == 2);
  }

  // 3. Version B fails with a user-code error: roll back to A on new pods, standbys follow.
  w.Progress(22);
  w.Round();
  for (const SlotStatus& s : w.status.slots) {
    AgentObservation* a = w.Agent(s.pod);
    a->phase = AgentTrainingPhase::kExited;
    a->exits = {RankExit{s.index * 2, 1, 0, {"Traceback (most recent call last):", "KeyError: 'lr'"}}};
  }
  w.Round();  // triage window
  plan = w.Round();
  CHECK(w.status.code.image == kImageA);
  CHECK(w.status.code.revision == "r1");
  CHECK(w.HasEvent(plan, "RolledBack"));
  CHECK(w.HasEvent(plan, "ImageUpdated"));
  CHECK(w.StandbyImages() == std::set<std::string>{kImageA});
  w.Converge(w.status.attempt);
  // The rolled-back version stays desired but is not applied again: the job settles on A.
  for (int i = 0; i < 3; ++i) {
    plan = w.Round();
    CHECK(plan.create_pods.empty());
    CHECK(plan.delete_pods.empty());
  }
}

TEST_CASE("An image update waits for a standby on the new image before stopping training", "[unit]") {
  ImageWorld w(/*persist_every=*/10);
  w.Round();
  w.Round();
  w.Converge(1);
  w.Progress(30);
  w.Report({30}, {30});
  w.Round();
  w.job.spec.code = Version(kImageB, "r2");
  w.job.metadata.annotations["peregrine.dev/hot-update"] = "urgent";
  JobPlan plan = w.Round();
  CHECK(w.status.attempt == 1);
  // The new image cannot be pulled: the standbys stay Pending and training goes on on A.
  for (const StandbyStatus& sb : w.status.standbys) {
    w.Pod(sb.pod)->running = false;
    w.Pod(sb.pod)->waiting_reason = "ImagePullBackOff: Back-off pulling image";
    std::erase_if(w.obs.agents, [&](const AgentObservation& a) { return a.pod == sb.pod; });
  }
  for (int i = 0; i < 3; ++i) {
    plan = w.Round();
    CHECK(w.status.attempt == 1);
    CHECK(w.status.code.image == kImageA);
    CHECK(plan.delete_pods.empty());
  }
  // The image is fixed and a standby comes up on it: the slots move, from the persisted step.
  const std::string standby = w.status.standbys.at(0).pod;
  w.Pod(standby)->running = true;
  w.Pod(standby)->waiting_reason.clear();
  AgentObservation a;
  a.pod = standby;
  a.machine_id = w.Pod(standby)->machine_id;
  a.connected = true;
  a.registered_as_standby = true;
  a.self_check_passed = true;
  a.phase = AgentTrainingPhase::kIdle;
  w.obs.agents.push_back(a);
  plan = w.Round();
  CHECK(w.status.attempt == 2);
  CHECK(w.status.code.image == kImageB);
  CHECK(w.status.resume_step == 30);
  CHECK(plan.delete_pods.size() == 4);
  w.Converge(2);
}

TEST_CASE("A change of command only restarts in place on the same pods", "[unit]") {
  ImageWorld w(/*persist_every=*/10);
  w.Round();
  w.Round();
  w.Converge(1);
  w.Progress(30);
  w.Report({30}, {20});
  w.Round();
  std::vector<std::string> pods;
  for (const SlotStatus& s : w.status.slots) pods.push_back(s.pod);
  w.job.spec.code = Version(kImageA, "r2");
  w.job.spec.code.command = {"python", "train.py", "--fixed"};
  w.job.metadata.annotations["peregrine.dev/hot-update"] = "urgent";
  JobPlan plan = w.Round();
  CHECK(w.status.attempt == 2);
  CHECK(w.status.resume_step == 30);  // the in-memory checkpoint, not the persisted one
  CHECK(plan.delete_pods.empty());
  CHECK(plan.create_pods.empty());
  for (size_t i = 0; i < pods.size(); ++i) CHECK(w.status.slots[i].pod == pods[i]);
  w.Converge(2);
}

}  // namespace
}  // namespace peregrine
