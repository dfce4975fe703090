// The agents' channel with TLS: the controller's AgentService served with
// AgentServerCredentials (controller/agent_tls.h) on 127.0.0.1 and the agent's real
// ControllerLink dialing it, with a CA and certificates made at run time. A plaintext
// agent, an agent trusting another CA, and a server certificate for another host name are
// refused before anything registers; the right CA registers; replacing the certificate
// and key files (same CA) keeps the connected agent's stream and serves the new
// certificate to new connections, without restarting the server.
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/auth_context.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/controller_link.h"
#include "base/clock.h"
#include "controller/agent_registry.h"
#include "controller/agent_service.h"
#include "controller/agent_tls.h"
#include "peregrine/v1/agent.grpc.pb.h"
#include "tests/testing/eventually.h"
#include "tests/testing/files.h"
#include "tests/testing/job_fixtures.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_pki.h"

namespace peregrine {
namespace {

using testing::Eventually;
using testing::TempDir;
using testing::TestCa;
using testing::TestCert;

constexpr char kJob[] = "train/job";

// The controller side: registry + AgentService on 127.0.0.1 with the given credentials,
// job train/job bound with pods job-m0 and job-m1.
struct TlsAgentServer {
  ManualClock clock{absl::FromUnixSeconds(1)};
  AgentRegistry registry{"test-controller"};
  AgentServiceImpl service{&registry, &clock};
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  explicit TlsAgentServer(const std::shared_ptr<grpc::ServerCredentials>& credentials) {
    AgentRegistry::JobBinding binding;  // no token: this suite is about the channel, not identity
    binding.spec = testing::TrainJob(2, 1, 1).spec;
    registry.BindJob(kJob, binding);
    AssignmentSpec a;
    a.attempt = 1;
    a.code.command = {"train"};
    registry.SetDesired(kJob, {{"job-m0", DesiredAgent{false, a}}, {"job-m1", DesiredAgent{false, a}}});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(port != 0);
  }
  ~TlsAgentServer() {
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server->Wait();
  }
  std::string target() const { return absl::StrCat("127.0.0.1:", port); }
};

v1::AgentMessage RegisterMessage(const std::string& pod) {
  v1::AgentMessage m;
  v1::Register* r = m.mutable_register_();
  r->set_job_namespace("train");
  r->set_job_name("job");
  r->set_pod_name(pod);
  r->set_machine_id("node-" + pod);
  r->set_role(v1::AGENT_ROLE_ACTIVE);
  return m;
}

// The agent side: the real ControllerLink registering `pod`, counting what happened.
class LinkAgent {
 public:
  LinkAgent(const std::string& target, const std::string& ca_file, const std::string& pod) {
    ControllerLinkOptions options;
    options.target = target;
    options.tls_ca_file = ca_file;
    options.backoff_initial = absl::Milliseconds(20);
    options.backoff_max = absl::Milliseconds(200);
    ControllerLink::Callbacks callbacks;
    callbacks.on_stream_open = [this, pod](uint64_t session) {
      opened_.fetch_add(1);
      link_->Send(session, RegisterMessage(pod));
    };
    callbacks.on_message = [this](uint64_t session, v1::ControllerMessage message) {
      if (message.has_register_ack()) {
        link_->MarkRegistered(session);
        registered_session_.store(session);
        acks_.fetch_add(1);
      }
    };
    callbacks.on_stream_closed = [this](uint64_t, absl::Status status) {
      absl::MutexLock lock(&mu_);
      closes_.push_back(status);
    };
    link_ = std::make_unique<ControllerLink>(options, callbacks);
    link_->Start();
  }
  ~LinkAgent() { link_->Stop(); }

  ControllerLink& link() { return *link_; }
  int acks() const { return acks_.load(); }
  uint64_t registered_session() const { return registered_session_.load(); }
  std::vector<absl::Status> closes() {
    absl::MutexLock lock(&mu_);
    return closes_;
  }

