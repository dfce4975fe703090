// StackCaptureWorker: runs the agent's stack captures (stack_capture.h) off the control
// loop on one thread, one capture at a time in the order submitted, so the agent's thread
// count stays flat however many capture commands arrive: this thread plus, while a
// capture runs, CaptureStacks' own pool (options.max_parallel threads, joined before the
// capture returns).
//
// At most max_queued captures wait behind the running one; Submit refuses more with
// ResourceExhausted (nothing queued) so a burst of commands is answered at once instead of
// piling up. `done` runs on the worker thread with the capture's result.
//
// Thread safety: Submit is thread-safe. Ownership: the destructor drops the queued
// captures (their `done` is not called), waits for the running one (bounded by its
// tools' timeouts) and joins the thread.
#ifndef PEREGRINE_AGENT_STACK_CAPTURE_WORKER_H_
#define PEREGRINE_AGENT_STACK_CAPTURE_WORKER_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "agent/stack_capture.h"

namespace peregrine {

// Captures that may wait behind the running one.
inline constexpr size_t kMaxQueuedStackCaptures = 8;

class StackCaptureWorker {
 public:
  using Done = std::function<void(std::vector<CapturedStack>)>;

  explicit StackCaptureWorker(size_t max_queued = kMaxQueuedStackCaptures);
  ~StackCaptureWorker();
  StackCaptureWorker(const StackCaptureWorker&) = delete;
  StackCaptureWorker& operator=(const StackCaptureWorker&) = delete;

  // Queues a capture of `roots` and all their descendants (WithDescendants) and calls
  // `done` with the result once it ran. ResourceExhausted, naming how many wait, when
  // max_queued captures already wait; FailedPrecondition after the destructor began.
  absl::Status Submit(std::vector<StackTarget> roots, StackCaptureOptions options, Done done);

 private:
  struct Request {
    std::vector<StackTarget> roots;
    StackCaptureOptions options;
    Done done;
  };
  void Work();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;  // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  std::thread worker_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_STACK_CAPTURE_WORKER_H_
