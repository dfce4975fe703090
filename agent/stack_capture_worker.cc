#include "agent/stack_capture_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace peregrine {

StackCaptureWorker::StackCaptureWorker(size_t max_queued)
    : max_queued_(max_queued), worker_([this] { Work(); }) {}

StackCaptureWorker::~StackCaptureWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  worker_.join();
}

absl::Status StackCaptureWorker::Submit(std::vector<StackTarget> roots, StackCaptureOptions options, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::FailedPreconditionError("capture_stacks: the agent is shutting down");
    if (queue_.size() >= max_queued_) {
      return absl::ResourceExhaustedError(absl::StrCat("capture_stacks: ", queue_.size(),
                                                       " captures already wait behind the running one; try again later"));
    }
    queue_.push_back(Request{std::move(roots), std::move(options), std::move(done)});
  }
  cv_.notify_one();
  return absl::OkStatus();
}

void StackCaptureWorker::Work() {
  while (true) {
    Request request;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    request.done(CaptureStacks(WithDescendants(request.roots), request.options));
  }
}

}  // namespace peregrine