 private:
  std::unique_ptr<ControllerLink> link_;
  std::atomic<int> opened_{0};
  std::atomic<int> acks_{0};
  std::atomic<uint64_t> registered_session_{0};
  absl::Mutex mu_;
  std::vector<absl::Status> closes_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<grpc::ServerCredentials> Credentials(const TestCert& cert, const TestCert& ca) {
  auto credentials = AgentServerCredentials({cert.cert_file, cert.key_file, ca.cert_file}, absl::Seconds(1));
  INFO(credentials.status().ToString());
  REQUIRE(credentials.ok());
  return *credentials;
}

// The certificate (PEM) a fresh TLS connection to `port` is served, verified against
// `ca_pem`; "" when the handshake fails. The probe registers a pod the job does not have,
// so it changes nothing on the controller.
std::string ServedCertificate(int port, const std::string& ca_pem) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca_pem;
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::SslCredentials(ssl), args);
  auto stub = v1::AgentService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->Connect(&context);
  stream->Write(RegisterMessage("probe"));
  v1::ControllerMessage in;
  stream->Read(&in);
  std::string pem;
  if (std::shared_ptr<const grpc::AuthContext> auth = context.auth_context(); auth != nullptr) {
    for (const grpc::string_ref& v : auth->FindPropertyValues("x509_pem_cert")) pem.assign(v.data(), v.size());
  }
  stream->Finish();
  return pem;
}

std::string Trimmed(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); }

// Every attempt so far failed without registering, and the agent kept trying.
void CheckRefused(TlsAgentServer& server, LinkAgent& agent) {
  REQUIRE(Eventually([&] { return agent.closes().size() >= 2; }));
  CHECK(agent.acks() == 0);
  CHECK(server.registry.ConnectedCountForTest() == 0);
  for (const absl::Status& s : agent.closes()) {
    INFO(s.ToString());
    CHECK(s.code() == absl::StatusCode::kUnavailable);
  }
}

TEST_CASE("agent TLS: a plaintext agent is refused and nothing registers", "[integration]") {
  TempDir dir("agent-tls");
  TestCa ca(dir.path(), "peregrine");
  const TestCert server_cert = ca.Issue("controller", {"peregrine-grpc.peregrine-system.svc"}, {"127.0.0.1"});
  TlsAgentServer server(Credentials(server_cert, ca.ca()));
  LinkAgent agent(server.target(), /*ca_file=*/"", "job-m0");
  CheckRefused(server, agent);
}

TEST_CASE("agent TLS: an agent trusting another CA refuses the controller", "[integration]") {
  TempDir dir("agent-tls");
  TestCa ca(dir.path(), "peregrine");
  TestCa other(dir.path(), "other");
  const TestCert server_cert = ca.Issue("controller", {"peregrine-grpc.peregrine-system.svc"}, {"127.0.0.1"});
  TlsAgentServer server(Credentials(server_cert, ca.ca()));
  LinkAgent agent(server.target(), other.ca().cert_file, "job-m0");
  CheckRefused(server, agent);
  CHECK(ServedCertificate(server.port, other.ca().cert_pem).empty());
}

TEST_CASE("agent TLS: a server certificate for another host name or from another CA is refused", "[integration]") {
  TempDir dir("agent-tls");
  TestCa ca(dir.path(), "peregrine");
  TestCa rogue(dir.path(), "rogue");
  SECTION("the right CA, but issued for a name the agent did not dial") {
    const TestCert wrong_host = ca.Issue("controller", {"peregrine-grpc.elsewhere.svc"});
    TlsAgentServer server(Credentials(wrong_host, ca.ca()));
    LinkAgent agent(server.target(), ca.ca().cert_file, "job-m0");
    CheckRefused(server, agent);
    CHECK(ServedCertificate(server.port, ca.ca().cert_pem).empty());
  }
  SECTION("the right host name, signed by a CA the agent does not trust") {
    const TestCert rogue_cert = rogue.Issue("controller", {"peregrine-grpc.peregrine-system.svc"}, {"127.0.0.1"});
    TlsAgentServer server(Credentials(rogue_cert, rogue.ca()));
    LinkAgent agent(server.target(), ca.ca().cert_file, "job-m0");
    CheckRefused(server, agent);
  }
}

