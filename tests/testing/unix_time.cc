#include "tests/testing/unix_time.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace peregrine::testing {

int64_t UnixNanos() { return absl::ToUnixNanos(absl::Now()); }

}  // namespace peregrine::testing
