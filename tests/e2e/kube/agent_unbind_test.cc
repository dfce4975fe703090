// AgentRegistry::UnbindJob over a real loopback gRPC AgentService: when a TrainingJob is
// deleted, each of its connected agents gets a Reject naming the reason and its stream
// ends with NOT_FOUND; the registry keeps nothing of the job, so an agent that
// re-registers is refused as for an unknown job, while another job's agent is untouched.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/loopback_agent_service.h"

namespace peregrine {
namespace {

using Stream = grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>;

TrainingJobSpec OneMachineSpec() {
  return testing::TrainJob(/*machines=*/1, /*gpus_per_machine=*/1, /*tensor=*/1).spec;
}

// The AgentService with two jobs of one machine each, train/doomed and train/kept.
struct Server : testing::LoopbackAgentService {
  Server() {
    for (const char* job : {"train/doomed", "train/kept"}) {
      registry().BindJob(job, AgentRegistry::JobBinding{OneMachineSpec(), "secret"});
      AssignmentSpec a;
      a.attempt = 1;
      a.code.command = {"train"};
      registry().SetDesired(job, {{std::string(job).substr(6) + "-m0", DesiredAgent{false, a}}});
    }
  }
};

// One agent stream; the deadline only ends a broken test.
struct Agent {
  std::unique_ptr<v1::AgentService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
  Agent(const Server& server, const std::string& job) {
    stub = v1::AgentService::NewStub(server.Channel());
    context.AddMetadata("authorization", "Bearer secret");
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream = stub->Connect(&context);
    v1::AgentMessage m;
    m.mutable_register_()->set_job_namespace("train");
    m.mutable_register_()->set_job_name(job);
    m.mutable_register_()->set_pod_name(job + "-m0");
    m.mutable_register_()->set_machine_id("node-1");
    m.mutable_register_()->set_role(v1::AGENT_ROLE_ACTIVE);
    REQUIRE(stream->Write(m));
  }
};

TEST_CASE("unbinding a deleted job rejects and closes its agents' streams and keeps nothing", "[integration]") {
  Server server;
  Agent doomed(server, "doomed");
  Agent kept(server, "kept");
  v1::ControllerMessage in;
  REQUIRE(doomed.stream->Read(&in));
  REQUIRE(in.has_register_ack());
  REQUIRE(kept.stream->Read(&in));
  REQUIRE(in.has_register_ack());
  REQUIRE(server.registry().ConnectedCountForTest() == 2);
  REQUIRE(server.registry().JobCountForTest() == 2);

  server.registry().UnbindJob("train/doomed", "TrainingJob train/doomed was deleted");
  REQUIRE(doomed.stream->Read(&in));
  REQUIRE(in.has_reject());
  CHECK(in.reject().reason() == "TrainingJob train/doomed was deleted");
  CHECK_FALSE(doomed.stream->Read(&in));  // the controller ended the stream
  const grpc::Status ended = doomed.stream->Finish();
  CHECK(ended.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(ended.error_message() == "TrainingJob train/doomed was deleted");
  CHECK(server.registry().JobCountForTest() == 1);
  CHECK(server.registry().ConnectedCountForTest() == 1);
  CHECK(server.registry().Observe("train/doomed").empty());

  // Coming back is refused like any unknown job, and creates nothing.
  Agent again(server, "doomed");
  REQUIRE(again.stream->Read(&in));
  REQUIRE(in.has_reject());
  CHECK(in.reject().reason() == "unknown job train/doomed");
  CHECK(again.stream->Finish().error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(server.registry().JobCountForTest() == 1);

  // The other job's agent still talks to the controller.
  v1::AgentMessage hb;
  hb.mutable_heartbeat();
  REQUIRE(kept.stream->Write(hb));
  CHECK(server.registry().ConnectedCountForTest() == 1);
  server.registry().UnbindJob("train/unknown", "no-op");  // unknown: nothing happens
  CHECK(server.registry().JobCountForTest() == 1);
  kept.stream->WritesDone();
  CHECK(kept.stream->Finish().ok());
}

}  // namespace
}  // namespace peregrine
