// Suspension in the decision core (decide_suspend.cc): spec.suspend and the cluster's
// admission hold (JobObservation::hold, Kueue's) stop the job keeping its persistent
// checkpoint and resume it from there. Walked with PlanWorld at fixed times; no clocks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "controller/core/conditions.h"
#include "controller/core/decision_engine.h"
#include "controller/job_parser.h"
#include "controller/status_json.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/plan_world.h"

namespace peregrine {
namespace {

constexpr int64_t kSecond = 1'000'000'000;

std::string Manifest(const std::string& checkpoint) {
  return R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: sus}
spec:
  machines: 2
  gpusPerMachine: 1
  parallelism: {tensor: 1, pipeline: 1, data: 2}
  codeVersion: {command: ["train"]}
  standby: {min: 1, max: 1}
)" + checkpoint;
}

const char kPersisting[] = "  checkpoint: {intervalSteps: 10, persistEverySteps: 50, persistPath: /ckpt}\n";

// Every slot's agent reports its store: `complete` backed up, `persisted` on persistPath.
void Report(testing::PlanWorld& w, uint64_t complete, std::vector<uint64_t> persisted) {
  for (const SlotStatus& slot : w.status.slots) {
    AgentObservation* a = w.Agent(slot.pod);
    REQUIRE(a != nullptr);
    CheckpointReportObservation r;
    r.stored_steps = {complete};
    r.backed_up_steps = {complete};
    r.persisted_steps = persisted;
    a->checkpoint = r;
  }
}

// Runs the job to attempt 1, training.
void Start(testing::PlanWorld& w) {
  w.Step();
  w.Step();
  REQUIRE(w.status.phase == JobPhase::kRunning);
  REQUIRE(w.status.attempt == 1);
}

bool HasEvent(const JobPlan& plan, const std::string& reason) {
  return std::any_of(plan.events.begin(), plan.events.end(), [&](const JobEvent& e) { return e.reason == reason; });
}

std::set<std::string> Deleted(const JobPlan& plan) {
  std::set<std::string> out;
  for (const PodToDelete& d : plan.delete_pods) out.insert(d.name);
  return out;
}

TEST_CASE("suspend saves to persistPath first, deletes every pod and resumes from the persisted step", "[unit]") {
  testing::PlanWorld w(testing::ParsedJob(Manifest(kPersisting)));
  Start(w);
  w.Progress(104);
  Report(w, 100, {50});
  w.Step();
  REQUIRE(w.status.checkpoint.last_complete_step == 100);
  REQUIRE(w.status.checkpoint.last_persisted_step == 50);

  // Requested: step 100 is committed in memory but not persisted, so training goes on.
  w.job.spec.suspend = true;
  JobPlan saving = w.Step();
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(saving.delete_pods.empty());
  CHECK(saving.requeue_after_ns > 0);
  const Condition* c = FindCondition(w.status, "Suspended");
  REQUIRE(c != nullptr);
  CHECK(c->status == ConditionStatus::kFalse);
  CHECK(c->reason == "SavingCheckpoint");

  // The agents persist step 100: every pod goes, actives and the standby.
  Report(w, 100, {50, 100});
  const std::set<std::string> pods = {"sus-m0", "sus-m1", w.status.standbys.at(0).pod};
  JobPlan suspended = w.Step();
  CHECK(w.status.phase == JobPhase::kSuspended);
  CHECK(Deleted(suspended) == pods);
  CHECK(HasEvent(suspended, "Suspended"));
  CHECK(w.status.resume_step == 100);
  CHECK(w.status.standbys.empty());
  c = FindCondition(w.status, "Suspended");
  REQUIRE(c != nullptr);
  CHECK(c->status == ConditionStatus::kTrue);
  CHECK(c->reason == "SuspendedBySpec");
  CHECK(absl::StrContains(c->message, "resumes from step 100, persisted in /ckpt"));
  for (const auto& [pod, desired] : suspended.desired_agents) CHECK(desired.assignment.attempt == 0);

  // Suspended: nothing is created, nothing happens.
  w.now += 60 * kSecond;
  JobPlan idle = w.Step();
  CHECK(idle.create_pods.empty());
  CHECK(idle.commands.empty());
  CHECK(w.status.phase == JobPhase::kSuspended);

  // Lifted: the pods come back and attempt 2 restores step 100.
  w.job.spec.suspend = false;
  JobPlan resumed = w.Step();
  CHECK(w.status.phase == JobPhase::kPending);
  CHECK(HasEvent(resumed, "Resumed"));
  CHECK(resumed.create_pods.size() == 3);
  JobPlan started = w.Step();
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(w.status.attempt == 2);
  REQUIRE(started.commands.size() == 2);
  for (const CommandToSend& cmd : started.commands) {
    CHECK(cmd.assignment.attempt == 2);
    CHECK(cmd.assignment.resume_step == 100);
    CHECK(cmd.assignment.checkpoint.restore_step == 100);
  }
  c = FindCondition(w.status, "Suspended");
  REQUIRE(c != nullptr);
  CHECK(c->status == ConditionStatus::kFalse);
  CHECK_FALSE(w.status.suspension.has_value());
}

