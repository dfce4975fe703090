// sim-trainer: a hybrid-parallel (TP x PP x DP) training iteration loop written only
// against the NCCL API, with real CPU work per micro-batch. It runs on the stand-in
// libnccl.so.2 (sim/nccl) by default; the same binary links to any libnccl.so.2.
//
// RunTrainer runs steps resume_step+1 .. steps and returns the process exit code. The
// model is stateful: each rank trains its shard of the weights by SGD with momentum and
// reads its data through an RNG and a data position, all of which are its TrainState
// (train_state.h). With a checkpoint store (PEREGRINE_CHECKPOINT_DIR) the state is saved
// every checkpoint_interval steps and a resume loads the state of resume_step, so losses
// and weights continue bit-identically to an uninterrupted run of the same seed; a resume
// without a store starts from a fresh state at resume_step+1 (the state is lost, the
// losses and weights differ from an uninterrupted run). A resume whose checkpoint is
// missing, corrupt or of another layout exits with kExitCheckpoint. Every rank prints at
// the end "[peregrine] final step=<n> weight_digest=<sha256 hex of its weights>".
// Under a micro-batch plan (PEREGRINE_MICROBATCH_PLAN, read through the client library's
// pg_microbatches each step) a DP replica runs its planned share of the step's global
// micro-batches and scales its gradients so the update is the even split's (trainer.cc).
// Losses are identical across ranks and change under a nan/corrupt fault anywhere on the
// path; a step whose loss or gradient is not finite updates nothing (as a mixed-precision
// loss scaler skips it). Faults from sim/fault (keyed by PEREGRINE_MACHINE_ID and
// LOCAL_RANK) are applied in the compute. The model, the GPipe schedule and replay mode
// (stateless, unchanged by checkpoints) are described in trainer.cc.
//
// Thread safety: RunTrainer is called once per process from main.
#ifndef PEREGRINE_SIM_TRAINER_TRAINER_H_
#define PEREGRINE_SIM_TRAINER_TRAINER_H_

#include <cstdint>
#include <string>

namespace peregrine::sim {

struct TrainerOptions {
  // Environment.
  int rank = 0;              // RANK
  int world_size = 1;        // WORLD_SIZE
  int local_rank = 0;        // LOCAL_RANK
  int local_world_size = 1;  // LOCAL_WORLD_SIZE
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR
  int master_port = 29500;   // MASTER_PORT
  int tp = 1;                // PEREGRINE_TP
  int pp = 1;                // PEREGRINE_PP
  int dp = 1;                // PEREGRINE_DP
  int resume_step = 0;       // PEREGRINE_RESUME_STEP: steps resume_step+1 .. steps run
  int checkpoint_interval = 0;  // PEREGRINE_CHECKPOINT_INTERVAL: save every N steps (0: off)
  // Flags.
  int steps = 10;            // --steps
  int micro_batches = 4;     // --micro-batches
  int hidden = 256;          // --hidden
  double compute_ms = 0;     // --compute-ms: extra modelled compute per micro-batch
  std::string weights_out;   // --weights-out: raw float32 weights at the end ("{rank}": the rank)
  uint64_t seed = 1;         // --seed
  bool dp_reduce_scatter = false;  // --dp-mode=rs-ag (default allreduce)
  int init_timeout_ms = 120000;    // --init-timeout-s
  // --startup-ms: the process waits this long before joining the world, standing in for a
  // real trainer's start-up (imports, model construction, loading weights): every start
  // and restart pays it, so the controller measures a restart cost of that order.
  int startup_ms = 0;
  // --no-plans: the trainer does not use the client library's micro-batch plans (a
  // trainer that never calls peregrine.microbatches): it runs the even split and its
  // progress lines carry no mb=, so the controller reports S2 unavailable for the job.
  bool no_plans = false;
  // Dual-phase replay (PEREGRINE_REPLAY=1): a fixed global batch of micro_batches split
  // round-robin over the DP ranks (data independent of the DP size; gradients summed), and
  // one more stdout line per step with the exact bits:
  //   [peregrine] replay step=<n> loss_bits=<16 hex> grad_norm_bits=<16 hex>
  bool replay = false;
  int layers = 0;  // PEREGRINE_REPLAY_LAYERS: total layers, a multiple of PP (0: one per stage)
};

// Exit codes of sim-trainer.
inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNcclError = 3;
inline constexpr int kExitCheckpoint = 4;  // the checkpoint to resume from is missing or unusable
inline constexpr int kExitMicroBatchPlan = 5;  // the micro-batch plan file is unusable (stderr says why)

// Runs the loop; returns the process exit code (kExitOk after the last step).
int RunTrainer(const TrainerOptions& options);

}  // namespace peregrine::sim

#endif  // PEREGRINE_SIM_TRAINER_TRAINER_H_
