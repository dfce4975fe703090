// spec.failSlow's detector settings reach the agents: the controller writes them into every
// assignment it sends (registry -> RegisterAck); tests/agent reads them back into the
// agent's detectors.
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "controller/agent_registry.h"
#include "tests/testing/job_fixtures.h"

namespace peregrine {
namespace {

class RecordingSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage& message) override { sent.push_back(message); }
  std::vector<v1::ControllerMessage> sent;
};

TEST_CASE("the assignment carries spec.failSlow's changePointProbability and verifyThreshold", "[unit]") {
  TrainingJobSpec spec = testing::TrainJob(2, 1, 1).spec;
  spec.fail_slow.change_point_probability = 0.97;
  spec.fail_slow.verify_threshold = 0.25;
  AgentRegistry registry("test");
  registry.BindJob("default/j", AgentRegistry::JobBinding{spec, ""});
  AssignmentSpec a;
  a.slot = 0;
  a.attempt = 1;
  registry.SetDesired("default/j", {{"j-m0", DesiredAgent{false, a}}});
  v1::Register reg;
  reg.set_job_name("j");
  reg.set_pod_name("j-m0");
  reg.set_role(v1::AGENT_ROLE_ACTIVE);
  absl::StatusOr<v1::RegisterAck> ack = registry.OnRegister(std::make_shared<RecordingSink>(), "", reg, 1);
  REQUIRE(ack.ok());
  REQUIRE(ack->assignment().has_fail_slow());
  CHECK(ack->assignment().fail_slow().change_point_probability() == 0.97);
  CHECK(ack->assignment().fail_slow().verify_threshold() == 0.25);
}

}  // namespace
}  // namespace peregrine