TEST_CASE("a suspend whose save does not land in time suspends at the deadline from the older persisted step", "[unit]") {
  testing::PlanWorld w(testing::ParsedJob(Manifest(kPersisting)));
  Start(w);
  Report(w, 100, {50});
  w.Step();
  w.job.spec.suspend = true;
  DecisionConfig config;
  w.Step();
  REQUIRE(w.status.phase == JobPhase::kRunning);
  w.now += config.suspend_save_timeout_ns - kSecond;
  CHECK(w.Step().delete_pods.empty());
  w.now += kSecond;
  JobPlan plan = w.Step();
  CHECK(w.status.phase == JobPhase::kSuspended);
  CHECK(HasEvent(plan, "SuspendSaveTimedOut"));
  CHECK(w.status.resume_step == 50);
}

TEST_CASE("without persistent storage the suspension says training resumes from scratch", "[unit]") {
  SECTION("in-memory checkpoints only") {
    testing::PlanWorld w(testing::ParsedJob(Manifest("  checkpoint: {intervalSteps: 10}\n")));
    Start(w);
    Report(w, 100, {});
    w.Step();
    w.job.spec.suspend = true;
    w.Step();  // no save to wait for
    CHECK(w.status.phase == JobPhase::kSuspended);
    CHECK(w.status.resume_step == 0);
    const Condition* c = FindCondition(w.status, "Suspended");
    REQUIRE(c != nullptr);
    CHECK(absl::StrContains(c->message, "no persistent checkpoint storage"));
    CHECK(absl::StrContains(c->message, "from scratch"));
  }
  SECTION("checkpoints off: the trainer's own state after the last step") {
    testing::PlanWorld w(testing::ParsedJob(Manifest("")));
    Start(w);
    w.Progress(42);
    w.Step();
    w.job.spec.suspend = true;
    w.Step();
    CHECK(w.status.phase == JobPhase::kSuspended);
    CHECK(w.status.resume_step == 42);
    const Condition* c = FindCondition(w.status, "Suspended");
    REQUIRE(c != nullptr);
    CHECK(absl::StrContains(c->message, "resumes after step 42"));
    CHECK(absl::StrContains(c->message, "or from scratch"));
  }
}

TEST_CASE("an admission hold keeps a new job without pods until it is lifted", "[unit]") {
  testing::PlanWorld w(testing::ParsedJob(Manifest("")));
  w.obs.hold = JobObservation::Hold{"WorkloadNotAdmitted", "Kueue has not admitted Workload x"};
  JobPlan first = w.Step();
  CHECK(first.create_pods.empty());
  CHECK(w.status.phase == JobPhase::kSuspended);
  CHECK(w.status.attempt == 0);
  const Condition* c = FindCondition(w.status, "Suspended");
  REQUIRE(c != nullptr);
  CHECK(c->reason == "WorkloadNotAdmitted");
  CHECK(absl::StrContains(c->message, "Kueue has not admitted Workload x"));
  CHECK(w.Step().create_pods.empty());

  w.obs.hold.reset();
  JobPlan admitted = w.Step();
  CHECK(admitted.create_pods.size() == 3);
  w.Step();
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(w.status.attempt == 1);

  // Evicted: the running job is suspended again, then re-admitted as attempt 2.
  w.obs.hold = JobObservation::Hold{"WorkloadEvicted", "Preempted"};
  JobPlan evicted = w.Step();
  CHECK(Deleted(evicted).size() == 3);
  CHECK(w.status.phase == JobPhase::kSuspended);
  w.obs.hold.reset();
  w.Step();
  w.Step();
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(w.status.attempt == 2);
}

