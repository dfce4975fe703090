#include "controller/agent_service.h"

#include <deque>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/alarm.h"
#include "grpcpp/server_builder.h"

namespace peregrine {
namespace {

constexpr size_t kMaxQueuedWrites = 1024;

// The reactor and the sink the registry holds are separate objects: the registry may keep
// the sink after the stream ends; the sink then drops messages.
class StreamSink final : public AgentStreamSink {
 public:
  using Writer = std::function<void(const v1::ControllerMessage&)>;
  using Ender = std::function<void(const absl::Status&)>;
  StreamSink(Writer writer, Ender ender) : writer_(std::move(writer)), ender_(std::move(ender)) {}
  void Send(const v1::ControllerMessage& message) override {
    absl::MutexLock lock(&mu_);
    if (writer_) writer_(message);
  }
  void End(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    if (ender_) ender_(status);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    writer_ = nullptr;
    ender_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  Writer writer_ ABSL_GUARDED_BY(mu_);
  Ender ender_ ABSL_GUARDED_BY(mu_);
};

class ConnectReactor final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage> {
 public:
  ConnectReactor(grpc::CallbackServerContext* context, AgentRegistry* registry, Clock* clock,
                 absl::Duration register_timeout)
      : registry_(registry), clock_(clock) {
    const auto& md = context->client_metadata();
    if (auto it = md.find("authorization"); it != md.end()) {
      std::string value(it->second.data(), it->second.size());
      if (absl::StartsWith(value, "Bearer ")) token_ = value.substr(7);
    }
    // Registry messages (commands) are held until the RegisterAck is queued: an agent
    // acts on commands only after its ack, so a command must never overtake it.
    sink_ = std::make_shared<StreamSink>([this](const v1::ControllerMessage& m) { WriteAfterAck(m); },
                                         [this](const absl::Status& s) { FinishOnce(ToGrpcStatus(s)); });
    // The register deadline. The alarm's callback always runs (with ok = false once
    // cancelled), and the reactor is deleted only after both it and OnDone ran.
    register_alarm_.Set(absl::ToChronoTime(absl::Now() + register_timeout),
                        [this, register_timeout](bool ok) { OnRegisterDeadline(ok, register_timeout); });
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // A read fails when the agent half-closes, or when its bytes were not an
      // AgentMessage. A stream that ends before registering was never a valid agent.
      FinishOnce(registered_ ? grpc::Status::OK
                             : grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                            "stream ended before a valid register message"));
      return;
    }
    if (!registered_) {
      if (in_.body_case() != v1::AgentMessage::kRegister) {
        v1::ControllerMessage reject;
        reject.mutable_reject()->set_reason("the first message on a stream must be register");
        Write(reject);
        FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message must be register"));
        return;
      }
      auto ack = registry_->OnRegister(sink_, token_, in_.register_(), clock_->UnixNanos());
      if (!ack.ok()) {
        v1::ControllerMessage reject;
        reject.mutable_reject()->set_reason(std::string(ack.status().message()));
        Write(reject);
        FinishOnce(ToGrpcStatus(ack.status()));
        return;
      }
      registered_ = true;
      register_alarm_.Cancel();
      v1::ControllerMessage out;
      *out.mutable_register_ack() = *ack;
      WriteAckThenHeld(out);
    } else {
      absl::Status status = registry_->OnMessage(sink_.get(), in_, clock_->UnixNanos());
      if (!status.ok()) {
        v1::ControllerMessage reject;
        reject.mutable_reject()->set_reason(std::string(status.message()));
        Write(reject);
      }
    }
    in_.Clear();
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // The stream broke (e.g. cancelled by a server shutdown while this write was in
      // flight): a Finish requested meanwhile must still be issued, or the call never ends
      // and grpc::Server::Shutdown waits for it forever.
      queue_.clear();
      MaybeFinishLocked();
      return;
    }
    if (!queue_.empty()) queue_.pop_front();
    MaybeStartWriteLocked();
    MaybeFinishLocked();
  }

  void OnDone() override {
    sink_->Close();
    if (registered_) registry_->OnDisconnect(sink_.get(), clock_->UnixNanos());
    register_alarm_.Cancel();
    bool last;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      last = alarm_ran_;
    }
    if (last) delete this;
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

 private:
  void Write(const v1::ControllerMessage& m) {
    absl::MutexLock lock(&mu_);
    if (finish_called_ || queue_.size() >= kMaxQueuedWrites) return;
    queue_.push_back(m);
    MaybeStartWriteLocked();
  }
  void WriteAfterAck(const v1::ControllerMessage& m) {
    absl::MutexLock lock(&mu_);
    if (finish_called_) return;
    if (!ack_queued_) {
      if (held_.size() < kMaxQueuedWrites) held_.push_back(m);
      return;
    }
    if (queue_.size() >= kMaxQueuedWrites) return;
    queue_.push_back(m);
    MaybeStartWriteLocked();
  }
  void WriteAckThenHeld(const v1::ControllerMessage& ack) {
    absl::MutexLock lock(&mu_);
    if (finish_called_) return;
    queue_.push_back(ack);
    for (auto& m : held_) queue_.push_back(std::move(m));
    held_.clear();
    ack_queued_ = true;
    MaybeStartWriteLocked();
  }
  void MaybeStartWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || queue_.empty() || finish_called_) return;
    writing_ = true;
    StartWrite(&queue_.front());
  }
  // Finish only once the writes queued before it (a Reject) went out.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!finished_ || finish_called_ || writing_) return;
    finish_called_ = true;
    queue_.clear();
    Finish(final_status_);
  }
  void FinishOnce(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    final_status_ = status;
    MaybeFinishLocked();
  }

  void OnRegisterDeadline(bool fired, absl::Duration timeout) {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      if (fired && !ack_queued_ && !finished_) {
        v1::ControllerMessage reject;
        const std::string why = absl::StrCat("no register message within ", absl::FormatDuration(timeout));
        reject.mutable_reject()->set_reason(why);
        if (queue_.size() < kMaxQueuedWrites) queue_.push_back(std::move(reject));
        MaybeStartWriteLocked();
        finished_ = true;
        final_status_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, why);
        MaybeFinishLocked();
      }
      alarm_ran_ = true;
      last = done_;
    }
    if (last) delete this;
  }

  AgentRegistry* registry_;
  Clock* clock_;
  grpc::Alarm register_alarm_;
  std::string token_;
  std::shared_ptr<StreamSink> sink_;
  v1::AgentMessage in_;
  bool registered_ = false;  // touched only by the read chain
  absl::Mutex mu_;
  std::deque<v1::ControllerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::ControllerMessage> held_ ABSL_GUARDED_BY(mu_);  // registry messages before the ack
  bool ack_queued_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;       // Finish requested
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;  // Finish issued to gRPC
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
  bool alarm_ran_ ABSL_GUARDED_BY(mu_) = false;  // the register alarm's callback ran
  bool done_ ABSL_GUARDED_BY(mu_) = false;       // OnDone ran
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())), std::string(status.message()));
}

AgentServiceImpl::AgentServiceImpl(AgentRegistry* registry, Clock* clock, AgentServiceOptions options)
    : registry_(registry), clock_(clock), options_(options) {}

grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  return new ConnectReactor(context, registry_, clock_, options_.register_timeout);
}

void ApplyAgentServerKeepalive(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

}  // namespace peregrine
