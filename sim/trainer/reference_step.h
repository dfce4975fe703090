// sim-trainer --reference-step: the small reference training step of the alignment
// diagnostic (stop-time diagnosis). Every machine runs exactly the same computation: fixed
// weights and inputs from the seed, tensor parallelism over the machine's GPUs (TP =
// WORLD_SIZE, PP = DP = 1), a row-parallel linear layer a' = tanh(W a) with its TP
// all-reduce through the machine's NCCL, MSE loss, backward, the grad-norm all-reduce and a
// plain SGD update, for `steps` steps. Every rank prints one line
//   [peregrine] reference-step digest=<16 hex> loss=<%.9g> grad_norm=<%.9g> nan=<0|1>
// where the digest is FNV-1a over each step's (step, loss bits, grad-norm bits) and the bits
// of the updated weights (all-gathered over TP). Floating-point order is fixed, so healthy
// machines with the same GPU count print identical digests; a nan or corrupt fault on any
// GPU changes it (through the NCCL payloads); crash aborts and hang blocks, as in training.
//
// Thread safety: called once per process from main.
#ifndef PEREGRINE_SIM_TRAINER_REFERENCE_STEP_H_
#define PEREGRINE_SIM_TRAINER_REFERENCE_STEP_H_

#include <cstdint>
#include <string>

namespace peregrine::sim {

struct ReferenceStepOptions {
  int rank = 0;        // RANK (= LOCAL_RANK: one machine)
  int world_size = 1;  // WORLD_SIZE: the machine's GPUs, the TP size
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  uint64_t seed = 1234;
  int steps = 2;
  int init_timeout_ms = 120000;
};

// Returns the process exit code (0 after printing the digest line, 3 on an NCCL error).
int RunReferenceStep(const ReferenceStepOptions& options);

}  // namespace peregrine::sim

#endif  // PEREGRINE_SIM_TRAINER_REFERENCE_STEP_H_
