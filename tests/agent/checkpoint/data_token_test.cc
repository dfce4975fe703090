// The data channel's per-job token from end to end: the controller's registry hands each
// registered agent its job's token (RegisterAck.data_token), and a real CheckpointPeer
// server on loopback holding job B's token refuses job A's, a missing one and a wrong
// one, and serves the right one.
#include "agent/checkpoint/data_token.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>

#include "agent/checkpoint/backup_sender.h"
#include "agent/checkpoint/restore_fetch.h"
#include "agent/checkpoint/shard_store.h"
#include "base/clock.h"
#include "controller/agent_credentials.h"
#include "controller/agent_registry.h"
#include "tests/agent/checkpoint/loopback_peer.h"
#include "tests/agent/checkpoint/shard_samples.h"
#include "tests/testing/eventually.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::checkpoint {
namespace {

namespace v1 = ::peregrine::v1;
using ::peregrine::testing::Eventually;
using ::peregrine::testing::LoopbackPeer;
using ::peregrine::testing::PublishShard;
using ::peregrine::testing::ReadBytes;
using ::peregrine::testing::SampleShard;
using ::peregrine::testing::ShardKeyOf;
using ::peregrine::testing::TempDir;

constexpr char kKey[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

class NullSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage&) override {}
};

// The data token the registry acks to `pod` of `job` (of uid "uid-<job>").
std::string AckedDataToken(AgentRegistry& registry, const std::string& job, const std::string& pod) {
  absl::StatusOr<std::string> credential = DeriveAgentCredential(kKey, AgentIdentity{"default", job, "uid-" + job, pod});
  REQUIRE(credential.ok());
  v1::Register reg;
  reg.set_job_name(job);
  reg.set_pod_name(pod);
  reg.set_role(v1::AGENT_ROLE_ACTIVE);
  absl::StatusOr<v1::RegisterAck> ack = registry.OnRegister(std::make_shared<NullSink>(), *credential, reg, 1);
  REQUIRE(ack.ok());
  return ack->data_token();
}

TEST_CASE("Job A's acked data token is refused by job B's data channel and job B's own token works", "[integration]") {
  AgentRegistry registry("test");
  REQUIRE(registry.SetAgentKey(kKey).ok());
  const TrainingJobSpec spec = ::peregrine::testing::TrainJob(2, 1, 1).spec;
  registry.BindJob("default/a", AgentRegistry::JobBinding{spec, "uid-a"});
  registry.BindJob("default/b", AgentRegistry::JobBinding{spec, "uid-b"});
  for (const std::string job : {"a", "b"}) {
    AssignmentSpec slot0;
    slot0.attempt = 1;
    AssignmentSpec slot1 = slot0;
    slot1.slot = 1;
    registry.SetDesired("default/" + job, {{job + "-m0", DesiredAgent{false, slot0}},
                                           {job + "-m1", DesiredAgent{false, slot1}}});
  }
  const std::string token_a = AckedDataToken(registry, "a", "a-m0");
  const std::string token_b0 = AckedDataToken(registry, "b", "b-m0");
  const std::string token_b1 = AckedDataToken(registry, "b", "b-m1");
  REQUIRE(token_a.size() == 64);
  REQUIRE(token_b0 == token_b1);
  REQUIRE(token_a != token_b0);

  // Job b: slot 0 (pod b-m0) stores step 10 and backs it up to slot 1 (pod b-m1).
  TempDir dir("data-token");
  LoopbackPeer b0(dir, "default", "b", "b-m0", token_b0);
  LoopbackPeer b1(dir, "default", "b", "b-m1", token_b1);
  v1::CheckpointPlan plan0;
  plan0.set_interval_steps(10);
  v1::CheckpointPeerAddress holder;
  holder.set_slot(1);
  holder.set_address(b1.address());
  *plan0.add_backup_to() = holder;
  REQUIRE(b0.store->Configure(0, {0}, 1, plan0).ok());
  v1::CheckpointPlan plan1;
  plan1.set_interval_steps(10);
  plan1.add_hold_for(0);
  REQUIRE(b1.store->Configure(1, {1}, 1, plan1).ok());
  PublishShard(b0.store->OwnRankDir(0), 10, SampleShard(10, 0, 200000));
  REQUIRE(Eventually([&] {
    b0.store->Poll();
    const v1::CheckpointReport r = b0.store->Report();
    return r.stored_steps_size() > 0 && r.stored_steps(r.stored_steps_size() - 1) == 10;
  }));
  const std::string shard = b0.store->OwnShardPath(0, 10);
  auto never = [] { return false; };

  // Job a's token (an agent of another job that registered with the same controller),
  // none, and a wrong one are refused by both of job b's agents; nothing is stored.
  TempDir out("data-token-fetch");
  for (const std::string& presented : {token_a, std::string(), std::string(64, '0')}) {
    CHECK(absl::IsUnauthenticated(SendShard(b1.address(), presented, ShardKeyOf(0, 0, 10), shard, nullptr, RealClock(), never)));
    CHECK(absl::IsUnauthenticated(FetchShard(b0.address(), presented, ShardKeyOf(0, 0, 10), out.Path("s"))));
  }
  b1.store->Poll();
  CHECK(b1.store->Report().held().empty());
  CHECK_FALSE(std::filesystem::exists(out.Path("s")));

  // Job b's own token: the backup is stored at its holder and fetched back whole.
  REQUIRE(SendShard(b1.address(), token_b0, ShardKeyOf(0, 0, 10), shard, nullptr, RealClock(), never).ok());
  REQUIRE(Eventually([&] {
    b1.store->Poll();
    return !b1.store->Report().held().empty();
  }));
  REQUIRE(FetchShard(b1.address(), token_b1, ShardKeyOf(0, 0, 10), out.Path("s")).ok());
  CHECK(ReadBytes(out.Path("s")) == ReadBytes(shard));
}

}  // namespace
}  // namespace peregrine::checkpoint
