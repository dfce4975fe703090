#include "base/clock.h"

#include <algorithm>

namespace peregrine {
namespace {

class SystemClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
  bool WaitWithDeadline(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline) override {
    if (deadline == absl::InfiniteFuture()) {
      cv.Wait(&mu);
      return false;
    }
    cv.WaitWithDeadline(&mu, deadline);
    return absl::Now() >= deadline;
  }
};

}  // namespace

Clock* RealClock() {
  static SystemClock* clock = new SystemClock();
  return clock;
}

ManualClock::ManualClock(absl::Time start) : now_(start) {}

absl::Time ManualClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

bool ManualClock::WaitWithDeadline(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline) {
  if (Now() >= deadline) return true;
  cv.WaitWithTimeout(&mu, absl::Milliseconds(1));
  return Now() >= deadline;
}

void ManualClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void ManualClock::SetTime(absl::Time t) {
  absl::MutexLock lock(&mu_);
  now_ = std::max(now_, t);
}

double SeededRandom::Uniform01() {
  absl::MutexLock lock(&mu_);
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine_);
}

}  // namespace peregrine
