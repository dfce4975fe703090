// Loopback ports for tests that must name a port before a process binds it.
#ifndef PEREGRINE_TESTS_TESTING_PORTS_H_
#define PEREGRINE_TESTS_TESTING_PORTS_H_

namespace peregrine::testing {

// A loopback port that was free a moment ago (bound to 0, then released).
int FreeLoopbackPort();

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_PORTS_H_
