// TokenBucket: the bandwidth limit of the backup copies. Bytes are reserved before they
// are sent; the bucket refills at `rate` bytes per second up to `burst` bytes and says
// when a reservation may go. Time is a parameter (no clock inside), so the schedule is
// exact under a manual clock. A rate of 0 means unlimited. Thread-compatible.
#ifndef PEREGRINE_AGENT_CHECKPOINT_TOKEN_BUCKET_H_
#define PEREGRINE_AGENT_CHECKPOINT_TOKEN_BUCKET_H_

#include <cstdint>

#include "absl/time/time.h"

namespace peregrine::checkpoint {

class TokenBucket {
 public:
  // Starts full at `start`.
  TokenBucket(uint64_t rate_bytes_per_second, uint64_t burst_bytes, absl::Time start);

  // Reserves `bytes` at `now` and returns when they may be sent (now when the bucket
  // holds them; later when it must refill first). Reservations queue: each one's time is
  // at or after the previous one's.
  absl::Time Reserve(uint64_t bytes, absl::Time now);

  uint64_t rate() const { return rate_; }

 private:
  uint64_t rate_;
  double burst_;
  double tokens_;   // may go negative: bytes reserved ahead of the refill
  absl::Time last_;
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_TOKEN_BUCKET_H_
