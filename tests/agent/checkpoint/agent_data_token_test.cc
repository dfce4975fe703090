// The real peregrine-agent binary takes its job's data token from its RegisterAck: it is
// run against the controller's real AgentService and registry on loopback (agent key set,
// so the ack carries the token), and its CheckpointPeer server is called over loopback.
// Before the agent registered, every call is refused; once registered, only the job's
// token passes (a call that passes the check is answered NOT_FOUND for a shard the agent
// does not have).
#include <catch2/catch.hpp>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/checkpoint/restore_fetch.h"
#include "controller/agent_credentials.h"
#include "controller/agent_registry.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/loopback_agent_service.h"
#include "tests/testing/ports.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::checkpoint {
namespace {

namespace v1 = ::peregrine::v1;
using ::peregrine::testing::ChildProcess;
using ::peregrine::testing::DescendantGuard;
using ::peregrine::testing::Eventually;
using ::peregrine::testing::TempDir;

constexpr char kKey[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

TEST_CASE("A registered agent's data channel accepts its job's data token from the ack and nothing before", "[integration]") {
  DescendantGuard guard;
  TempDir dir("agent-data-token");
  ::peregrine::testing::LoopbackAgentService controller;
  AgentRegistry& registry = controller.registry();
  REQUIRE(registry.SetAgentKey(kKey).ok());
  registry.BindJob("ns/j", AgentRegistry::JobBinding{::peregrine::testing::TrainJob(1, 1, 1).spec, "uid-j"});
  // The pod is not published yet: the agent's registrations are refused (NOT_FOUND).
  const std::string credential = *DeriveAgentCredential(kKey, AgentIdentity{"ns", "j", "uid-j", "j-s0"});
  dir.Write("credential", credential);
  const int data_port = ::peregrine::testing::FreeLoopbackPort();
  const std::string data_address = absl::StrCat("127.0.0.1:", data_port);
  ChildProcess::Options options;
  options.argv = {std::string(PEREGRINE_BINARY_DIR) + "/bin/peregrine-agent",
                  "--controller", absl::StrCat("127.0.0.1:", controller.port()),
                  "--job", "ns/j", "--pod", "j-s0", "--role", "standby",
                  "--credential-file", dir.Path("credential"), "--log-dir", dir.Path("logs"),
                  "--checkpoint-root", dir.Path("shm"), "--data-bind", "127.0.0.1",
                  "--data-advertise", "127.0.0.1", "--data-port", std::to_string(data_port)};
  options.stderr_path = dir.Path("agent.err");
  std::unique_ptr<ChildProcess> agent = ChildProcess::Start(options);
  REQUIRE(agent != nullptr);

  const std::string token = *DeriveDataToken(kKey, "ns", "j", "uid-j");
  const std::string other_job = *DeriveDataToken(kKey, "ns", "k", "uid-k");
  v1::ShardKey key;
  key.set_slot(0);
  key.set_global_rank(0);
  key.set_step(10);
  absl::Status fetched;
  auto fetch = [&](const std::string& presented) {
    fetched = FetchShard(data_address, presented, key, dir.Path("fetched"));
    return fetched;
  };
  // Not registered: the server is up (once the agent started) and refuses the job's token.
  REQUIRE(Eventually([&] { return !absl::IsUnavailable(fetch(token)); }));
  CHECK(absl::IsUnauthenticated(fetched));
  CHECK_THAT(std::string(fetched.message()), Catch::Contains("no data-channel token yet"));
  CHECK(registry.ConnectedCountForTest() == 0);

  // Published: the agent registers and its ack's data token opens its data channel.
  registry.SetDesired("ns/j", {{"j-s0", DesiredAgent{true, AssignmentSpec{}}}});
  REQUIRE(Eventually([&] { return absl::IsNotFound(fetch(token)); }));
  CHECK(registry.ConnectedCountForTest() == 1);
  CHECK(absl::IsUnauthenticated(fetch("")));
  CHECK(absl::IsUnauthenticated(fetch(other_job)));
  CHECK(absl::IsUnauthenticated(fetch(credential)));  // the pod's credential is not the data token
  CHECK(absl::IsNotFound(fetch(token)));
}

}  // namespace
}  // namespace peregrine::checkpoint
