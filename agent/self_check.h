// Standby self-check: cheap, real evidence that this machine can take a slot.
//
// Checks, in order (the first failure is reported; detail lists every result):
//   cpu:     integer and floating-point arithmetic agree with closed forms
//            (sum of squares, a 32x32 matrix times the identity);
//   log_dir: when set, the directory can be created, a file written, read back
//            and removed (training logs and checkpoints need a writable disk);
//   memory:  /proc/meminfo MemAvailable is at least min_available_bytes.
// Costs a few milliseconds. Thread-safe (no shared state).
#ifndef PEREGRINE_AGENT_SELF_CHECK_H_
#define PEREGRINE_AGENT_SELF_CHECK_H_

#include <cstdint>
#include <string>

namespace peregrine {

struct SelfCheckOutcome {
  bool passed = false;
  std::string detail;
};

SelfCheckOutcome RunSelfCheck(const std::string& log_dir, uint64_t min_available_bytes = 256ull << 20);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_SELF_CHECK_H_
