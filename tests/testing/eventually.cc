#include "tests/testing/eventually.h"

#include "absl/time/clock.h"

namespace peregrine::testing {

bool Eventually(const std::function<bool()>& condition, absl::Duration limit, absl::Duration poll) {
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    if (condition()) return true;
    absl::SleepFor(poll);
  }
  return condition();
}

}  // namespace peregrine::testing
