// The agent stream over a real loopback gRPC server: registration, heartbeats, commands
// and results round-trip; bad input on one stream (wrong first message, bad credential, an empty
// message, bytes that are not a protobuf) is refused without dropping the other agents.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "base/clock.h"
#include "controller/agent_credentials.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/job_fixtures.h"

namespace peregrine {
namespace {

using Stream = grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>;

constexpr char kKey[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string CredentialOf(const std::string& pod) {
  return *DeriveAgentCredential(kKey, AgentIdentity{"default", "j", "uid-j", pod});
}

struct Server {
  AgentRegistry registry{"test-controller"};
  ManualClock clock{absl::FromUnixSeconds(1)};
  AgentServiceImpl service{&registry, &clock};
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  TrainingJob job;

  Server() {
    job = testing::TrainJob(/*machines=*/2, /*gpus_per_machine=*/1, /*tensor=*/1);
    REQUIRE(registry.SetAgentKey(kKey).ok());
    registry.BindJob("default/j", AgentRegistry::JobBinding{job.spec, "uid-j"});
    AssignmentSpec a;
    a.slot = 0;
    a.attempt = 1;
    a.code.command = {"train"};
    registry.SetDesired("default/j", {{"j-m0", DesiredAgent{false, a}}, {"j-m1", DesiredAgent{false, a}}});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
  }
  ~Server() {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server->Wait();
  }
  std::shared_ptr<grpc::Channel> Channel() const {
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  }
};

struct Agent {
  std::unique_ptr<v1::AgentService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
  Agent(const Server& server, const std::string& token) : stub(v1::AgentService::NewStub(server.Channel())) {
    context.AddMetadata("authorization", "Bearer " + token);
    stream = stub->Connect(&context);
  }
  static v1::AgentMessage Register(const std::string& pod) {
    v1::AgentMessage m;
    m.mutable_register_()->set_job_name("j");
    m.mutable_register_()->set_pod_name(pod);
    m.mutable_register_()->set_machine_id("7");
    m.mutable_register_()->set_role(v1::AGENT_ROLE_ACTIVE);
    return m;
  }
};

using testing::Eventually;

TEST_CASE("Register, heartbeat, command and result round-trip over loopback gRPC", "[integration]") {
  Server server;
  Agent agent(server, CredentialOf("j-m0"));
  REQUIRE(agent.stream->Write(Agent::Register("j-m0")));
  v1::ControllerMessage in;
  REQUIRE(agent.stream->Read(&in));
  REQUIRE(in.has_register_ack());
  CHECK(in.register_ack().assignment().attempt() == 1);
  CHECK(in.register_ack().assignment().world_size() == 2);
  CHECK(in.register_ack().assignment().ranks_size() == 1);

  v1::AgentMessage hb;
  hb.mutable_heartbeat()->mutable_training()->set_phase(v1::TRAINING_PHASE_RUNNING);
  hb.mutable_heartbeat()->mutable_training()->set_attempt(1);
  auto* it = hb.mutable_heartbeat()->add_iterations();
  it->set_global_rank(0);
  it->set_last_completed_step(42);
  REQUIRE(agent.stream->Write(hb));
  REQUIRE(Eventually([&] {
    auto obs = server.registry.Observe("default/j");
    return obs.size() == 1 && obs[0].rank_steps.count(0) && obs[0].rank_steps.at(0) == 42;
  }));

  CommandToSend cmd;
  cmd.pod = "j-m0";
  cmd.id = "default/j/j-m0/attempt-2";
  cmd.kind = CommandKind::kRestartInPlace;
  cmd.assignment.slot = 0;
  cmd.assignment.attempt = 2;
  server.registry.Send("default/j", cmd, 0);
  server.registry.Send("default/j", cmd, 0);  // idempotent: still one pending command
  REQUIRE(agent.stream->Read(&in));
  REQUIRE(in.has_command());
  CHECK(in.command().id() == cmd.id);
  CHECK(in.command().restart_in_place().assignment().attempt() == 2);
  CHECK(server.registry.Observe("default/j")[0].pending_command_ids.size() == 1);

  v1::AgentMessage result;
  result.mutable_command_result()->set_command_id(cmd.id);
  REQUIRE(agent.stream->Write(result));
  REQUIRE(Eventually([&] { return server.registry.Observe("default/j")[0].pending_command_ids.empty(); }));
  agent.stream->WritesDone();
  CHECK(agent.stream->Finish().ok());
  REQUIRE(Eventually([&] { return server.registry.ConnectedCountForTest() == 0; }));
}

TEST_CASE("Malformed streams are refused without dropping the other agents", "[integration]") {
  Server server;
  Agent good(server, CredentialOf("j-m0"));
  REQUIRE(good.stream->Write(Agent::Register("j-m0")));
  v1::ControllerMessage in;
  REQUIRE(good.stream->Read(&in));
  REQUIRE(in.has_register_ack());

  {  // A heartbeat before registering: Reject, then the stream ends with INVALID_ARGUMENT.
    Agent bad(server, CredentialOf("j-m1"));
    v1::AgentMessage hb;
    hb.mutable_heartbeat()->set_sent_at(1);
    REQUIRE(bad.stream->Write(hb));
    v1::ControllerMessage reply;
    REQUIRE(bad.stream->Read(&reply));
    CHECK(reply.has_reject());
    CHECK_FALSE(bad.stream->Read(&reply));
    CHECK(bad.stream->Finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  // A registration with a wrong credential, and one for an unknown pod: the stream ends.
  struct Refused {
    std::string token;
    const char* pod;
    grpc::StatusCode code;
  };
  for (const Refused& r : {Refused{"wrong", "j-m1", grpc::StatusCode::UNAUTHENTICATED},
                           Refused{CredentialOf("j-m0"), "j-m1", grpc::StatusCode::UNAUTHENTICATED},
                           Refused{CredentialOf("not-a-pod"), "not-a-pod", grpc::StatusCode::NOT_FOUND}}) {
    INFO(r.token << " " << r.pod);
    Agent bad(server, r.token);
    REQUIRE(bad.stream->Write(Agent::Register(r.pod)));
    v1::ControllerMessage reply;
    while (bad.stream->Read(&reply)) {
    }
    CHECK(bad.stream->Finish().error_code() == r.code);
  }
  {  // Bytes that are not an AgentMessage at all.
    grpc::GenericStub generic(server.Channel());
    grpc::ClientContext ctx;
    grpc::CompletionQueue cq;
    auto call = generic.PrepareCall(&ctx, "/peregrine.v1.AgentService/Connect", &cq);
    call->StartCall(reinterpret_cast<void*>(1));
    void* tag;
    bool ok;
    REQUIRE(cq.Next(&tag, &ok));
    const char junk[] = "\xff\xff\xff\xff garbage that is not protobuf \x00\x01";
    grpc::Slice slice(junk, sizeof(junk));
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, reinterpret_cast<void*>(2));
    REQUIRE(cq.Next(&tag, &ok));
    grpc::Status status;
    call->Finish(&status, reinterpret_cast<void*>(3));
    REQUIRE(cq.Next(&tag, &ok));
    CHECK_FALSE(status.ok());
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  // A registered agent's empty message gets a Reject; its stream stays open.
  REQUIRE(good.stream->Write(v1::AgentMessage()));
  REQUIRE(good.stream->Read(&in));
  CHECK(in.has_reject());
  // The good agent is untouched: still connected, still gets commands.
  CHECK(server.registry.ConnectedCountForTest() == 1);
  CommandToSend cmd;
  cmd.pod = "j-m0";
  cmd.id = "c1";
  cmd.kind = CommandKind::kStop;
  server.registry.Send("default/j", cmd, 0);
  REQUIRE(good.stream->Read(&in));
  CHECK(in.command().id() == "c1");
  good.stream->WritesDone();
  good.stream->Finish();
}

}  // namespace
}  // namespace peregrine
