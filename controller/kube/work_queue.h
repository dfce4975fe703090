// A rate-limited, de-duplicating work queue of string keys ("namespace/name"), with the
// semantics of client-go's workqueue:
//   - An item added while it is already queued is not queued twice.
//   - An item that is being processed (returned by Get, not yet Done) and is added again
//     is queued once more only when Done() is called: one key never runs on two workers.
//   - AddAfter() queues an item once the delay has passed (the earliest pending time
//     wins); AddRateLimited() asks the rate limiter for the delay.
//   - The default rate limiter is the maximum of a per-item exponential backoff
//     (5 ms doubling per failure up to 1000 s) and an overall token bucket (10 qps,
//     burst 100). Forget() resets an item's backoff; NumRequeues() reports it.
//   - ShutDown() makes the queue ignore new items and drop delayed ones; Get() still
//     hands out what is queued and then returns std::nullopt.
// The queue has no thread of its own: delayed items become ready inside Get()/Len(),
// measured on the injected Clock.
//
// Thread safety: every method is thread-safe. The Clock must outlive the queue.
#ifndef PEREGRINE_CONTROLLER_KUBE_WORK_QUEUE_H_
#define PEREGRINE_CONTROLLER_KUBE_WORK_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/clock.h"

namespace peregrine::kube {

// Decides how long an item waits before it is retried. Implementations are thread-safe.
class RateLimiter {
 public:
  virtual ~RateLimiter() = default;
  // The delay before `item` may be processed again; counts as one more failure.
  virtual absl::Duration When(const std::string& item) = 0;
  // Clears the failure history of `item` (call after it was processed successfully).
  virtual void Forget(const std::string& item) = 0;
  // How many times When() was called for `item` since it was last forgotten.
  virtual int NumRequeues(const std::string& item) = 0;
};

// base * 2^failures, capped at max_delay.
class ItemExponentialRateLimiter : public RateLimiter {
 public:
  ItemExponentialRateLimiter(absl::Duration base_delay, absl::Duration max_delay);
  absl::Duration When(const std::string& item) override;
  void Forget(const std::string& item) override;
  int NumRequeues(const std::string& item) override;

 private:
  const absl::Duration base_delay_;
  const absl::Duration max_delay_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
};

// A token bucket shared by all items: each When() takes one token; when the bucket is
// empty the delay is the time until the reserved token is refilled (golang's
// rate.Limiter.Reserve semantics). Forget/NumRequeues are no-ops (0).
class TokenBucketRateLimiter : public RateLimiter {
 public:
  TokenBucketRateLimiter(double qps, int burst, Clock* clock);
  absl::Duration When(const std::string& item) override;
  void Forget(const std::string&) override {}
  int NumRequeues(const std::string&) override { return 0; }

 private:
  const double qps_;
  const double burst_;
  Clock* const clock_;
  absl::Mutex mu_;
  double tokens_ ABSL_GUARDED_BY(mu_);
  absl::Time last_ ABSL_GUARDED_BY(mu_);
};

// The largest delay of its parts; NumRequeues is the largest of its parts.
class MaxOfRateLimiter : public RateLimiter {
 public:
  explicit MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters);
  absl::Duration When(const std::string& item) override;
  void Forget(const std::string& item) override;
  int NumRequeues(const std::string& item) override;

 private:
  std::vector<std::unique_ptr<RateLimiter>> limiters_;
};

// client-go's DefaultControllerRateLimiter: max(5 ms..1000 s per item, 10 qps burst 100).
std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock);

class WorkQueue {
 public:
  // `rate_limiter` null means DefaultControllerRateLimiter(clock).
  explicit WorkQueue(Clock* clock, std::unique_ptr<RateLimiter> rate_limiter = nullptr);
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& item);
  void AddAfter(const std::string& item, absl::Duration delay);
  void AddRateLimited(const std::string& item);
  void Forget(const std::string& item);
  int NumRequeues(const std::string& item);

  // Blocks until an item is ready (returns it, now marked processing) or the queue is
  // shut down and drained (returns std::nullopt).
  std::optional<std::string> Get();
  // Like Get() but returns std::nullopt at once when nothing is ready.
  std::optional<std::string> TryGet();
  // Marks `item` processed; if it was added meanwhile, it is queued again.
  void Done(const std::string& item);

  // Called with the number of items ready to be handed out each time it changes (an
  // add, a delayed item becoming ready, a Get, a Done that re-queues), under the queue's
  // lock: it must be cheap and must not call back into the queue (a gauge's Set). Set it
  // before the queue is used.
  void SetDepthObserver(std::function<void(int depth)> observer);

  // Items ready to be handed out (delayed items count once their time has come).
  int Len();
  // Items waiting for their delay to pass.
  int NumWaiting();
  void ShutDown();
  bool ShuttingDown();

 private:
  void AddLocked(const std::string& item) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PromoteReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string PopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportDepthLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  std::unique_ptr<RateLimiter> rate_limiter_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::function<void(int)> depth_observer_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  // Delayed items ordered by ready time, and item -> its ready time (earliest wins).
  std::set<std::pair<absl::Time, std::string>> waiting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> waiting_at_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace peregrine::kube

#endif  // PEREGRINE_CONTROLLER_KUBE_WORK_QUEUE_H_
