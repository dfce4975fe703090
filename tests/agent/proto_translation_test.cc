// The agent's wire edge: assignments survive the round trip, every command kind
// and a RegisterAck's desired state are read, phases and outcomes are written.
#include "agent/proto_translation.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "google/protobuf/util/message_differencer.h"

namespace peregrine {
namespace {

namespace v1 = ::peregrine::v1;
using google::protobuf::util::MessageDifferencer;

v1::Assignment WireAssignment() {
  v1::Assignment a;
  a.set_machine_index(1);
  for (uint32_t i = 0; i < 2; ++i) {
    v1::RankInfo* r = a.add_ranks();
    r->set_global_rank(2 + i);
    r->set_local_rank(i);
    r->set_tp(i);
    r->set_pp(1);
    r->set_dp(0);
  }
  a.set_world_size(4);
  a.mutable_layout()->set_tensor(2);
  a.mutable_layout()->set_pipeline(2);
  a.mutable_layout()->set_data(1);
  a.mutable_layout()->set_gpus_per_machine(2);
  a.set_master_addr("10.0.0.1");
  a.set_master_port(29500);
  a.set_resume_step(100);
  a.set_attempt(3);
  a.mutable_code()->set_image("trainer:v2");
  a.mutable_code()->add_command("python");
  a.mutable_code()->add_command("train.py");
  a.mutable_code()->set_revision("abc123");
  (*a.mutable_code()->mutable_env())["LR"] = "0.1";
  (*a.mutable_code()->mutable_env())["SEED"] = "7";
  return a;
}

TEST_CASE("an assignment survives the round trip through the agent's form", "[unit]") {
  const v1::Assignment wire = WireAssignment();
  const TrainingAssignment plain = AssignmentFromProto(wire);
  CHECK(plain.attempt == 3);
  CHECK(plain.ranks.size() == 2);
  CHECK(plain.layout.gpus_per_machine == 2);
  CHECK(plain.code.env.at("SEED") == "7");
  CHECK(MessageDifferencer::Equals(AssignmentToProto(plain), wire));
  CHECK(AssignmentFromProto(AssignmentToProto(plain)) == plain);
}

TEST_CASE("the spec's fail-slow settings travel in the assignment", "[unit]") {
  v1::Assignment wire = WireAssignment();
  CHECK(AssignmentFromProto(wire).failslow_verify_threshold == 0);  // absent: agent defaults
  CHECK(!AssignmentToProto(AssignmentFromProto(wire)).has_fail_slow());
  wire.mutable_fail_slow()->set_change_point_probability(0.97);
  wire.mutable_fail_slow()->set_verify_threshold(0.25);
  const TrainingAssignment plain = AssignmentFromProto(wire);
  CHECK(plain.failslow_change_point_probability == 0.97);
  CHECK(plain.failslow_verify_threshold == 0.25);
  CHECK(MessageDifferencer::Equals(AssignmentToProto(plain), wire));
}

TEST_CASE("every command kind is read from the wire", "[unit]") {
  using Kind = AgentCommand::Kind;
  struct Case {
    const char* name;
    v1::Command wire;
    Kind kind;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, Kind kind, auto fill) {
    v1::Command c;
    c.set_id(name);
    fill(&c);
    cases.push_back(Case{name, c, kind});
  };
  add("restart_in_place", Kind::kRestartInPlace, [](v1::Command* c) {
    *c->mutable_restart_in_place()->mutable_assignment() = WireAssignment();
    c->mutable_restart_in_place()->set_grace_ms(1500);
  });
  add("activate", Kind::kActivate,
      [](v1::Command* c) { *c->mutable_activate()->mutable_assignment() = WireAssignment(); });
  add("stop", Kind::kStop, [](v1::Command* c) { c->mutable_stop()->set_grace_ms(200); });
  add("pause", Kind::kPause, [](v1::Command* c) { c->mutable_pause(); });
  add("resume", Kind::kResume, [](v1::Command* c) { c->mutable_resume(); });
  add("capture_stacks", Kind::kCaptureStacks,
      [](v1::Command* c) { c->mutable_capture_stacks()->set_include_native(true); });
  add("run_diagnostic", Kind::kRunDiagnostic, [](v1::Command* c) {
    c->mutable_run_diagnostic()->set_kind("eud");
    (*c->mutable_run_diagnostic()->mutable_params())["gpus"] = "2";
    c->mutable_run_diagnostic()->set_timeout_ms(9000);
  });
  add("nccl_mode", Kind::kNcclMode, [](v1::Command* c) {
    c->mutable_nccl_mode()->set_profiling(true);
    c->mutable_nccl_mode()->set_trap(true);
  });
  add("hot_update", Kind::kHotUpdate, [](v1::Command* c) {
    c->mutable_hot_update()->mutable_code()->set_revision("v9");
    c->mutable_hot_update()->set_urgent(true);
  });
  add("none", Kind::kUnknown, [](v1::Command*) {});
  for (const Case& c : cases) {
    SECTION(c.name) {
      const AgentCommand command = CommandFromProto(c.wire);
      CHECK(command.id == c.name);
      CHECK(command.kind == c.kind);
      switch (c.kind) {
        case Kind::kRestartInPlace:
          CHECK(command.grace_ms == 1500);
          CHECK(command.assignment == AssignmentFromProto(WireAssignment()));
          break;
        case Kind::kActivate:
          CHECK(command.assignment.attempt == 3);
          break;
        case Kind::kStop:
          CHECK(command.grace_ms == 200);
          break;
        case Kind::kCaptureStacks:
          CHECK(command.include_native);
          break;
        case Kind::kRunDiagnostic:
          CHECK(command.diagnostic_kind == "eud");
          CHECK(command.diagnostic_params == std::map<std::string, std::string>{{"gpus", "2"}});
          CHECK(command.diagnostic_timeout_ms == 9000);
          break;
        case Kind::kNcclMode:
          CHECK(command.profiling);
          CHECK(command.trap);
          break;
        case Kind::kHotUpdate:
          CHECK(command.code.revision == "v9");
          CHECK(command.urgent);
          CHECK(command.assignment.ranks.empty());
          break;
        default:
          break;
      }
    }
  }
}

TEST_CASE("a RegisterAck's role and assignment become the desired state", "[unit]") {
  v1::RegisterAck ack;
  *ack.mutable_assignment() = WireAssignment();
  CHECK_FALSE(DesiredStateFromProto(ack).role.has_value());
  ack.set_role(v1::AGENT_ROLE_STANDBY);
  CHECK(DesiredStateFromProto(ack).role == AgentRole::kStandby);
  ack.set_role(v1::AGENT_ROLE_ACTIVE);
  const DesiredState desired = DesiredStateFromProto(ack);
  CHECK(desired.role == AgentRole::kActive);
  CHECK(desired.assignment.attempt == 3);
}

TEST_CASE("phases, roles and outcomes are written as the wire spells them", "[unit]") {
  CHECK(PhaseToProto(AgentPhase::kIdle) == v1::TRAINING_PHASE_IDLE);
  CHECK(PhaseToProto(AgentPhase::kRunning) == v1::TRAINING_PHASE_RUNNING);
  CHECK(PhaseToProto(AgentPhase::kPaused) == v1::TRAINING_PHASE_PAUSED);
  CHECK(PhaseToProto(AgentPhase::kStopping) == v1::TRAINING_PHASE_STOPPING);
  CHECK(PhaseToProto(AgentPhase::kExited) == v1::TRAINING_PHASE_EXITED);
  CHECK(PhaseToProto(AgentPhase::kSucceeded) == v1::TRAINING_PHASE_SUCCEEDED);
  CHECK(RoleToProto(AgentRole::kActive) == v1::AGENT_ROLE_ACTIVE);
  CHECK(RoleToProto(AgentRole::kStandby) == v1::AGENT_ROLE_STANDBY);
  const v1::Status status = OutcomeToProto(CommandOutcome{absl::StatusCode::kFailedPrecondition, "no"});
  CHECK(status.code() == 9);
  CHECK(status.message() == "no");
}

}  // namespace
}  // namespace peregrine
