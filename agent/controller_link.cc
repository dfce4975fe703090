#include "agent/controller_link.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

// A background thread opens the stream (a fresh channel per attempt; insecure,
// or TLS with the given CA bundle; metadata "authorization: Bearer <token>" with
// the bearer token of the moment: the first credential, replaced by the one each
// RegisterAck carries), reports it with on_stream_open, delivers every ControllerMessage with
// on_message, and reports the end with on_stream_closed. It then waits a
// jittered exponential backoff (ReconnectBackoff) and tries again, for ever,
// until Stop(). MarkRegistered() (called when a RegisterAck arrived) resets the
// backoff, so only failed attempts make the wait grow.
//
// Each stream has a session number; writes are serialised by a mutex and may
// block while gRPC flow control holds them.

namespace peregrine {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

absl::StatusOr<std::string> TakeCredentialFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return absl::FailedPreconditionError(absl::StrCat("credential file ", path, " cannot be read"));
  std::string credential(absl::StripAsciiWhitespace(*text));
  if (::unlink(path.c_str()) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("credential file ", path, " cannot be removed: ", std::strerror(errno)));
  }
  if (credential.empty()) return absl::FailedPreconditionError(absl::StrCat("credential file ", path, " is empty"));
  return credential;
}

ReconnectBackoff::ReconnectBackoff(absl::Duration initial, absl::Duration max)
    : initial_(initial), max_(max), base_(initial) {}

absl::Duration ReconnectBackoff::Next(double uniform01) {
  absl::Duration base = std::min(base_, max_);
  base_ = std::min(base_ * 2, max_);
  if (uniform01 < 0) uniform01 = 0;
  if (uniform01 >= 1) uniform01 = 0.999999;
  return base * (0.5 + 0.5 * uniform01);
}

void ReconnectBackoff::Reset() { base_ = initial_; }

ControllerLink::ControllerLink(ControllerLinkOptions options, Callbacks callbacks)
    : options_(std::move(options)), callbacks_(std::move(callbacks)) {
  absl::MutexLock lock(&state_mu_);
  bearer_ = options_.credential;
}

ControllerLink::~ControllerLink() { Stop(); }

void ControllerLink::Start() { thread_ = std::thread([this] { Run(); }); }

void ControllerLink::Stop() {
  {
    absl::MutexLock lock(&state_mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
    if (context_ != nullptr) context_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

bool ControllerLink::Send(uint64_t session, const peregrine::v1::AgentMessage& message) {
  absl::MutexLock lock(&write_mu_);
  if (stream_ == nullptr || write_session_ != session) return false;
  return stream_->Write(message);
}

void ControllerLink::MarkRegistered(uint64_t session) {
  absl::MutexLock lock(&state_mu_);
  if (session == session_) registered_ = true;
}

void ControllerLink::Run() {
  std::mt19937_64 rng(options_.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  ReconnectBackoff backoff(options_.backoff_initial, options_.backoff_max);
  while (true) {
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    std::string setup_error;
    if (options_.tls_ca_file.empty()) {
      credentials = grpc::InsecureChannelCredentials();
    } else {
      absl::StatusOr<std::string> ca = ReadFile(options_.tls_ca_file);
      if (ca.ok()) {
        grpc::SslCredentialsOptions ssl;
        ssl.pem_root_certs = *ca;
        credentials = grpc::SslCredentials(ssl);
      } else {
        setup_error = ca.status().ToString();
      }
    }
    std::string token;
    {
      absl::MutexLock lock(&state_mu_);
      token = bearer_;
    }
    uint64_t session = 0;
    if (setup_error.empty()) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive)));
      args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
      args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 5000);
      std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(options_.target, credentials, args);
      std::unique_ptr<peregrine::v1::AgentService::Stub> stub = peregrine::v1::AgentService::NewStub(channel);
      auto context = std::make_unique<grpc::ClientContext>();
      if (!token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
      {
        absl::MutexLock lock(&state_mu_);
        if (stopping_) return;
        context_ = context.get();
        session = ++session_;
        registered_ = false;
      }
      std::unique_ptr<grpc::ClientReaderWriter<peregrine::v1::AgentMessage, peregrine::v1::ControllerMessage>>
          stream = stub->Connect(context.get());
      {
        absl::MutexLock lock(&write_mu_);
        stream_ = stream.get();
        write_session_ = session;
      }
      callbacks_.on_stream_open(session);
      peregrine::v1::ControllerMessage message;
      while (stream->Read(&message)) {
        if (message.has_register_ack() && !message.register_ack().agent_credential().empty()) {
          absl::MutexLock lock(&state_mu_);
          bearer_ = message.register_ack().agent_credential();
        }
        callbacks_.on_message(session, std::move(message));
        message.Clear();
      }
      {
        absl::MutexLock lock(&write_mu_);  // waits for a write in progress
        stream_ = nullptr;
        write_session_ = 0;
      }
      grpc::Status status = stream->Finish();
      {
        absl::MutexLock lock(&state_mu_);
        context_ = nullptr;
      }
      callbacks_.on_stream_closed(session, FromGrpc(status));
    } else {
      std::fprintf(stderr, "peregrine-agent: cannot connect to %s: %s\n", options_.target.c_str(),
                   setup_error.c_str());
    }
    absl::Duration delay;
    {
      absl::MutexLock lock(&state_mu_);
      if (registered_ && session == session_) backoff.Reset();
      registered_ = false;
      delay = backoff.Next(uniform(rng));
      const absl::Time deadline = options_.clock->Now() + delay;
      while (!stopping_ && !options_.clock->WaitWithDeadline(stop_cv_, state_mu_, deadline)) {
      }
      if (stopping_) return;
    }
  }
}

}  // namespace peregrine
