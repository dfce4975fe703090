// Wall-clock time for tests that compare against times the system reports (the status and
// the wire carry Unix nanoseconds). Decision tests use synthetic times instead.
#ifndef PEREGRINE_TESTS_TESTING_UNIX_TIME_H_
#define PEREGRINE_TESTS_TESTING_UNIX_TIME_H_

#include <cstdint>

namespace peregrine::testing {

inline constexpr int64_t kMillisecond = 1'000'000;
inline constexpr int64_t kSecond = 1'000'000'000;

// Now, in Unix nanoseconds.
int64_t UnixNanos();

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_UNIX_TIME_H_
