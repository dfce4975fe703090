// Time and randomness as interfaces: the one time source of the controller's executor and
// adapters (job controller, agent service, Kubernetes client loops) and of the agent (its
// control loop, supervisor and stop-time diagnostics), injected everywhere so that they run
// deterministically in tests. Nothing outside this file and the mains reads the system
// clock; the pure code gets the time as a parameter (Unix nanoseconds, Clock::UnixNanos()).
//
// Contract: Clock::Now() is monotone for a given clock. WaitWithDeadline() blocks the
// caller on `cv` (with `mu` held on entry and on return) until the condition variable is
// signalled or the clock reaches `deadline`; it may return early (spurious wakeup), so
// callers always loop re-checking their own state. It returns true when Now() >= deadline.
//
// Thread safety: every implementation here is thread-safe. RealClock() returns a
// process-wide instance that lives forever; ManualClock is owned by its creator and must
// outlive every user.
#ifndef PEREGRINE_BASE_CLOCK_H_
#define PEREGRINE_BASE_CLOCK_H_

#include <cstdint>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace peregrine {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
  // Now() as Unix nanoseconds, the decision core's time.
  int64_t UnixNanos() { return absl::ToUnixNanos(Now()); }
  // See the file comment. `mu` must be held by the caller.
  virtual bool WaitWithDeadline(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline) = 0;
};

// The system clock (absl::Now) and real condition-variable waits.
Clock* RealClock();

// A clock that moves only when Advance()/SetTime() is called. Waiters poll the manual
// time every millisecond of real time, so Advance() never needs to know who is waiting.
class ManualClock : public Clock {
 public:
  explicit ManualClock(absl::Time start = absl::FromUnixSeconds(1700000000));
  absl::Time Now() override;
  bool WaitWithDeadline(absl::CondVar& cv, absl::Mutex& mu, absl::Time deadline) override;
  void Advance(absl::Duration d);
  void SetTime(absl::Time t);

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

// A source of uniform random numbers in [0, 1) for jitter.
class Random {
 public:
  virtual ~Random() = default;
  virtual double Uniform01() = 0;
};

// Mersenne twister with a fixed seed (tests) or a seed chosen by the caller. Thread-safe.
class SeededRandom : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : engine_(seed) {}
  double Uniform01() override;

 private:
  absl::Mutex mu_;
  std::mt19937_64 engine_ ABSL_GUARDED_BY(mu_);
};

}  // namespace peregrine

#endif  // PEREGRINE_BASE_CLOCK_H_
