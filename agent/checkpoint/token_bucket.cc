#include "agent/checkpoint/token_bucket.h"

#include <algorithm>

namespace peregrine::checkpoint {

TokenBucket::TokenBucket(uint64_t rate_bytes_per_second, uint64_t burst_bytes, absl::Time start)
    : rate_(rate_bytes_per_second),
      burst_(static_cast<double>(burst_bytes)),
      tokens_(static_cast<double>(burst_bytes)),
      last_(start) {}

absl::Time TokenBucket::Reserve(uint64_t bytes, absl::Time now) {
  if (rate_ == 0) return now;
  if (now > last_) {
    tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * static_cast<double>(rate_));
    last_ = now;
  }
  tokens_ -= static_cast<double>(bytes);
  if (tokens_ >= 0) return std::max(now, last_);
  // The deficit is paid off by the refill after last_ (which is never after now here).
  return last_ + absl::Seconds(-tokens_ / static_cast<double>(rate_));
}

}  // namespace peregrine::checkpoint