TEST_CASE("agent TLS: an agent trusting the controller's CA registers", "[integration]") {
  TempDir dir("agent-tls");
  TestCa ca(dir.path(), "peregrine");
  const TestCert server_cert = ca.Issue("controller", {"peregrine-grpc.peregrine-system.svc"}, {"127.0.0.1"});
  TlsAgentServer server(Credentials(server_cert, ca.ca()));
  LinkAgent agent(server.target(), ca.ca().cert_file, "job-m0");
  REQUIRE(Eventually([&] { return agent.acks() == 1; }));
  CHECK(server.registry.ConnectedCountForTest() == 1);
  CHECK(agent.closes().empty());
  CHECK(Trimmed(ServedCertificate(server.port, ca.ca().cert_pem)) == Trimmed(server_cert.cert_pem));
}

// Kubernetes updates a mounted Secret as the kubelet's atomic writer does: the files are
// symlinks through "..data" to a directory of the current version, and "..data" is
// replaced by a rename, so the key and the certificate change together.
class MountedSecret {
 public:
  explicit MountedSecret(std::string dir) : dir_(std::move(dir)) { std::filesystem::create_directories(dir_); }
  void Put(const TestCert& cert) {
    const std::string version = absl::StrCat("..v", ++version_);
    std::filesystem::create_directories(dir_ + "/" + version);
    std::filesystem::copy_file(cert.cert_file, dir_ + "/" + version + "/tls.crt");
    std::filesystem::copy_file(cert.key_file, dir_ + "/" + version + "/tls.key");
    std::filesystem::create_directory_symlink(version, dir_ + "/..data_tmp");
    std::filesystem::rename(dir_ + "/..data_tmp", dir_ + "/..data");
    for (const char* name : {"tls.crt", "tls.key"}) {
      if (!std::filesystem::is_symlink(dir_ + "/" + name)) {
        std::filesystem::create_symlink(std::string("..data/") + name, dir_ + "/" + name);
      }
    }
  }
  std::string cert_file() const { return dir_ + "/tls.crt"; }
  std::string key_file() const { return dir_ + "/tls.key"; }

 private:
  std::string dir_;
  int version_ = 0;
};

TEST_CASE("agent TLS: a rotated certificate reaches new connections and the connected agent keeps its stream", "[integration]") {
  TempDir dir("agent-tls");
  TestCa ca(dir.path(), "peregrine");
  const TestCert first = ca.Issue("controller-1", {"peregrine-grpc.peregrine-system.svc"}, {"127.0.0.1"});
  const TestCert second = ca.Issue("controller-2", {"peregrine-grpc.peregrine-system.svc"}, {"127.0.0.1"});
  REQUIRE(first.serial != second.serial);
  MountedSecret secret(dir.Path("secret"));
  secret.Put(first);
  auto credentials = AgentServerCredentials({secret.cert_file(), secret.key_file(), ca.ca().cert_file},
                                            absl::Seconds(1));
  REQUIRE(credentials.ok());
  TlsAgentServer server(*credentials);

  LinkAgent before(server.target(), ca.ca().cert_file, "job-m0");
  REQUIRE(Eventually([&] { return before.acks() == 1; }));
  const uint64_t session = before.registered_session();
  REQUIRE(Trimmed(ServedCertificate(server.port, ca.ca().cert_pem)) == Trimmed(first.cert_pem));

  secret.Put(second);
  // gRPC re-reads the files every second: new handshakes get the new certificate.
  REQUIRE(Eventually([&] { return Trimmed(ServedCertificate(server.port, ca.ca().cert_pem)) == Trimmed(second.cert_pem); }));

  // The agent connected before the rotation still has its stream, both ways.
  CHECK(before.closes().empty());
  CHECK(before.registered_session() == session);
  v1::AgentMessage heartbeat;
  v1::IterationSummary* it = heartbeat.mutable_heartbeat()->add_iterations();
  it->set_global_rank(0);
  it->set_last_completed_step(42);
  REQUIRE(before.link().Send(session, heartbeat));
  CHECK(Eventually([&] {
    for (const AgentObservation& a : server.registry.Observe(kJob)) {
      if (a.pod == "job-m0" && a.connected && a.rank_steps.count(0) == 1 && a.rank_steps.at(0) == 42) return true;
    }
    return false;
  }));

  // A new agent registers over the new certificate, with the same CA bundle.
  LinkAgent after(server.target(), ca.ca().cert_file, "job-m1");
  REQUIRE(Eventually([&] { return after.acks() == 1; }));
  CHECK(server.registry.ConnectedCountForTest() == 2);
  CHECK(before.closes().empty());
}

}  // namespace
}  // namespace peregrine
