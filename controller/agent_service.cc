#include "controller/agent_service.h"

#include <deque>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"

namespace peregrine {
namespace {

constexpr size_t kMaxQueuedWrites = 1024;

// The reactor and the sink the registry holds are separate objects: the registry may keep
// the sink after the stream ends; the sink then drops messages.
class StreamSink final : public AgentStreamSink {
 public:
  using Writer = std::function<void(const v1::ControllerMessage&)>;
  explicit StreamSink(Writer writer) : writer_(std::move(writer)) {}
  void Send(const v1::ControllerMessage& message) override {
    absl::MutexLock lock(&mu_);
    if (writer_) writer_(message);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    writer_ = nullptr;
  }

 private:
  absl::Mutex mu_;
  Writer writer_ ABSL_GUARDED_BY(mu_);
};

class ConnectReactor final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage> {
 public:
  ConnectReactor(grpc::CallbackServerContext* context, AgentRegistry* registry, std::function<int64_t()> now)
      : registry_(registry), now_(std::move(now)) {
    const auto& md = context->client_metadata();
    if (auto it = md.find("authorization"); it != md.end()) {
      std::string value(it->second.data(), it->second.size());
      if (absl::StartsWith(value, "Bearer ")) token_ = value.substr(7);
    }
    sink_ = std::make_shared<StreamSink>([this](const v1::ControllerMessage& m) { Write(m); });
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      FinishOnce(grpc::Status::OK);
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
      auto ack = registry_->OnRegister(sink_, token_, in_.register_(), now_());
      if (!ack.ok()) {
        v1::ControllerMessage reject;
        reject.mutable_reject()->set_reason(std::string(ack.status().message()));
        Write(reject);
        FinishOnce(ToGrpcStatus(ack.status()));
        return;
      }
      registered_ = true;
      v1::ControllerMessage out;
      *out.mutable_register_ack() = *ack;
      // The ack goes first: put it ahead of commands the registry re-sent meanwhile.
      WriteFront(out);
    } else {
      absl::Status status = registry_->OnMessage(sink_.get(), in_, now_());
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
      queue_.clear();
      return;
    }
    if (!queue_.empty()) queue_.pop_front();
    MaybeStartWriteLocked();
    MaybeFinishLocked();
  }

  void OnDone() override {
    sink_->Close();
    if (registered_) registry_->OnDisconnect(sink_.get(), now_());
    delete this;
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

 private:
  void Write(const v1::ControllerMessage& m) {
    absl::MutexLock lock(&mu_);
    if (finish_called_ || queue_.size() >= kMaxQueuedWrites) return;
    queue_.push_back(m);
    MaybeStartWriteLocked();
  }
  void WriteFront(const v1::ControllerMessage& m) {
    absl::MutexLock lock(&mu_);
    if (finish_called_) return;
    // The front element may be in flight: insert after it.
    auto pos = writing_ && !queue_.empty() ? queue_.begin() + 1 : queue_.begin();
    queue_.insert(pos, m);
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

  AgentRegistry* registry_;
  std::function<int64_t()> now_;
  std::string token_;
  std::shared_ptr<StreamSink> sink_;
  v1::AgentMessage in_;
  bool registered_ = false;  // touched only by the read chain
  absl::Mutex mu_;
  std::deque<v1::ControllerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;       // Finish requested
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;  // Finish issued to gRPC
  grpc::Status final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(status.code())), std::string(status.message()));
}

AgentServiceImpl::AgentServiceImpl(AgentRegistry* registry, std::function<int64_t()> now)
    : registry_(registry), now_(std::move(now)) {}

grpc::ServerBidiReactor<v1::AgentMessage, v1::ControllerMessage>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  return new ConnectReactor(context, registry_, now_);
}

}  // namespace peregrine
