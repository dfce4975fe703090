// Agent identity: per-pod credentials (controller/agent_credentials.h) and the registry's
// rules on who may register (controller/agent_registry.h), through the registry itself and
// through the real AgentService on loopback gRPC: a pod cannot register as another pod or
// with another job's credential, a newer registration replaces the older stream, a silent
// stream is closed, a job's open streams are capped, results of commands the registry did
// not send are not stored, a bootstrap token buys a credential that survives a
// controller restart, and every ack carries the job's checkpoint data token.
#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "controller/agent_credentials.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/job_fixtures.h"

namespace peregrine {
namespace {

using testing::Eventually;

constexpr char kKey[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr char kOtherKey[] = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

std::string Credential(const std::string& job, const std::string& uid, const std::string& pod,
                       const std::string& key = kKey) {
  absl::StatusOr<std::string> c = DeriveAgentCredential(key, AgentIdentity{"default", job, uid, pod});
  REQUIRE(c.ok());
  return *c;
}

TEST_CASE("An agent credential is 64 hex characters bound to key, namespace, job, uid and pod", "[unit]") {
  const std::string c = Credential("a", "uid-a", "a-m0");
  CHECK(c.size() == 64);
  CHECK(c == Credential("a", "uid-a", "a-m0"));
  CHECK(c != Credential("a", "uid-a", "a-m1"));
  CHECK(c != Credential("b", "uid-a", "a-m0"));
  CHECK(c != Credential("a", "uid-a2", "a-m0"));
  CHECK(c != Credential("a", "uid-a", "a-m0", kOtherKey));
  CHECK(c != *DeriveAgentCredential(kKey, AgentIdentity{"other", "a", "uid-a", "a-m0"}));
  CHECK(VerifyAgentCredential(kKey, AgentIdentity{"default", "a", "uid-a", "a-m0"}, c).ok());
  CHECK(VerifyAgentCredential(kKey, AgentIdentity{"default", "a", "uid-a", "a-m1"}, c).code() ==
        absl::StatusCode::kUnauthenticated);
  CHECK(VerifyAgentCredential(kKey, AgentIdentity{"default", "a", "uid-a", "a-m0"}, "").code() ==
        absl::StatusCode::kUnauthenticated);
}

TEST_CASE("Deriving a credential refuses a malformed key or identity, naming what is wrong", "[unit]") {
  const AgentIdentity id{"default", "a", "uid", "a-m0"};
  auto short_key = DeriveAgentCredential("abcd", id);
  CHECK(short_key.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(short_key.status().message()), Catch::Contains("64 hex"));
  CHECK(DeriveAgentCredential(std::string(64, 'g'), id).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(DeriveAgentCredential(kKey, AgentIdentity{"default", "a", "uid", ""}).status().message()),
             Catch::Contains("pod"));
  CHECK_THAT(std::string(DeriveAgentCredential(kKey, AgentIdentity{"", "a", "uid", "p"}).status().message()),
             Catch::Contains("namespace"));
  // '/' would make two identities share one message ("a/b" + "c" vs "a" + "b/c").
  CHECK(DeriveAgentCredential(kKey, AgentIdentity{"default", "a", "uid", "x/y"}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  AgentRegistry registry("c");
  CHECK(registry.SetAgentKey("not-a-key").code() == absl::StatusCode::kInvalidArgument);
  CHECK(registry.SetAgentKey(kKey).ok());
}

class RecordingSink : public AgentStreamSink {
 public:
  void Send(const v1::ControllerMessage& message) override {
    absl::MutexLock lock(&mu);
    sent.push_back(message);
  }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu);
    ended = status;
    end_calls++;
  }
  absl::Mutex mu;
  std::vector<v1::ControllerMessage> sent;
  absl::Status ended;
  int end_calls = 0;
};

v1::Register Reg(const std::string& job, const std::string& pod) {
  v1::Register reg;
  reg.set_job_name(job);
  reg.set_pod_name(pod);
  reg.set_machine_id(pod);
  reg.set_role(v1::AGENT_ROLE_ACTIVE);
  return reg;
}

std::map<std::string, DesiredAgent> Desired(const std::string& job, int pods) {
  std::map<std::string, DesiredAgent> out;
  for (int i = 0; i < pods; ++i) {
    AssignmentSpec a;
    a.slot = i;
    a.attempt = 1;
    out[job + "-m" + std::to_string(i)] = DesiredAgent{false, a};
  }
  return out;
}

// Two jobs, a and b, of two pods each, under kKey.
struct TwoJobs {
  AgentRegistry registry{"test"};
  TwoJobs() {
    REQUIRE(registry.SetAgentKey(kKey).ok());
    const TrainingJobSpec spec = testing::TrainJob(2, 1, 1).spec;
    registry.BindJob("default/a", AgentRegistry::JobBinding{spec, "uid-a"});
    registry.BindJob("default/b", AgentRegistry::JobBinding{spec, "uid-b"});
    registry.SetDesired("default/a", Desired("a", 2));
    registry.SetDesired("default/b", Desired("b", 2));
  }
  absl::StatusCode Register(const std::string& token, const std::string& job, const std::string& pod) {
    return registry.OnRegister(std::make_shared<RecordingSink>(), token, Reg(job, pod), 1).status().code();
  }
};

TEST_CASE("A register must carry the claimed pod's own credential of its own job", "[unit]") {
  TwoJobs t;
  // Pod a-m0's credential opens a-m0 and nothing else.
  const std::string a0 = Credential("a", "uid-a", "a-m0");
  CHECK(t.Register(a0, "a", "a-m1") == absl::StatusCode::kUnauthenticated);  // P as Q
  CHECK(t.Register(Credential("a", "uid-a", "b-m0"), "b", "b-m0") == absl::StatusCode::kUnauthenticated);
  CHECK(t.Register(Credential("a", "uid-a", "a-m0"), "b", "a-m0") == absl::StatusCode::kNotFound);
  CHECK(t.Register(Credential("b", "uid-a", "b-m0"), "b", "b-m0") == absl::StatusCode::kUnauthenticated);
  CHECK(t.Register("", "a", "a-m0") == absl::StatusCode::kUnauthenticated);          // missing
  CHECK(t.Register("garbage", "a", "a-m0") == absl::StatusCode::kUnauthenticated);   // garbage
  CHECK(t.Register(Credential("a", "uid-a", "a-m0", kOtherKey), "a", "a-m0") == absl::StatusCode::kUnauthenticated);
  CHECK(t.registry.ConnectedCountForTest() == 0);
  // The right one registers, and its ack carries the credential to keep.
  auto ack = t.registry.OnRegister(std::make_shared<RecordingSink>(), a0, Reg("a", "a-m0"), 1);
  REQUIRE(ack.ok());
  CHECK(ack->agent_credential() == a0);
  CHECK(t.Register(Credential("b", "uid-b", "b-m1"), "b", "b-m1") == absl::StatusCode::kOk);
  // A job re-created under the same name has a new uid: the old credentials are void.
  t.registry.BindJob("default/a", AgentRegistry::JobBinding{testing::TrainJob(2, 1, 1).spec, "uid-a2"});
  CHECK(t.Register(a0, "a", "a-m0") == absl::StatusCode::kUnauthenticated);
  CHECK(t.Register(Credential("a", "uid-a2", "a-m0"), "a", "a-m0") == absl::StatusCode::kOk);
}

TEST_CASE("A job's data token is 64 hex characters bound to key, namespace, job and uid, and no credential", "[unit]") {
  const std::string a = *DeriveDataToken(kKey, "default", "a", "uid-a");
  CHECK(a.size() == 64);
  CHECK(a == *DeriveDataToken(kKey, "default", "a", "uid-a"));
  CHECK(a != *DeriveDataToken(kKey, "default", "b", "uid-a"));
  CHECK(a != *DeriveDataToken(kKey, "other", "a", "uid-a"));
  CHECK(a != *DeriveDataToken(kKey, "default", "a", "uid-a2"));
  CHECK(a != *DeriveDataToken(kOtherKey, "default", "a", "uid-a"));
  CHECK(a != Credential("a", "uid-a", "a-m0"));
  CHECK(DeriveDataToken(kKey, "default", "a", "").ok());  // local mode has no uid
  CHECK_THAT(std::string(DeriveDataToken("abcd", "default", "a", "u").status().message()), Catch::Contains("64 hex"));
  CHECK_THAT(std::string(DeriveDataToken(kKey, "", "a", "u").status().message()), Catch::Contains("namespace"));
  CHECK_THAT(std::string(DeriveDataToken(kKey, "default", "", "u").status().message()), Catch::Contains("job name"));
  CHECK(DeriveDataToken(kKey, "default", "a/b", "u").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Every agent of a job gets the job's data token in its ack and no other job's", "[unit]") {
  TwoJobs t;
  auto ack = [&](const std::string& job, const std::string& pod) {
    auto a = t.registry.OnRegister(std::make_shared<RecordingSink>(), Credential(job, "uid-" + job, pod), Reg(job, pod),
                                   1);
    REQUIRE(a.ok());
    return *a;
  };
  const std::string a0 = ack("a", "a-m0").data_token();
  CHECK(a0 == *DeriveDataToken(kKey, "default", "a", "uid-a"));
  CHECK(ack("a", "a-m1").data_token() == a0);  // the same for every pod of the job
  CHECK(ack("a", "a-m0").data_token() == a0);  // and on every registration
  const std::string b0 = ack("b", "b-m0").data_token();
  CHECK(b0 == *DeriveDataToken(kKey, "default", "b", "uid-b"));
  CHECK(b0 != a0);
  // A job re-created under the same name (a new uid) gets a new token.
  t.registry.BindJob("default/a", AgentRegistry::JobBinding{testing::TrainJob(2, 1, 1).spec, "uid-a2"});
  auto recreated = t.registry.OnRegister(std::make_shared<RecordingSink>(), Credential("a", "uid-a2", "a-m0"),
                                         Reg("a", "a-m0"), 2);
  REQUIRE(recreated.ok());
  CHECK(recreated->data_token() == *DeriveDataToken(kKey, "default", "a", "uid-a2"));
  CHECK(recreated->data_token() != a0);
}

TEST_CASE("Only pods the job controller published may register", "[unit]") {
  TwoJobs t;
  CHECK(t.Register(Credential("a", "uid-a", "a-m7"), "a", "a-m7") == absl::StatusCode::kNotFound);
  CHECK(t.Register(Credential("c", "", "c-m0"), "c", "c-m0") == absl::StatusCode::kNotFound);
}

TEST_CASE("A second registration of a pod ends the older stream, which is told why", "[unit]") {
  TwoJobs t;
  auto older = std::make_shared<RecordingSink>();
  auto newer = std::make_shared<RecordingSink>();
  const std::string c = Credential("a", "uid-a", "a-m0");
  REQUIRE(t.registry.OnRegister(older, c, Reg("a", "a-m0"), 1).ok());
  REQUIRE(t.registry.OnRegister(newer, c, Reg("a", "a-m0"), 2).ok());
  {
    absl::MutexLock lock(&older->mu);
    CHECK(older->end_calls == 1);
    CHECK(older->ended.code() == absl::StatusCode::kAborted);
    CHECK_THAT(std::string(older->ended.message()), Catch::Contains("replaced by a newer registration"));
    REQUIRE_FALSE(older->sent.empty());
    CHECK(older->sent.back().has_reject());
  }
  CHECK(newer->end_calls == 0);
  CHECK(t.registry.ConnectedCountForTest() == 1);
  // The older stream's disconnect does not disconnect the newer one.
  t.registry.OnDisconnect(older.get(), 3);
  CHECK(t.registry.ConnectedCountForTest() == 1);
  // Commands go to the newer stream.
  CommandToSend cmd;
  cmd.pod = "a-m0";
  cmd.id = "x";
  cmd.kind = CommandKind::kPause;
  t.registry.Send("default/a", cmd, 4);
  absl::MutexLock lock(&newer->mu);
  REQUIRE_FALSE(newer->sent.empty());
  CHECK(newer->sent.back().command().id() == "x");
}

TEST_CASE("A job's open agent streams are capped at its desired pods plus a margin", "[unit]") {
  AgentRegistry registry("test");
  REQUIRE(registry.SetAgentKey(kKey).ok());
  registry.BindJob("default/a", AgentRegistry::JobBinding{testing::TrainJob(2, 1, 1).spec, "uid-a"});
  // Six pods register; then the job controller replaces them all by one new pod (the old
  // ones are still connected: their pods are being deleted).
  const int old_pods = static_cast<int>(kAgentStreamMargin) + 2;
  registry.SetDesired("default/a", Desired("a", old_pods));
  for (int i = 0; i < old_pods; ++i) {
    const std::string pod = "a-m" + std::to_string(i);
    REQUIRE(registry.OnRegister(std::make_shared<RecordingSink>(), Credential("a", "uid-a", pod), Reg("a", pod), 1)
                .ok());
  }
  std::map<std::string, DesiredAgent> next;
  next["a-n0"] = DesiredAgent{};
  registry.SetDesired("default/a", next);
  REQUIRE(registry.MaxAgentStreams("default/a") == 1 + kAgentStreamMargin);
  auto refused = registry.OnRegister(std::make_shared<RecordingSink>(), Credential("a", "uid-a", "a-n0"),
                                     Reg("a", "a-n0"), 2);
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("open agent streams"));
  // Once old pods are gone (forgotten), the new one gets in.
  registry.Forget("default/a", "a-m0");
  registry.Forget("default/a", "a-m1");
  CHECK(registry
            .OnRegister(std::make_shared<RecordingSink>(), Credential("a", "uid-a", "a-n0"), Reg("a", "a-n0"), 3)
            .ok());
}

TEST_CASE("Results of commands the registry has not pending for the agent are dropped and counted", "[unit]") {
  TwoJobs t;
  auto sink = std::make_shared<RecordingSink>();
  REQUIRE(t.registry.OnRegister(sink, Credential("a", "uid-a", "a-m0"), Reg("a", "a-m0"), 1).ok());
  auto other = std::make_shared<RecordingSink>();
  REQUIRE(t.registry.OnRegister(other, Credential("a", "uid-a", "a-m1"), Reg("a", "a-m1"), 1).ok());
  CommandToSend cmd;
  cmd.pod = "a-m1";
  cmd.id = "for-m1";
  cmd.kind = CommandKind::kPause;
  t.registry.Send("default/a", cmd, 2);
  auto result = [](const std::string& id) {
    v1::AgentMessage m;
    m.mutable_command_result()->set_command_id(id);
    return m;
  };
  // Invented ids, and another agent's command, from a-m0: nothing stored.
  for (int i = 0; i < 1000; ++i) CHECK(t.registry.OnMessage(sink.get(), result("made-up-" + std::to_string(i)), 3).ok());
  CHECK(t.registry.OnMessage(sink.get(), result("for-m1"), 3).ok());
  CHECK(t.registry.DroppedCommandResults() == 1001);
  for (const AgentObservation& o : t.registry.Observe("default/a")) {
    CHECK(o.command_results.empty());
    if (o.pod == "a-m1") CHECK(o.pending_command_ids == std::vector<std::string>{"for-m1"});
  }
  // The agent it was sent to answers it: stored, no longer pending; a repeat is dropped.
  CHECK(t.registry.OnMessage(other.get(), result("for-m1"), 4).ok());
  CHECK(t.registry.OnMessage(other.get(), result("for-m1"), 5).ok());
  CHECK(t.registry.DroppedCommandResults() == 1002);
  for (const AgentObservation& o : t.registry.Observe("default/a")) {
    if (o.pod == "a-m1") {
      CHECK(o.command_results.count("for-m1") == 1);
      CHECK(o.pending_command_ids.empty());
    }
  }
}

// Accepts "boot:<pod>" for that pod only; counts its calls.
class FakeBootstrap : public AgentBootstrapVerifier {
 public:
  absl::Status Verify(const AgentIdentity& identity, const std::string& token) override {
    ++calls;
    if (token == "boot:" + identity.pod) return absl::OkStatus();
    return absl::UnauthenticatedError("not this pod's bootstrap token");
  }
  int calls = 0;
};

TEST_CASE("A bootstrap token is checked only when the bearer is not the pod's credential", "[unit]") {
  TwoJobs t;
  auto boot = std::make_shared<FakeBootstrap>();
  t.registry.SetBootstrapVerifier(boot);
  CHECK(t.Register("boot:a-m1", "a", "a-m0") == absl::StatusCode::kUnauthenticated);  // another pod's
  CHECK(t.Register("", "a", "a-m0") == absl::StatusCode::kUnauthenticated);
  auto ack = t.registry.OnRegister(std::make_shared<RecordingSink>(), "boot:a-m0", Reg("a", "a-m0"), 1);
  REQUIRE(ack.ok());
  CHECK(ack->agent_credential() == Credential("a", "uid-a", "a-m0"));
  const int calls = boot->calls;
  CHECK(t.Register(ack->agent_credential(), "a", "a-m0") == absl::StatusCode::kOk);
  CHECK(boot->calls == calls);  // a credential needs no review
}

// The real service on loopback gRPC over a registry keyed with kKey and bound to job a.
struct Server {
  explicit Server(AgentServiceOptions options = {}, std::shared_ptr<AgentBootstrapVerifier> boot = nullptr)
      : service(&registry, &clock, options) {
    REQUIRE(registry.SetAgentKey(kKey).ok());
    if (boot) registry.SetBootstrapVerifier(std::move(boot));
    registry.BindJob("default/a", AgentRegistry::JobBinding{testing::TrainJob(2, 1, 1).spec, "uid-a"});
    registry.SetDesired("default/a", Desired("a", 2));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    ApplyAgentServerKeepalive(&builder);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
  }
  ~Server() {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server->Wait();
  }
  AgentRegistry registry{"test-controller"};
  ManualClock clock{absl::FromUnixSeconds(1)};
  AgentServiceImpl service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

using Stream = grpc::ClientReaderWriter<v1::AgentMessage, v1::ControllerMessage>;

struct Agent {
  Agent(const Server& server, const std::string& token)
      : stub(v1::AgentService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port),
                                                           grpc::InsecureChannelCredentials()))) {
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    stream = stub->Connect(&context);
  }
  // Registers as `pod` of job a; the first reply.
  v1::ControllerMessage Register(const std::string& pod) {
    v1::AgentMessage m;
    *m.mutable_register_() = Reg("a", pod);
    REQUIRE(stream->Write(m));
    v1::ControllerMessage in;
    REQUIRE(stream->Read(&in));
    return in;
  }
  // Reads to the end; the stream's status and the last reject's reason.
  grpc::Status Drain(std::string* last_reject = nullptr) {
    v1::ControllerMessage in;
    while (stream->Read(&in)) {
      if (in.has_reject() && last_reject != nullptr) *last_reject = in.reject().reason();
    }
    return stream->Finish();
  }
  std::unique_ptr<v1::AgentService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
};

TEST_CASE("Over gRPC a pod with another pod's credential is refused and the stream ends", "[integration]") {
  Server server;
  Agent impostor(server, Credential("a", "uid-a", "a-m1"));
  CHECK(impostor.Register("a-m0").has_reject());
  CHECK(impostor.Drain().error_code() == grpc::StatusCode::UNAUTHENTICATED);
  Agent anonymous(server, "");
  CHECK(anonymous.Register("a-m0").has_reject());
  CHECK(anonymous.Drain().error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(server.registry.ConnectedCountForTest() == 0);
}

TEST_CASE("Over gRPC a newer registration of a pod ends the older stream with ABORTED", "[integration]") {
  Server server;
  const std::string c = Credential("a", "uid-a", "a-m0");
  Agent older(server, c);
  REQUIRE(older.Register("a-m0").has_register_ack());
  Agent newer(server, c);
  REQUIRE(newer.Register("a-m0").has_register_ack());
  std::string why;
  const grpc::Status status = older.Drain(&why);
  CHECK(status.error_code() == grpc::StatusCode::ABORTED);
  CHECK_THAT(status.error_message(), Catch::Contains("replaced by a newer registration"));
  CHECK_THAT(why, Catch::Contains("replaced by a newer registration"));
  REQUIRE(Eventually([&] { return server.registry.ConnectedCountForTest() == 1; }));
  newer.stream->WritesDone();
  CHECK(newer.Drain().ok());
}

TEST_CASE("Over gRPC a stream that sends no register within the deadline is closed", "[integration]") {
  AgentServiceOptions options;
  options.register_timeout = absl::Milliseconds(200);
  Server server(options);
  Agent silent(server, Credential("a", "uid-a", "a-m0"));
  std::string why;
  const grpc::Status status = silent.Drain(&why);  // returns once the server closes it
  CHECK(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  CHECK_THAT(why, Catch::Contains("no register message within"));
  // A stream that registers in time is not closed by the deadline.
  Agent prompt(server, Credential("a", "uid-a", "a-m1"));
  REQUIRE(prompt.Register("a-m1").has_register_ack());
  // Wait until a stream opened after it has passed its own deadline (so prompt's passed
  // too), then show prompt's stream is still open: an empty message gets its Reject.
  Agent later(server, "");
  CHECK(later.Drain().error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
  v1::AgentMessage empty;
  REQUIRE(prompt.stream->Write(empty));
  v1::ControllerMessage in;
  REQUIRE(prompt.stream->Read(&in));  // the Reject of an empty message: the stream is open
  CHECK(in.has_reject());
  prompt.stream->WritesDone();
  CHECK(prompt.Drain().ok());
}

TEST_CASE("A bootstrap token buys a credential that opens the pod after a controller restart", "[integration]") {
  std::string credential;
  {
    Server first({}, std::make_shared<FakeBootstrap>());
    Agent other_pods_token(first, "boot:a-m1");
    CHECK(other_pods_token.Register("a-m0").has_reject());
    CHECK(other_pods_token.Drain().error_code() == grpc::StatusCode::UNAUTHENTICATED);
    Agent agent(first, "boot:a-m0");
    const v1::ControllerMessage ack = agent.Register("a-m0");
    REQUIRE(ack.has_register_ack());
    credential = ack.register_ack().agent_credential();
    CHECK(credential.size() == 64);
    agent.stream->WritesDone();
    CHECK(agent.Drain().ok());
  }
  // A new controller (new registry, same key, no bootstrap verifier): the credential works.
  Server restarted;
  Agent again(restarted, credential);
  const v1::ControllerMessage ack = again.Register("a-m0");
  REQUIRE(ack.has_register_ack());
  CHECK(ack.register_ack().agent_credential() == credential);
  Agent bootstrap_again(restarted, "boot:a-m0");  // without a verifier a bootstrap token is nothing
  CHECK(bootstrap_again.Register("a-m0").has_reject());
  CHECK(bootstrap_again.Drain().error_code() == grpc::StatusCode::UNAUTHENTICATED);
  again.stream->WritesDone();
  CHECK(again.Drain().ok());
}

}  // namespace
}  // namespace peregrine
