// Loopback ports for tests that must name a port before a process binds it.
#ifndef PEREGRINE_TESTS_TESTING_PORTS_H_
#define PEREGRINE_TESTS_TESTING_PORTS_H_

namespace peregrine::testing {

// A loopback port that was free a moment ago (base/free_port.h's PickFreePort, outside the
// kernel's ephemeral range); REQUIREs that one is found.
int FreeLoopbackPort();

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_PORTS_H_