TEST_CASE("lifting a suspend while its checkpoint is being saved cancels it and keeps every pod", "[unit]") {
  testing::PlanWorld w(testing::ParsedJob(Manifest(kPersisting)));
  Start(w);
  Report(w, 100, {50});
  w.Step();
  w.job.spec.suspend = true;
  w.Step();
  REQUIRE(w.status.suspension.has_value());
  w.job.spec.suspend = false;
  JobPlan plan = w.Step();
  CHECK(HasEvent(plan, "SuspendCancelled"));
  CHECK(plan.delete_pods.empty());
  CHECK(w.status.phase == JobPhase::kRunning);
  CHECK(w.status.attempt == 1);
  CHECK_FALSE(w.status.suspension.has_value());
}

TEST_CASE("a finished job ignores spec.suspend", "[unit]") {
  testing::PlanWorld w(testing::ParsedJob(Manifest("")));
  Start(w);
  w.status.phase = JobPhase::kSucceeded;
  w.job.spec.suspend = true;
  w.Step();
  CHECK(w.status.phase == JobPhase::kSucceeded);
  CHECK_FALSE(w.status.suspension.has_value());
}

TEST_CASE("a suspended job's status survives the status JSON a restarted controller resumes from", "[unit]") {
  testing::PlanWorld w(testing::ParsedJob(Manifest(kPersisting)));
  Start(w);
  Report(w, 100, {50});
  w.Step();
  w.job.spec.suspend = true;
  w.Step();  // saving
  auto saving = JobStatusFromJson(JobStatusToJson(w.status));
  REQUIRE(saving.ok());
  REQUIRE(saving->suspension.has_value());
  CHECK(saving->suspension->persisted_before == 50);
  CHECK(saving->suspension->suspended_at == 0);
  CHECK(saving->suspension->requested_at == w.now);
  Report(w, 100, {50, 100});
  w.Step();
  auto suspended = JobStatusFromJson(JobStatusToJson(w.status));
  REQUIRE(suspended.ok());
  CHECK(suspended->phase == JobPhase::kSuspended);
  REQUIRE(suspended->suspension.has_value());
  CHECK(suspended->suspension->reason == "SuspendedBySpec");
  CHECK(suspended->suspension->suspended_at == w.now);
  CHECK(suspended->suspension->message == w.status.suspension->message);
  // Decided again from the read-back status: still suspended, nothing to do.
  w.status = *suspended;
  JobPlan again = w.Step();
  CHECK(again.Empty());
  CHECK(w.status.phase == JobPhase::kSuspended);
}

TEST_CASE("spec.suspend and the Kueue queue label are refused with their field paths when malformed", "[unit]") {
  auto with = [](const std::string& meta_labels, const std::string& suspend) {
    return ParseTrainingJob(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: bad)" + meta_labels + R"(}
spec:
  machines: 1
  gpusPerMachine: 1
  parallelism: {tensor: 1, pipeline: 1, data: 1}
  codeVersion: {command: ["train"]}
  suspend: )" + suspend + "\n");
  };
  auto ok = with("", "true");
  REQUIRE(ok.ok());
  CHECK(ok->spec.suspend);
  CHECK_FALSE(with("", "false")->spec.suspend);
  for (const char* bad : {"yes", "1", "[true]", "maybe", "\"true\"", "'false'"}) {
    auto s = with("", bad);
    INFO(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(absl::StrContains(s.status().message(), "spec.suspend"));
  }
  auto queued = with(", labels: {kueue.x-k8s.io/queue-name: team-a}", "false");
  REQUIRE(queued.ok());
  const std::vector<std::string> bad_names = {"Team_A", "-a", "a.b", "\"\"", std::string(64, 'q')};
  for (const std::string& bad : bad_names) {
    auto s = with(", labels: {kueue.x-k8s.io/queue-name: " + bad + "}", "false");
    INFO(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(absl::StrContains(s.status().message(), "metadata.labels[kueue.x-k8s.io/queue-name]"));
  }
}

}  // namespace
}  // namespace peregrine
