// Crash consistency of the job controller (docs/kubernetes.md, "Crash consistency"): the
// controller is "killed" right after its k-th cluster write of a recovery (FakeCluster's
// CrashAfter: later calls have no effect), for every k, and a new controller with a new
// agent registry resumes from what the killed one left in the cluster. After each: the
// failed machine is evicted exactly once, its pod deleted at most once, only it is
// quarantined, no other pod is deleted, and the recovery completes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/agent_registry.h"
#include "controller/controller_metrics.h"
#include "controller/job_controller.h"
#include "tests/testing/fake_cluster.h"
#include "tests/testing/job_fixtures.h"

namespace peregrine {
namespace {

using testing::FakeCluster;

class NullSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage&) override {}
};

// The cluster outlives the controllers; each (re)start gets a fresh registry, as a new
// controller process does, and the running pods' agents register with it again.
struct World {
  TrainingJob job = testing::DemoJob();
  FakeCluster cluster;
  ControllerMetrics metrics;
  ManualClock clock{absl::FromUnixSeconds(1'700'000'000)};
  std::unique_ptr<AgentRegistry> registry;
  std::vector<std::shared_ptr<NullSink>> sinks;
  std::unique_ptr<JobController> controller;
  int restarts = 0;

  ~World() { controller.reset(); }

  void Start() {
    controller.reset();
    registry = std::make_unique<AgentRegistry>(absl::StrCat("controller-", restarts));
    sinks.clear();
    JobController::Options options;
    options.clock = &clock;
    controller = std::make_unique<JobController>(job, &cluster, registry.get(), &metrics, options);
    REQUIRE(controller->Start(/*run_loop=*/false).ok());
  }
  void Restart() {
    ++restarts;
    cluster.Revive();
    Start();
    RegisterAgents();
  }
  // Every running pod's agent connects, in the role the status gives its pod.
  void RegisterAgents() {
    const JobStatus st = controller->Snapshot();
    std::set<std::string> standbys;
    for (const StandbyStatus& s : st.standbys) standbys.insert(s.pod);
    for (const PodObservation& pod : cluster.pods()) {
      if (!pod.running) continue;
      v1::Register reg;
      reg.set_job_name(job.metadata.name);
      reg.set_pod_name(pod.name);
      reg.set_machine_id(pod.machine_id);
      reg.set_role(standbys.count(pod.name) ? v1::AGENT_ROLE_STANDBY : v1::AGENT_ROLE_ACTIVE);
      reg.mutable_self_check()->set_passed(true);
      sinks.push_back(std::make_shared<NullSink>());
      // A pod the status does not know (created by a killed controller whose record of it
      // was lost) is refused, as the real registry refuses it; the checks below count it.
      (void)registry->OnRegister(sinks.back(), "", reg, clock.UnixNanos());
    }
  }
  void Round() {
    controller->ReconcileOnce();
    clock.Advance(absl::Seconds(1));
  }
};

struct Outcome {
  bool crashed = false;
  JobStatus status;
  std::vector<std::string> deletes;
  std::vector<std::pair<std::string, std::string>> quarantines;
  std::string lost_pod, lost_machine;
};

// Machine slot 2 fails; the controller is killed after `k` more writes, restarted, and
// left to finish the recovery.
Outcome KillDuringRecovery(int k) {
  World w;
  w.Start();
  w.Round();
  w.RegisterAgents();
  for (int i = 0; i < 3; ++i) w.Round();
  JobStatus st = w.controller->Snapshot();
  REQUIRE(st.attempt >= 1);
  Outcome out;
  out.lost_pod = st.slots[2].pod;
  for (const PodObservation& p : w.cluster.pods()) {
    if (p.name == out.lost_pod) out.lost_machine = p.machine_id;
  }
  REQUIRE_FALSE(out.lost_machine.empty());
  w.cluster.SetPodFailed(out.lost_pod, "process group exited with signal 9");
  w.cluster.CrashAfter(k);
  for (int i = 0; i < 10 && !w.cluster.crashed(); ++i) w.Round();
  out.crashed = w.cluster.crashed();
  w.Restart();
  for (int i = 0; i < 10; ++i) w.Round();
  REQUIRE(w.cluster.persisted().has_value());
  out.status = *w.cluster.persisted();
  out.deletes = w.cluster.deletes();
  out.quarantines = w.cluster.quarantines();
  return out;
}

TEST_CASE("A controller killed after any write of a recovery evicts the machine once and deletes its pod once", "[unit]") {
  int kill_points = 0;
  for (int k = 1; k <= 40; ++k) {
    const Outcome out = KillDuringRecovery(k);
    if (!out.crashed) break;  // the recovery needed fewer writes: every point is covered
    ++kill_points;
    INFO("killed after write " << k << " of the recovery");
    int evictions = 0;
    for (const Eviction& e : out.status.evicted) {
      CHECK(e.machine_id == out.lost_machine);  // no healthy machine evicted
      evictions += e.machine_id == out.lost_machine ? 1 : 0;
      CHECK(e.quarantined);
    }
    CHECK(evictions == 1);
    std::map<std::string, int> deletes;
    for (const std::string& name : out.deletes) ++deletes[name];
    CHECK(deletes[out.lost_pod] <= 1);
    for (const auto& [name, n] : deletes) CHECK(name == out.lost_pod);  // no standby churn
    std::set<std::string> quarantined;
    for (const auto& [machine, reason] : out.quarantines) quarantined.insert(machine);
    CHECK(quarantined == std::set<std::string>{out.lost_machine});
    // The recovery completed: slot 2 holds another pod, the attempt moved on.
    REQUIRE(out.status.slots.size() > 2);
    CHECK(out.status.slots[2].pod != out.lost_pod);
    CHECK(out.status.recoveries == 1);
    CHECK(out.status.incidents.size() == 1);
  }
  CHECK(kill_points >= 3);
}

TEST_CASE("A failed status write acts on nothing and is written by a later round", "[unit]") {
  World w;
  w.Start();
  w.Round();
  w.RegisterAgents();
  for (int i = 0; i < 3; ++i) w.Round();
  const std::string lost_pod = w.controller->Snapshot().slots[2].pod;
  w.cluster.SetPodFailed(lost_pod, "process group exited with signal 9");
  w.Round();  // the incident opens (triage)
  const int deletes_before = static_cast<int>(w.cluster.deletes().size());
  w.cluster.FailNext(FakeCluster::Method::kPersistStatus, absl::UnavailableError("api server down"));
  const JobController::RoundResult failed = w.controller->ReconcileOnce();  // the eviction round
  CHECK(absl::IsUnavailable(failed.status_write));
  CHECK(failed.requeue_after_ns > 0);
  CHECK(static_cast<int>(w.cluster.deletes().size()) == deletes_before);  // nothing acted on
  CHECK(w.cluster.quarantines().empty());
  REQUIRE(w.cluster.persisted().has_value());
  CHECK(w.cluster.persisted()->evicted.empty());
  CHECK(w.controller->Snapshot().evicted.empty());  // the in-memory status is the written one

  w.clock.Advance(absl::Seconds(1));
  CHECK(w.controller->ReconcileOnce().status_write.ok());
  REQUIRE(w.cluster.persisted().has_value());
  REQUIRE(w.cluster.persisted()->evicted.size() == 1);
  CHECK(w.cluster.persisted()->evicted[0].pod == lost_pod);
  CHECK(w.cluster.persisted()->evicted[0].quarantined);
  CHECK(w.cluster.deletes() == std::vector<std::string>{lost_pod});
}

}  // namespace
}  // namespace peregrine
