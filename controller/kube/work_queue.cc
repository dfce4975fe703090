#include "controller/kube/work_queue.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace peregrine::kube {

ItemExponentialRateLimiter::ItemExponentialRateLimiter(absl::Duration base_delay,
                                                       absl::Duration max_delay)
    : base_delay_(base_delay), max_delay_(max_delay) {}

absl::Duration ItemExponentialRateLimiter::When(const std::string& item) {
  int exp;
  {
    absl::MutexLock lock(&mu_);
    exp = failures_[item]++;
  }
  // Compute in floating point so that large exponents saturate instead of overflowing.
  const double seconds = absl::ToDoubleSeconds(base_delay_) * std::pow(2.0, exp);
  if (!std::isfinite(seconds) || seconds >= absl::ToDoubleSeconds(max_delay_)) return max_delay_;
  return absl::Seconds(seconds);
}

void ItemExponentialRateLimiter::Forget(const std::string& item) {
  absl::MutexLock lock(&mu_);
  failures_.erase(item);
}

int ItemExponentialRateLimiter::NumRequeues(const std::string& item) {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(item);
  return it == failures_.end() ? 0 : it->second;
}

TokenBucketRateLimiter::TokenBucketRateLimiter(double qps, int burst, Clock* clock)
    : qps_(qps), burst_(burst), clock_(clock), tokens_(burst), last_(clock->Now()) {}

absl::Duration TokenBucketRateLimiter::When(const std::string&) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
    last_ = now;
  }
  tokens_ -= 1.0;
  if (tokens_ >= 0.0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

MaxOfRateLimiter::MaxOfRateLimiter(std::vector<std::unique_ptr<RateLimiter>> limiters)
    : limiters_(std::move(limiters)) {}

absl::Duration MaxOfRateLimiter::When(const std::string& item) {
  absl::Duration longest = absl::ZeroDuration();
  for (auto& limiter : limiters_) longest = std::max(longest, limiter->When(item));
  return longest;
}

void MaxOfRateLimiter::Forget(const std::string& item) {
  for (auto& limiter : limiters_) limiter->Forget(item);
}

int MaxOfRateLimiter::NumRequeues(const std::string& item) {
  int most = 0;
  for (auto& limiter : limiters_) most = std::max(most, limiter->NumRequeues(item));
  return most;
}

std::unique_ptr<RateLimiter> DefaultControllerRateLimiter(Clock* clock) {
  std::vector<std::unique_ptr<RateLimiter>> parts;
  parts.push_back(std::make_unique<ItemExponentialRateLimiter>(absl::Milliseconds(5),
                                                               absl::Seconds(1000)));
  parts.push_back(std::make_unique<TokenBucketRateLimiter>(10.0, 100, clock));
  return std::make_unique<MaxOfRateLimiter>(std::move(parts));
}

WorkQueue::WorkQueue(Clock* clock, std::unique_ptr<RateLimiter> rate_limiter)
    : clock_(clock),
      rate_limiter_(rate_limiter ? std::move(rate_limiter) : DefaultControllerRateLimiter(clock)) {}

void WorkQueue::AddLocked(const std::string& item) {
  if (shutting_down_) return;
  if (!dirty_.insert(item).second) return;  // already queued
  if (processing_.contains(item)) return;   // re-queued by Done()
  queue_.push_back(item);
  ReportDepthLocked();
  cv_.Signal();
}

void WorkQueue::SetDepthObserver(std::function<void(int depth)> observer) {
  absl::MutexLock lock(&mu_);
  depth_observer_ = std::move(observer);
  ReportDepthLocked();
}

void WorkQueue::ReportDepthLocked() {
  if (depth_observer_) depth_observer_(static_cast<int>(queue_.size()));
}

void WorkQueue::Add(const std::string& item) {
  absl::MutexLock lock(&mu_);
  AddLocked(item);
}

void WorkQueue::AddAfter(const std::string& item, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  if (delay <= absl::ZeroDuration()) {
    AddLocked(item);
    return;
  }
  const absl::Time ready = clock_->Now() + delay;
  auto it = waiting_at_.find(item);
  if (it != waiting_at_.end()) {
    if (it->second <= ready) return;  // the earlier time wins
    waiting_.erase({it->second, item});
    it->second = ready;
  } else {
    waiting_at_.emplace(item, ready);
  }
  waiting_.emplace(ready, item);
  // A Get() may be waiting for a later deadline.
  cv_.SignalAll();
}

void WorkQueue::AddRateLimited(const std::string& item) {
  AddAfter(item, rate_limiter_->When(item));
}

void WorkQueue::Forget(const std::string& item) { rate_limiter_->Forget(item); }

int WorkQueue::NumRequeues(const std::string& item) { return rate_limiter_->NumRequeues(item); }

void WorkQueue::PromoteReadyLocked() {
  if (waiting_.empty()) return;
  const absl::Time now = clock_->Now();
  while (!waiting_.empty() && waiting_.begin()->first <= now) {
    std::string item = waiting_.begin()->second;
    waiting_.erase(waiting_.begin());
    waiting_at_.erase(item);
    AddLocked(item);
  }
}

std::string WorkQueue::PopLocked() {
  std::string item = std::move(queue_.front());
  queue_.pop_front();
  ReportDepthLocked();
  processing_.insert(item);
  dirty_.erase(item);
  return item;
}

std::optional<std::string> WorkQueue::Get() {
  absl::MutexLock lock(&mu_);
  while (true) {
    PromoteReadyLocked();
    if (!queue_.empty()) return PopLocked();
    if (shutting_down_) return std::nullopt;
    const absl::Time deadline =
        waiting_.empty() ? absl::InfiniteFuture() : waiting_.begin()->first;
    clock_->WaitWithDeadline(cv_, mu_, deadline);
  }
}

std::optional<std::string> WorkQueue::TryGet() {
  absl::MutexLock lock(&mu_);
  PromoteReadyLocked();
  if (queue_.empty()) return std::nullopt;
  return PopLocked();
}

void WorkQueue::Done(const std::string& item) {
  absl::MutexLock lock(&mu_);
  processing_.erase(item);
  if (dirty_.contains(item)) {
    queue_.push_back(item);
    ReportDepthLocked();
    cv_.Signal();
  }
}

int WorkQueue::Len() {
  absl::MutexLock lock(&mu_);
  PromoteReadyLocked();
  return static_cast<int>(queue_.size());
}

int WorkQueue::NumWaiting() {
  absl::MutexLock lock(&mu_);
  PromoteReadyLocked();
  return static_cast<int>(waiting_.size());
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  waiting_.clear();
  waiting_at_.clear();
  cv_.SignalAll();
}

bool WorkQueue::ShuttingDown() {
  absl::MutexLock lock(&mu_);
  return shutting_down_;
}

}  // namespace peregrine::kube
