// When the registry wakes a job's decision: progress-only heartbeats at most once per
// heartbeat interval (whatever the number of agents), anything else at once.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "controller/agent_registry.h"
#include "tests/testing/job_fixtures.h"

namespace peregrine {
namespace {

constexpr int64_t kMs = 1000000;

class NullSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage&) override {}
};

// A job of `machines` registered agents, heartbeat interval 1 s, counting wake-ups.
struct Fleet {
  explicit Fleet(int machines) {
    registry.SetHeartbeatIntervalMs(1000);
    registry.BindJob("default/j", AgentRegistry::JobBinding{testing::TrainJob(machines, 1, 1).spec, ""});
    std::map<std::string, DesiredAgent> desired;
    for (int i = 0; i < machines; ++i) {
      AssignmentSpec a;
      a.slot = i;
      a.attempt = 1;
      desired["j-m" + std::to_string(i)] = DesiredAgent{false, a};
    }
    registry.SetDesired("default/j", desired);
    for (int i = 0; i < machines; ++i) {
      sinks.push_back(std::make_shared<NullSink>());
      v1::Register reg;
      reg.set_job_name("j");
      reg.set_pod_name("j-m" + std::to_string(i));
      reg.set_role(v1::AGENT_ROLE_ACTIVE);
      reg.mutable_training()->set_attempt(1);
      reg.mutable_training()->set_phase(v1::TRAINING_PHASE_RUNNING);
      REQUIRE(registry.OnRegister(sinks.back(), "", reg, 0).ok());
    }
    registry.SetChangeCallback([this](const std::string& key) {
      CHECK(key == "default/j");
      ++wakeups;
    });
  }
  // A heartbeat of agent `i`: running attempt 1 at `step`.
  v1::AgentMessage Heartbeat(uint64_t step) const {
    v1::AgentMessage m;
    v1::Heartbeat* hb = m.mutable_heartbeat();
    hb->mutable_training()->set_attempt(1);
    hb->mutable_training()->set_phase(v1::TRAINING_PHASE_RUNNING);
    v1::IterationSummary* it = hb->add_iterations();
    it->set_global_rank(0);
    it->set_last_completed_step(step);
    it->set_last_loss(2.0);
    it->set_mean_iteration_seconds(0.1);
    return m;
  }
  void Send(int i, const v1::AgentMessage& m, int64_t now) {
    REQUIRE(registry.OnMessage(sinks[static_cast<size_t>(i)].get(), m, now).ok());
  }

  AgentRegistry registry{"controller-0"};
  std::vector<std::shared_ptr<NullSink>> sinks;
  int wakeups = 0;
};

TEST_CASE("Progress-only heartbeats wake the job at most once per heartbeat interval, however many agents", "[unit]") {
  Fleet fleet(50);
  // 5 s of heartbeats: every agent once a second, spread over the second.
  for (int second = 0; second < 5; ++second) {
    for (int i = 0; i < 50; ++i) {
      fleet.Send(i, fleet.Heartbeat(static_cast<uint64_t>(second) * 10 + 1), (1000 + second * 1000 + i * 20) * kMs);
    }
  }
  // One wake-up per interval (250 heartbeats), not one per heartbeat.
  CHECK(fleet.wakeups == 5);
  // What the skipped heartbeats brought is in the observation all the same.
  for (const AgentObservation& a : fleet.registry.Observe("default/j")) CHECK(a.rank_steps.at(0) == 41);
}

TEST_CASE("A heartbeat that changes more than progress wakes the job at once", "[unit]") {
  Fleet fleet(3);
  fleet.Send(0, fleet.Heartbeat(1), 1000 * kMs);
  REQUIRE(fleet.wakeups == 1);
  fleet.Send(1, fleet.Heartbeat(1), 1001 * kMs);  // progress within the interval
  CHECK(fleet.wakeups == 1);

  SECTION("a process exit") {
    v1::AgentMessage m = fleet.Heartbeat(2);
    v1::ProcessState* p = m.mutable_heartbeat()->mutable_training()->add_processes();
    p->set_global_rank(0);
    p->set_running(false);
    p->set_exit_code(1);
    fleet.Send(2, m, 1002 * kMs);
    CHECK(fleet.wakeups == 2);
  }
  SECTION("a phase") {
    v1::AgentMessage m = fleet.Heartbeat(2);
    m.mutable_heartbeat()->mutable_training()->set_phase(v1::TRAINING_PHASE_PAUSED);
    fleet.Send(2, m, 1002 * kMs);
    CHECK(fleet.wakeups == 2);
  }
  SECTION("an attempt") {
    v1::AgentMessage m = fleet.Heartbeat(0);
    m.mutable_heartbeat()->mutable_training()->set_attempt(2);
    fleet.Send(2, m, 1002 * kMs);
    CHECK(fleet.wakeups == 2);
  }
  SECTION("a non-OK inspection, then the same one again, then OK") {
    v1::AgentMessage m = fleet.Heartbeat(2);
    v1::InspectionResult* r = m.mutable_heartbeat()->add_inspections();
    r->set_kind("gpu");
    r->set_component("gpu0");
    r->set_status(v1::INSPECTION_STATUS_WARNING);
    r->set_summary("ECC errors rising");
    r->set_observed_at(1002 * kMs);
    fleet.Send(2, m, 1002 * kMs);
    CHECK(fleet.wakeups == 2);
    r->set_observed_at(1003 * kMs);  // the same finding, re-sent: progress only
    fleet.Send(2, m, 1003 * kMs);
    CHECK(fleet.wakeups == 2);
    fleet.Send(2, fleet.Heartbeat(3), 1004 * kMs);  // it cleared
    CHECK(fleet.wakeups == 3);
  }
  SECTION("a checkpoint report") {
    v1::AgentMessage m = fleet.Heartbeat(2);
    m.mutable_heartbeat()->mutable_checkpoint()->add_stored_steps(2);
    fleet.Send(2, m, 1002 * kMs);
    CHECK(fleet.wakeups == 2);
    fleet.Send(2, m, 1003 * kMs);  // unchanged
    CHECK(fleet.wakeups == 2);
  }
  SECTION("an event") {
    v1::AgentMessage m;
    m.mutable_event()->mutable_process_exit()->set_global_rank(0);
    fleet.Send(2, m, 1002 * kMs);
    CHECK(fleet.wakeups == 2);
  }
  SECTION("a clock that went back") {
    fleet.Send(2, fleet.Heartbeat(2), 900 * kMs);
    CHECK(fleet.wakeups == 2);
  }
}

}  // namespace
}  // namespace peregrine
