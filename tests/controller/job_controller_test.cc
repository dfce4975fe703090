// JobController (controller/job_controller.h) as an executor, driven round by round with
// ReconcileOnce() on an injected clock, against the kit's in-memory FakeCluster and a real
// AgentRegistry: what it creates, persists, retries and quarantines.
#include "controller/job_controller.h"

#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/clock.h"
#include "controller/agent_registry.h"
#include "controller/controller_metrics.h"
#include "tests/testing/fake_cluster.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/unix_time.h"

namespace peregrine {
namespace {

using testing::FakeCluster;
using testing::kSecond;

class NullSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage&) override {}
};

// One job's controller on a fake cluster, with the time in the test's hands.
struct Harness {
  TrainingJob job = testing::DemoJob();
  FakeCluster cluster;
  AgentRegistry registry{"test-controller"};
  ControllerMetrics metrics;
  ManualClock clock{absl::FromUnixSeconds(1'700'000'000)};
  int64_t now() { return clock.UnixNanos(); }
  std::vector<std::shared_ptr<NullSink>> sinks;
  std::unique_ptr<JobController> controller;

  void Start() {
    JobController::Options options;
    options.clock = &clock;
    controller = std::make_unique<JobController>(job, &cluster, &registry, &metrics, options);
    REQUIRE(controller->Start(/*run_loop=*/false).ok());
  }
  // Every pod's agent connects, as its role in the status says (standbys self-checked).
  void RegisterAgents() {
    const JobStatus st = controller->Snapshot();
    std::set<std::string> standbys;
    for (const StandbyStatus& s : st.standbys) standbys.insert(s.pod);
    for (const PodObservation& pod : cluster.pods()) {
      v1::Register reg;
      reg.set_job_name(job.metadata.name);
      reg.set_pod_name(pod.name);
      reg.set_machine_id(pod.machine_id);
      reg.set_role(standbys.count(pod.name) ? v1::AGENT_ROLE_STANDBY : v1::AGENT_ROLE_ACTIVE);
      reg.mutable_self_check()->set_passed(true);
      sinks.push_back(std::make_shared<NullSink>());
      REQUIRE(registry.OnRegister(sinks.back(), "", reg, now()).ok());
    }
  }
  // `rounds` rounds, one second apart.
  void Rounds(int rounds) {
    for (int i = 0; i < rounds; ++i) {
      controller->ReconcileOnce();
      clock.Advance(absl::Seconds(1));
    }
  }
};

TEST_CASE("The first round creates one pod per slot plus the standbys and persists the status", "[unit]") {
  Harness h;
  h.Start();
  h.controller->ReconcileOnce();

  const JobStatus st = h.controller->Snapshot();
  REQUIRE(st.slots.size() == 4);
  CHECK(st.standby_desired >= 1);
  CHECK(static_cast<int>(st.standbys.size()) == st.standby_desired);
  std::set<std::string> want;
  for (const SlotStatus& s : st.slots) want.insert(s.pod);
  for (const StandbyStatus& s : st.standbys) want.insert(s.pod);
  std::set<std::string> created;
  for (const PodObservation& p : h.cluster.pods()) created.insert(p.name);
  CHECK(created == want);
  CHECK(created.size() == st.slots.size() + st.standbys.size());
  REQUIRE(h.cluster.persisted().has_value());
  CHECK(h.cluster.persisted()->slots.size() == 4);

  // The pods exist now: another round creates none.
  h.controller->ReconcileOnce();
  CHECK(h.cluster.pods().size() == created.size());
}

TEST_CASE("A failed CreatePod is retried on the next round", "[unit]") {
  Harness h;
  h.Start();
  h.cluster.FailNext(FakeCluster::Method::kCreatePod, absl::UnavailableError("api server down"));
  const JobController::RoundResult failed = h.controller->ReconcileOnce();
  CHECK(absl::IsUnavailable(failed.error));  // the round's error comes back as a value
  CHECK(failed.pod_rejected.ok());           // retryable, not a refusal
  const JobStatus st = h.controller->Snapshot();
  const size_t want = st.slots.size() + st.standbys.size();
  CHECK(h.cluster.pods().size() == want - 1);  // the round went on with the other pods

  CHECK(h.controller->ReconcileOnce().error.ok());
  CHECK(h.cluster.pods().size() == want);
}

TEST_CASE("A pod the cluster refuses for good is reported as such", "[unit]") {
  Harness h;
  h.Start();
  h.cluster.FailNext(FakeCluster::Method::kCreatePod, absl::InvalidArgumentError("422: spec.containers: Required"));
  const JobController::RoundResult r = h.controller->ReconcileOnce();
  CHECK(absl::IsInvalidArgument(r.pod_rejected));
  CHECK_THAT(std::string(r.pod_rejected.message()), Catch::Contains("cannot be created: 422: spec.containers"));
}

TEST_CASE("A failed ListPods decides nothing that round", "[unit]") {
  Harness h;
  h.Start();
  h.cluster.FailNext(FakeCluster::Method::kListPods, absl::UnavailableError("api server down"));
  CHECK(absl::IsUnavailable(h.controller->ReconcileOnce().error));
  CHECK(h.cluster.pods().empty());
  CHECK_FALSE(h.cluster.persisted().has_value());
  h.controller->ReconcileOnce();
  CHECK_FALSE(h.cluster.pods().empty());
}

TEST_CASE("An evicted machine is quarantined once, a failed quarantine retried", "[unit]") {
  Harness h;
  h.Start();
  h.Rounds(1);
  h.RegisterAgents();
  h.Rounds(3);
  JobStatus st = h.controller->Snapshot();
  REQUIRE(st.attempt >= 1);
  const std::string lost_pod = st.slots[2].pod;
  std::string lost_machine;
  for (const PodObservation& p : h.cluster.pods()) {
    if (p.name == lost_pod) lost_machine = p.machine_id;
  }
  REQUIRE_FALSE(lost_machine.empty());

  h.cluster.FailNext(FakeCluster::Method::kQuarantineMachine, absl::UnavailableError("node API down"));
  h.cluster.SetPodFailed(lost_pod, "process group exited with signal 9");
  h.Rounds(10);

  st = h.controller->Snapshot();
  REQUIRE_FALSE(st.evicted.empty());
  CHECK(st.evicted.back().machine_id == lost_machine);
  const auto quarantines = h.cluster.quarantines();
  REQUIRE(quarantines.size() == 1);
  CHECK(quarantines[0].first == lost_machine);
  // The cordon is recorded in the status (and persisted) with its reason and incident.
  REQUIRE(st.cordons.size() == 1);
  CHECK(st.cordons[0].node == lost_machine);
  CHECK_THAT(st.cordons[0].reason, Catch::Contains("signal 9"));
  CHECK(st.cordons[0].incident_id == st.evicted.back().incident_id);
  CHECK(st.cordons[0].incident_id != 0);
  CHECK(st.cordons[0].by_peregrine);
  CHECK(st.cordons[0].at != 0);
  REQUIRE(h.cluster.persisted().has_value());
  REQUIRE(h.cluster.persisted()->cordons.size() == 1);
  CHECK(h.cluster.persisted()->cordons[0].node == lost_machine);
}

TEST_CASE("Start loads the persisted status: a restarted controller continues the job", "[unit]") {
  Harness first;
  first.Start();
  first.Rounds(1);
  first.RegisterAgents();
  first.Rounds(3);
  const JobStatus before = first.controller->Snapshot();
  REQUIRE(before.attempt >= 1);
  REQUIRE(first.cluster.persisted().has_value());

  Harness second;
  second.cluster.SetPersistedStatus(*first.cluster.persisted());
  second.Start();
  const JobStatus loaded = second.controller->Snapshot();
  CHECK(loaded.attempt == before.attempt);
  REQUIRE(loaded.slots.size() == before.slots.size());
  for (size_t i = 0; i < loaded.slots.size(); ++i) CHECK(loaded.slots[i].pod == before.slots[i].pod);
  REQUIRE_FALSE(second.controller->Timeline().empty());
  CHECK_THAT(second.controller->Timeline().front().what, Catch::Contains("controller resumed job"));
}

TEST_CASE("A failed LoadStatus fails Start", "[unit]") {
  Harness h;
  h.cluster.FailNext(FakeCluster::Method::kLoadStatus, absl::UnavailableError("api server down"));
  JobController::Options options;
  options.clock = &h.clock;
  JobController controller(h.job, &h.cluster, &h.registry, &h.metrics, options);
  CHECK(controller.Start(/*run_loop=*/false).code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace peregrine
