#include "agent/controller_link.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <cstdio>
#include <iterator>
#include <optional>
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
// Each stream has a session number. Send() only queues (ControllerOutbox, under
// write_mu_); the stream's writer thread takes the oldest message and writes it with the
// mutex released, so a Write that HTTP/2 flow control holds (a partitioned network: the
// controller reads nothing until gRPC ends the stream, 20 s of unacknowledged data with
// the keepalive settings below) holds only the writer, never the agent's loop. When the reading side ends, the writer is told to stop; if it is
// inside a Write, the stream is cancelled so that Write returns; it is joined before
// Finish(). A failed Write cancels the stream, so the reader ends too and the link
// reconnects. Events left in the outbox are carried (bounded) to the next stream and
// queued when it registers, ahead of what the agent sends after the ack.

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
    : options_(std::move(options)), callbacks_(std::move(callbacks)), outbox_(options_.outbox) {
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
  bool first_drop = false;
  {
    absl::MutexLock lock(&write_mu_);
    if (session == 0 || write_session_ != session) return false;
    const bool none_yet = outbox_.dropped() == stream_dropped_;
    first_drop = outbox_.Push(message) > 0 && none_yet;
  }
  if (first_drop) {
    std::fprintf(stderr,
                 "peregrine-agent: controller stream %llu: the controller is not reading; dropping the oldest "
                 "queued heartbeats (outbox limits %zu messages, %zu bytes)\n",
                 static_cast<unsigned long long>(session), options_.outbox.max_messages,
                 options_.outbox.max_bytes);
  }
  return true;
}

void ControllerLink::MarkRegistered(uint64_t session) {
  {
    absl::MutexLock lock(&state_mu_);
    if (session == session_) registered_ = true;
  }
  absl::MutexLock lock(&write_mu_);
  if (session == 0 || write_session_ != session) return;
  while (!carried_.empty()) {
    outbox_.Push(std::move(carried_.front()));
    carried_.pop_front();
  }
}

uint64_t ControllerLink::dropped_messages() const {
  absl::MutexLock lock(&write_mu_);
  return outbox_.dropped() + carried_dropped_;
}

bool ControllerLink::WriterHasWork() const { return writer_stop_ || !outbox_.empty(); }

void ControllerLink::WriteLoop(Stream* stream, grpc::ClientContext* context) {
  for (;;) {
    std::optional<peregrine::v1::AgentMessage> message;
    {
      absl::MutexLock lock(&write_mu_);
      write_mu_.Await(absl::Condition(this, &ControllerLink::WriterHasWork));
      if (writer_stop_) return;
      message = outbox_.Pop();
      writing_ = true;
    }
    const bool written = stream->Write(*message);
    absl::MutexLock lock(&write_mu_);
    writing_ = false;
    if (!written) {
      write_session_ = 0;  // later Sends report the stream gone
      context->TryCancel();
      return;
    }
  }
}

void ControllerLink::EndWriter(std::thread& writer, grpc::ClientContext* context, uint64_t session) {
  {
    absl::MutexLock lock(&write_mu_);
    write_session_ = 0;
    writer_stop_ = true;
    if (writing_) context->TryCancel();  // the Write returns; the stream has ended anyway
  }
  writer.join();
  uint64_t dropped = 0;
  {
    absl::MutexLock lock(&write_mu_);
    writer_stop_ = false;
    for (peregrine::v1::AgentMessage& left : outbox_.TakeAll()) {
      if (!left.has_event()) continue;
      carried_.push_back(std::move(left));
      if (carried_.size() > kMaxCarriedEvents) {
        carried_.pop_front();
        ++carried_dropped_;
      }
    }
    dropped = outbox_.dropped() - stream_dropped_;
    stream_dropped_ = outbox_.dropped();
  }
  if (dropped > 0) {
    std::fprintf(stderr, "peregrine-agent: controller stream %llu: %llu superseded heartbeat(s) dropped unsent\n",
                 static_cast<unsigned long long>(session), static_cast<unsigned long long>(dropped));
  }
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
        write_session_ = session;
      }
      std::thread writer([this, raw = stream.get(), ctx = context.get()] { WriteLoop(raw, ctx); });
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
      EndWriter(writer, context.get(), session);
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
