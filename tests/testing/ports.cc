#include "tests/testing/ports.h"

#include <catch2/catch.hpp>

#include "absl/status/statusor.h"
#include "base/free_port.h"

namespace peregrine::testing {

int FreeLoopbackPort() {
  absl::StatusOr<int> port = PickFreePort();
  INFO(port.status().ToString());
  REQUIRE(port.ok());
  return *port;
}

}  // namespace peregrine::testing
