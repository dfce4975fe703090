// Child processes a test leaves behind: Descendants lists every process below the test
// process; DescendantGuard makes the test process a child subreaper (orphans of its
// children come back to it and stay visible) and, on destruction, kills and reaps every
// descendant, so a failing test leaks nothing. Tests only; one guard per test at a time.
#ifndef PEREGRINE_TESTS_TESTING_PROCESS_GUARD_H_
#define PEREGRINE_TESTS_TESTING_PROCESS_GUARD_H_

#include <sys/types.h>

#include <vector>

namespace peregrine::testing {

// Every process below the test process (zombies included), read from /proc.
std::vector<pid_t> Descendants();

// Reaps zombies among the direct children; true when no descendant is left.
bool NoDescendantsLeft();

class DescendantGuard {
 public:
  DescendantGuard();
  // SIGKILLs and reaps every descendant (for at most 30 s).
  ~DescendantGuard();
  DescendantGuard(const DescendantGuard&) = delete;
  DescendantGuard& operator=(const DescendantGuard&) = delete;
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_PROCESS_GUARD_H_
