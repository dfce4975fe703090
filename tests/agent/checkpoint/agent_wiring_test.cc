// How the agent wires its checkpoint store: the flags, the ranks' environment (the store's
// directories, interval and allowance; the client library and the Python package) and the
// plan carried through the agent's own form of an assignment.
#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_flags.h"
#include "agent/launch_plan.h"
#include "agent/proto_translation.h"
#include "tests/agent/process_env.h"

namespace peregrine {
namespace {

namespace v1 = ::peregrine::v1;

absl::StatusOr<ParsedAgentFlags> Parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  std::vector<std::string> all = {"--controller", "c:1", "--job", "ns/job", "--pod", "p"};
  all.insert(all.end(), args.begin(), args.end());
  return ParseAgentFlags(all, [env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST_CASE("checkpoint flags: defaults, values, the environment and bad input", "[unit]") {
  auto defaults = Parse({});
  REQUIRE(defaults.ok());
  CHECK(defaults->options.checkpoint_root == "/dev/shm/peregrine");
  CHECK(defaults->options.data_port == 0);
  CHECK(defaults->options.data_bind == "0.0.0.0");
  CHECK(defaults->options.data_advertise.empty());
  CHECK(defaults->options.client_dir.empty());
  auto set = Parse({"--checkpoint-root", "/tmp/ck", "--data-port=7070", "--data-bind", "127.0.0.1",
                    "--data-advertise", "10.1.2.3", "--client-dir", "/opt/peregrine"});
  REQUIRE(set.ok());
  CHECK(set->options.checkpoint_root == "/tmp/ck");
  CHECK(set->options.data_port == 7070);
  CHECK(set->options.data_bind == "127.0.0.1");
  CHECK(set->options.data_advertise == "10.1.2.3");
  CHECK(set->options.client_dir == "/opt/peregrine");
  auto from_env = Parse({}, {{"PEREGRINE_CHECKPOINT_ROOT", "off"}, {"PEREGRINE_DATA_PORT", "9000"}});
  REQUIRE(from_env.ok());
  CHECK(from_env->options.checkpoint_root.empty());
  CHECK(from_env->options.data_port == 9000);
  auto bad = Parse({"--data-port", "70000"});
  REQUIRE(!bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("--data-port") && Catch::Contains("70000"));
  auto bad_env = Parse({}, {{"PEREGRINE_DATA_PORT", "x"}});
  REQUIRE(!bad_env.ok());
  CHECK_THAT(std::string(bad_env.status().message()), Catch::Contains("$PEREGRINE_DATA_PORT"));
  CHECK_THAT(AgentUsage(), Catch::Contains("--checkpoint-root") && Catch::Contains("--client-dir"));
}

v1::Assignment Assignment(uint32_t interval) {
  v1::Assignment a;
  a.set_machine_index(1);
  a.set_world_size(4);
  a.mutable_layout()->set_tensor(2);
  a.mutable_layout()->set_pipeline(1);
  a.mutable_layout()->set_data(2);
  a.mutable_layout()->set_gpus_per_machine(2);
  a.set_resume_step(40);
  a.set_attempt(2);
  a.mutable_code()->add_command("python3");
  for (uint32_t local = 0; local < 2; ++local) {
    auto* r = a.add_ranks();
    r->set_global_rank(2 + local);
    r->set_local_rank(local);
  }
  if (interval > 0) a.mutable_checkpoint()->set_interval_steps(interval);
  return a;
}

using testing::EnvOf;

TEST_CASE("ranks get the store's directory, interval and allowance when the plan saves", "[unit]") {
  LaunchContext context;
  context.agent_env = {"PYTHONPATH=/user/lib", "PEREGRINE_CHECKPOINT_INTERVAL=99"};
  context.client_dir = "/opt/peregrine";
  context.checkpoint_area = "/dev/shm/peregrine/ns.job/p";
  context.checkpoint_allowance = 123456;
  auto plan = BuildLaunchPlan(Assignment(10), context);
  REQUIRE(plan.ok());
  auto env = EnvOf((*plan)[1]);
  CHECK(env["PEREGRINE_CHECKPOINT_DIR"] == "/dev/shm/peregrine/ns.job/p/own/rank-3");
  CHECK(env["PEREGRINE_CHECKPOINT_INTERVAL"] == "10");
  CHECK(env["PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES"] == "123456");
  CHECK(env["PEREGRINE_RESUME_STEP"] == "40");
  CHECK(env["PEREGRINE_CLIENT_LIB"] == "/opt/peregrine/lib/libperegrine_client.so");
  CHECK(env["PYTHONPATH"] == "/opt/peregrine/python:/user/lib");

  SECTION("no plan: no checkpoint variables; the client library is still found") {
    context.agent_env = {};
    auto off = BuildLaunchPlan(Assignment(0), context);
    REQUIRE(off.ok());
    auto env_off = EnvOf((*off)[0]);
    CHECK(!env_off.contains("PEREGRINE_CHECKPOINT_DIR"));
    CHECK(!env_off.contains("PEREGRINE_CHECKPOINT_INTERVAL"));
    CHECK(!env_off.contains("PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES"));
    CHECK(env_off["PYTHONPATH"] == "/opt/peregrine/python");
  }
  SECTION("no store (checkpoints off on this agent): no checkpoint variables") {
    context.agent_env = {};
    context.checkpoint_area.clear();
    auto no_store = BuildLaunchPlan(Assignment(10), context);
    REQUIRE(no_store.ok());
    CHECK(!EnvOf((*no_store)[0]).contains("PEREGRINE_CHECKPOINT_DIR"));
  }
}

TEST_CASE("the checkpoint plan survives the agent's form of an assignment", "[unit]") {
  v1::Assignment a = Assignment(10);
  a.mutable_checkpoint()->set_restore_step(30);
  a.mutable_checkpoint()->set_committed_step(30);
  auto* holder = a.mutable_checkpoint()->add_restore_from();
  holder->set_slot(0);
  holder->set_address("10.0.0.5:7070");
  const v1::Assignment back = AssignmentToProto(AssignmentFromProto(a));
  CHECK(back.checkpoint().SerializeAsString() == a.checkpoint().SerializeAsString());
  CHECK(!AssignmentToProto(AssignmentFromProto(Assignment(0))).has_checkpoint());
}

}  // namespace
}  // namespace peregrine
