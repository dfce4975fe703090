// Waiting on a condition instead of sleeping: Eventually polls `condition` every few
// milliseconds until it holds or `limit` passes. The limit is generous: only a broken
// implementation reaches it, never a slow machine. Thread-safe (no shared state).
#ifndef PEREGRINE_TESTS_TESTING_EVENTUALLY_H_
#define PEREGRINE_TESTS_TESTING_EVENTUALLY_H_

#include <functional>

#include "absl/time/time.h"

namespace peregrine::testing {

// True as soon as `condition()` is true; false when it still is not after `limit` (the
// condition is checked once more at the deadline).
bool Eventually(const std::function<bool()>& condition, absl::Duration limit = absl::Seconds(60),
                absl::Duration poll = absl::Milliseconds(5));

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_EVENTUALLY_H_
