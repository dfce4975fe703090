// Helpers shared by the sim suite: paths of the binaries under test, unique ids for worker
// processes and a fresh fault table (temporary directories, free ports and child
// processes: tests/testing/).
#ifndef PEREGRINE_TESTS_SIM_SIM_TEST_UTIL_H_
#define PEREGRINE_TESTS_SIM_SIM_TEST_UTIL_H_

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "nccl.h"
#include "sim/fault/fault_control.h"
#include "tests/testing/child_process.h"
#include "tests/testing/ports.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::testing {

inline constexpr auto kGenerous = std::chrono::seconds(120);

inline std::string WorkerPath() { return std::string(PEREGRINE_BINARY_DIR) + "/bin/sim_nccl_worker"; }
inline std::string TrainerPath() { return std::string(PEREGRINE_BINARY_DIR) + "/bin/sim-trainer"; }

// A fresh ncclUniqueId (the bootstrap root runs in this test process), hex encoded.
inline std::string NewIdHex() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "";
  std::string hex;
  char buf[3];
  for (char c : id.internal) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c));
    hex += buf;
  }
  return hex;
}

// A fault table (sim/fault) just created in a temporary directory.
struct FreshFaultTable {
  FreshFaultTable() { REQUIRE(sim::CreateFaultTable(path).ok()); }

  TempDir dir;
  std::string path = dir.Path("faults");
};

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_SIM_SIM_TEST_UTIL_H_
