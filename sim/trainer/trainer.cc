#include "sim/trainer/trainer.h"

#include <time.h>

#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "diagnosis/parallel_layout.h"
#include "client/peregrine_client.h"
#include "nccl.h"
#include "diagnosis/tools/nccl_rendezvous.h"
#include "sim/fault/fault_table.h"
#include "sim/trainer/state_store.h"
#include "sim/trainer/train_state.h"

// The trainer's model and schedule.
//
// Model: each pipeline stage is one row-parallel linear layer a' = tanh(W a) with W
// (hidden x hidden) initialised from the seed and the stage; TP rank t holds the columns
// [t*H/TP, (t+1)*H/TP). The data set of DP replica d is an endless sequence of samples
// (input, target) generated from (seed, d, sample index); micro-batch m of a step reads
// sample data_position + m, and the data RNG (one draw per step) adds augmentation noise
// to the inputs. After the DP gradient reduction every rank updates its weight shard by
// SGD with momentum (train_state.h); DP replicas hold identical weights, as under DDP.
// Everything a step depends on besides the collectives' data is in the TrainState
// (weights, momentum, RNG, data position, step), so a state restored from a checkpoint
// continues exactly, and a lost one (fresh weights at step k) shows in the losses and the
// final weight digest. A step whose global loss or gradient norm is not finite (a nan
// fault) updates nothing, so the weights stay finite once the fault is gone.
//
// Schedule (GPipe): per step, forward for micro-batches 0..M-1 (recv activations from the
// previous stage, local partial matmul, TP all-reduce, tanh, send to the next stage), then
// backward for M-1..0 (recv the gradient from the next stage, weight-gradient
// accumulation, input-gradient shard, TP all-gather, send to the previous stage), then the
// DP gradient all-reduce (ncclAvg) or reduce-scatter + all-gather, then one world
// all-reduce of (loss, grad-norm^2) so every rank prints the same line.
//
// Micro-batch plans (client/peregrine_client.h pg_microbatches): a training step is a global
// sequence of DP*M micro-batches; global micro-batch g is the (g % M)-th micro-batch of
// replica g / M's data (its samples, and that replica's augmentation draw for the step, which
// any rank can compute: the data RNG is splitmix64, whose state after n draws is its initial
// state + n * gamma, the same n for every replica). In the even split replica d runs
// g = d*M .. d*M+M-1, exactly the micro-batches it always ran; under a plan it runs the range
// the plan gives it, so the replicas partition the same set. The gradients are sums over the
// micro-batches (no 1/M), so a replica multiplies its sum by gradient_scale * M (the plan's
// n/M replaces the even split's 1/M); the ncclAvg over the replicas then gives the even
// split's update up to floating-point reordering. The data position still advances by M per
// step (each replica's data stream is consumed by M per step, whoever runs it). Replays
// ignore plans.
//
// Replay (PEREGRINE_REPLAY=1, see TrainerOptions::replay) is the same loop with `layers`
// layers split evenly over the stages (layer l's weights depend only on the seed and l),
// stateless: inputs from (seed, step, global micro-batch), no weight update, no checkpoint,
// so a replayed step's bits depend only on the step and the data path.
//
// Faults (sim/fault, keyed by PEREGRINE_MACHINE_ID and LOCAL_RANK) are applied in the
// compute: compute_slowdown stretches it, hang blocks until cleared, crash prints a
// CUDA-style error and aborts.

namespace peregrine::sim {
namespace {

using Clock = std::chrono::steady_clock;

int g_rank = 0;

[[noreturn]] void NcclFailure(const char* what, ncclResult_t r, ncclComm_t comm) {
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
  std::fprintf(stderr, "[peregrine] rank %d: NCCL error in %s: %s (ncclResult_t %d)%s%s\n", g_rank,
               what, ncclGetErrorString(r), static_cast<int>(r),
               detail != nullptr && *detail ? ": " : "", detail != nullptr ? detail : "");
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(kExitNcclError);
}

#define NCCL_OR_DIE(call, comm)                       \
  do {                                                \
    ncclResult_t r_ = (call);                         \
    if (r_ != ncclSuccess) NcclFailure(#call, r_, comm); \
  } while (0)

uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1), a pure function of its arguments.
float Uniform(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e) {
  uint64_t h = Mix(Mix(Mix(Mix(Mix(a) ^ b) ^ c) ^ d) ^ e);
  return static_cast<float>(static_cast<double>(h >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

void SleepMs(double ms) {
  if (ms <= 0) return;
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Applies this GPU's injected compute faults after `measured_ms` of real work, modelling
// `extra_ms` of additional device time.
class ComputeFaults {
 public:
  explicit ComputeFaults(int rank)
      : reader_(std::getenv("PEREGRINE_SIM_FAULTS") != nullptr ? std::getenv("PEREGRINE_SIM_FAULTS")
                                                               : ""),
        machine_id_(MachineIdFromEnv()),
        local_rank_(LocalRankFromEnv()),
        rank_(rank) {}

  // Returns the modelled device time of the call (extra_ms times the injected stretch).
  double AfterCompute(double measured_ms, double extra_ms, int step) {
    RankFault f = reader_.Poll().RankFaultFor(machine_id_, local_rank_);
    grad_corrupt_ = f.grad_corrupt;
    if (f.crash) {
      std::fflush(stdout);
      std::fprintf(stderr,
                   "[peregrine] rank %d (machine %d, local rank %d) step %d: injected crash\n"
                   "RuntimeError: CUDA error: an illegal memory access was encountered\n",
                   rank_, machine_id_, local_rank_, step);
      std::fflush(stderr);
      std::abort();
    }
    while (f.hang) {
      // Blocks like a hung kernel; polls the table so clearing the fault resumes training.
      SleepMs(20);
      f = reader_.Poll().RankFaultFor(machine_id_, local_rank_);
    }
    // Jitter (if injected): this iteration's stretch, drawn per (rank, step).
    const double stretch = f.compute_slowdown * JitterFactor(f.jitter_fraction, rank_, step);
    SleepMs((measured_ms + extra_ms) * stretch - measured_ms);
    return extra_ms * stretch;
  }

  // Whether this GPU's backward kernel silently corrupts its results (as of the last poll).
  bool GradCorrupt() const { return grad_corrupt_; }

 private:
  bool grad_corrupt_ = false;
  FaultTableReader reader_;
  int machine_id_;
  int local_rank_;
  int rank_;
};

}  // namespace

int RunTrainer(const TrainerOptions& o) {
  g_rank = o.rank;
  absl::StatusOr<ParallelLayout> layout_or =
      ParallelLayout::Create(o.tp, o.pp, o.dp, o.local_world_size);
  if (!layout_or.ok()) {
    std::fprintf(stderr, "[peregrine] invalid layout: %s\n", layout_or.status().ToString().c_str());
    return kExitUsage;
  }
  const ParallelLayout& layout = *layout_or;
  if (layout.world_size() != o.world_size) {
    std::fprintf(stderr, "[peregrine] PEREGRINE_TP*PP*DP = %d but WORLD_SIZE = %d\n",
                 layout.world_size(), o.world_size);
    return kExitUsage;
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    std::fprintf(stderr, "[peregrine] RANK %d out of range [0, %d)\n", o.rank, o.world_size);
    return kExitUsage;
  }
  if (o.layers < 0 || (o.layers > 0 && o.layers % o.pp != 0)) {
    std::fprintf(stderr, "[peregrine] PEREGRINE_REPLAY_LAYERS %d is not a positive multiple of PEREGRINE_PP %d\n",
                 o.layers, o.pp);
    return kExitUsage;
  }
  if (o.hidden <= 0 || o.hidden % o.tp != 0 || o.micro_batches <= 0 || o.steps < 0) {
    std::fprintf(stderr,
                 "[peregrine] need --hidden > 0 divisible by PEREGRINE_TP, --micro-batches > 0, "
                 "--steps >= 0\n");
    return kExitUsage;
  }

  if (o.startup_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.startup_ms));  // --startup-ms

  // Rendezvous: rank 0's unique id through the TCP store, then the world communicator and
  // the TP / PP / DP groups by ncclCommSplit.
  ncclUniqueId id;
  if (o.rank == 0) {
    NCCL_OR_DIE(ncclGetUniqueId(&id), nullptr);
    absl::Status s = ServeUniqueId(o.master_addr, o.master_port, o.world_size, id, o.init_timeout_ms);
    if (!s.ok()) {
      std::fprintf(stderr, "[peregrine] rank 0: store: %s\n", s.ToString().c_str());
      return kExitUsage;
    }
  } else {
    absl::StatusOr<ncclUniqueId> fetched =
        FetchUniqueId(o.master_addr, o.master_port, o.rank, o.world_size, o.init_timeout_ms);
    if (!fetched.ok()) {
      std::fprintf(stderr, "[peregrine] rank %d: store: %s\n", o.rank,
                   fetched.status().ToString().c_str());
      return kExitUsage;
    }
    id = *fetched;
  }
  ncclComm_t world = nullptr, tp_comm = nullptr, pp_comm = nullptr, dp_comm = nullptr;
  NCCL_OR_DIE(ncclCommInitRank(&world, o.world_size, id, o.rank), nullptr);
  const RankCoordinates me = layout.Coordinates(o.rank);
  NCCL_OR_DIE(ncclCommSplit(world, layout.GroupIndexOf(GroupKind::kTensor, o.rank), me.tp,
                            &tp_comm, nullptr), world);
  NCCL_OR_DIE(ncclCommSplit(world, layout.GroupIndexOf(GroupKind::kPipeline, o.rank), me.pp,
                            &pp_comm, nullptr), world);
  NCCL_OR_DIE(ncclCommSplit(world, layout.GroupIndexOf(GroupKind::kData, o.rank), me.dp,
                            &dp_comm, nullptr), world);
  if (o.rank == 0) {
    std::fprintf(stderr, "[peregrine] sim-trainer: %s, hidden %d, %d micro-batches, steps %d..%d\n",
                 layout.DebugString().c_str(), o.hidden, o.micro_batches, o.resume_step + 1,
                 o.steps);
  }

  const int H = o.hidden;
  const int S = H / o.tp;
  const int j0 = me.tp * S;
  const bool first_stage = me.pp == 0;
  const bool last_stage = me.pp == o.pp - 1;
  // Layers of this stage (one per stage unless a replay asks for more).
  const int L = (o.layers > 0 ? o.layers : o.pp) / o.pp;
  // The micro-batches this rank runs and the data index of each: in training, M of its own
  // per DP rank; in a replay, a fixed global batch of M split round-robin over the DP ranks
  // (the data does not depend on the DP size).
  std::vector<uint64_t> data_index;
  for (int g = 0; g < o.micro_batches; ++g) {
    if (!o.replay || g % o.dp == me.dp) data_index.push_back(static_cast<uint64_t>(g));
  }
  const int M = static_cast<int>(data_index.size());
  const float scale = 1.5f / std::sqrt(static_cast<float>(H));
  const size_t layer_count = static_cast<size_t>(H) * S;
  const StateShape shape{static_cast<uint32_t>(o.rank), static_cast<uint32_t>(o.world_size),
                         static_cast<uint32_t>(o.tp), static_cast<uint32_t>(o.pp),
                         static_cast<uint32_t>(o.dp), static_cast<uint32_t>(H), static_cast<uint32_t>(L),
                         static_cast<uint32_t>(M), o.seed, layer_count * L};
  TrainState state;
  state.weights.resize(layer_count * L);
  state.momentum.assign(layer_count * L, 0.0f);
  state.rng = InitialDataRng(o.seed, static_cast<uint32_t>(me.dp));
  state.step = static_cast<uint64_t>(o.resume_step);
  for (int l = 0; l < L; ++l) {
    const int global_layer = me.pp * L + l;
    for (int i = 0; i < H; ++i) {
      for (int jl = 0; jl < S; ++jl) {
        state.weights[l * layer_count + static_cast<size_t>(i) * S + jl] =
            scale * Uniform(o.seed, 1, global_layer, i, j0 + jl);
      }
    }
  }
  const bool store = !o.replay && CheckpointStoreAvailable();
  if (o.resume_step > 0 && !o.replay) {
    if (store) {
      absl::StatusOr<TrainState> loaded = LoadTrainState(shape, static_cast<uint64_t>(o.resume_step));
      if (!loaded.ok()) {
        std::fprintf(stderr, "[peregrine] rank %d: cannot resume at step %d: %s\n", o.rank, o.resume_step,
                     loaded.status().ToString().c_str());
        return kExitCheckpoint;
      }
      state = *std::move(loaded);
    } else {
      std::fprintf(stderr,
                   "[peregrine] rank %d: no checkpoint store: steps %d.. start from a fresh state "
                   "(the trained state is lost)\n",
                   o.rank, o.resume_step + 1);
    }
  }
  std::vector<float>& w = state.weights;
  // a_in[m][l]: input of layer l for micro-batch m; a_out[m][l]: its output.
  std::vector<std::vector<std::vector<float>>> a_in(M, std::vector<std::vector<float>>(L, std::vector<float>(H)));
  std::vector<std::vector<std::vector<float>>> a_out = a_in;
  std::vector<float> y_part(H), y(H), g(H), gy(H), ga_shard(S), ga(H);
  const size_t grad_count = layer_count * L;
  const size_t shard_count = (grad_count + o.dp - 1) / o.dp;
  std::vector<float> grad(shard_count * o.dp), grad_shard(shard_count);
  ComputeFaults faults(o.rank);
  const double fwd_extra_ms = o.compute_ms / 3.0 / L;
  const double bwd_extra_ms = (o.compute_ms - o.compute_ms / 3.0) / L;

  const int K = o.micro_batches;  // per replica in the even split
  std::vector<uint64_t> noise_keys(o.dp);
  for (int step = o.resume_step + 1; step <= o.steps; ++step) {
    const auto step_start = Clock::now();
    std::fill(grad.begin(), grad.end(), 0.0f);
    double loss_sum = 0;
    double model_ms = 0;
    // This replica's share of the step: the even split unless a plan applies.
    uint32_t first = static_cast<uint32_t>(me.dp * K);
    uint32_t count = static_cast<uint32_t>(M);
    float grad_factor = 1.0f;
    if (!o.replay && !o.no_plans) {
      char err[512];
      double gradient_scale = 0;
      const int rc = pg_microbatches(static_cast<uint64_t>(step), static_cast<uint32_t>(me.dp),
                                     static_cast<uint32_t>(K), &first, &count, &gradient_scale, err, sizeof(err));
      if (rc == PG_ERROR) {
        std::fprintf(stderr, "[peregrine] rank %d step %d: %s\n", o.rank, step, err);
        std::fflush(stdout);
        return kExitMicroBatchPlan;
      }
      if (rc == PG_OK) grad_factor = static_cast<float>(gradient_scale * K);
    }
    const int Ms = static_cast<int>(count);
    if (static_cast<int>(a_in.size()) < Ms) {
      a_in.resize(Ms, std::vector<std::vector<float>>(L, std::vector<float>(H)));
      a_out.resize(Ms, std::vector<std::vector<float>>(L, std::vector<float>(H)));
    }
    // This step's samples and augmentation (the same on every rank of a DP replica): global
    // micro-batch g is micro-batch g % K of replica g / K (its data and its RNG draw).
    if (!o.replay) {
      const uint64_t draws = state.rng - InitialDataRng(o.seed, static_cast<uint32_t>(me.dp));
      for (int d = 0; d < o.dp; ++d) {
        uint64_t rng = InitialDataRng(o.seed, static_cast<uint32_t>(d)) + draws;
        noise_keys[d] = NextRandom(&rng);
      }
      NextRandom(&state.rng);
    }
    auto owner = [&](int m) { return static_cast<int>((first + static_cast<uint32_t>(m)) / K); };
    auto sample = [&](int m) {
      return o.replay ? data_index[m] : state.data_position + (first + static_cast<uint32_t>(m)) % K;
    };
    auto input = [&](int m, int j) {
      if (o.replay) return Uniform(o.seed, 2, step, sample(m), j);
      const uint64_t local = (first + static_cast<uint32_t>(m)) % K;
      return Uniform(o.seed, 2, owner(m), sample(m), j) + 0.25f * Uniform(noise_keys[owner(m)], 4, local, j, 0);
    };
    auto target = [&](int m, int i) {
      return 0.8f * (o.replay ? Uniform(o.seed, 3, step, sample(m), i) : Uniform(o.seed, 3, owner(m), sample(m), i));
    };
    // Forward.
    for (int m = 0; m < Ms; ++m) {
      std::vector<float>& x0 = a_in[m][0];
      if (first_stage) {
        for (int j = 0; j < H; ++j) x0[j] = input(m, j);
      } else {
        NCCL_OR_DIE(ncclRecv(x0.data(), H, ncclFloat32, me.pp - 1, pp_comm, nullptr), pp_comm);
      }
      for (int l = 0; l < L; ++l) {
        const std::vector<float>& x = a_in[m][l];
        const float* wl = &w[l * layer_count];
        const auto t0 = Clock::now();
        for (int i = 0; i < H; ++i) {
          const float* row = &wl[static_cast<size_t>(i) * S];
          float acc = 0;
          for (int jl = 0; jl < S; ++jl) acc += row[jl] * x[j0 + jl];
          y_part[i] = acc;
        }
        model_ms += faults.AfterCompute(MsSince(t0), fwd_extra_ms, step);
        NCCL_OR_DIE(ncclAllReduce(y_part.data(), y.data(), H, ncclFloat32, ncclSum, tp_comm, nullptr),
                    tp_comm);
        for (int i = 0; i < H; ++i) a_out[m][l][i] = std::tanh(y[i]);
        if (l + 1 < L) a_in[m][l + 1] = a_out[m][l];
      }
      if (!last_stage) {
        NCCL_OR_DIE(ncclSend(a_out[m][L - 1].data(), H, ncclFloat32, me.pp + 1, pp_comm, nullptr), pp_comm);
      }
    }
    // Backward.
    for (int m = Ms - 1; m >= 0; --m) {
      if (last_stage) {
        double l2 = 0;
        for (int i = 0; i < H; ++i) {
          const float d = a_out[m][L - 1][i] - target(m, i);
          l2 += static_cast<double>(d) * d;
          g[i] = 2.0f * d / static_cast<float>(H);
        }
        loss_sum += l2 / H;
      } else {
        NCCL_OR_DIE(ncclRecv(g.data(), H, ncclFloat32, me.pp + 1, pp_comm, nullptr), pp_comm);
      }
      for (int l = L - 1; l >= 0; --l) {
        const float* wl = &w[l * layer_count];
        float* gl = &grad[l * layer_count];
        const auto t0 = Clock::now();
        for (int i = 0; i < H; ++i) gy[i] = g[i] * (1.0f - a_out[m][l][i] * a_out[m][l][i]);
        std::fill(ga_shard.begin(), ga_shard.end(), 0.0f);
        for (int i = 0; i < H; ++i) {
          const float* row = &wl[static_cast<size_t>(i) * S];
          float* grow = &gl[static_cast<size_t>(i) * S];
          const float gi = gy[i];
          for (int jl = 0; jl < S; ++jl) {
            grow[jl] += gi * a_in[m][l][j0 + jl];
            ga_shard[jl] += row[jl] * gi;
          }
        }
        model_ms += faults.AfterCompute(MsSince(t0), bwd_extra_ms, step);
        NCCL_OR_DIE(ncclAllGather(ga_shard.data(), ga.data(), S, ncclFloat32, tp_comm, nullptr),
                    tp_comm);
        g = ga;
      }
      if (!first_stage) {
        NCCL_OR_DIE(ncclSend(ga.data(), H, ncclFloat32, me.pp - 1, pp_comm, nullptr), pp_comm);
      }
    }
    // Under a plan: the summed gradients times gradient_scale * K (see the top of the file).
    if (grad_factor != 1.0f) {
      for (float& v : grad) v *= grad_factor;
    }
    // An injected silent corruption of this rank's backward results (grad_corrupt).
    if (faults.GradCorrupt()) {
      for (float& v : grad) v *= 64.0f;
    }
    // Data-parallel gradient reduction (a replay sums: its DP ranks may hold unequal shares).
    const ncclRedOp_t dp_op = o.replay ? ncclSum : ncclAvg;
    if (o.dp_reduce_scatter) {
      NCCL_OR_DIE(ncclReduceScatter(grad.data(), grad_shard.data(), shard_count, ncclFloat32,
                                    dp_op, dp_comm, nullptr), dp_comm);
      NCCL_OR_DIE(ncclAllGather(grad_shard.data(), grad.data(), shard_count, ncclFloat32, dp_comm,
                                nullptr), dp_comm);
    } else {
      NCCL_OR_DIE(ncclAllReduce(grad.data(), grad.data(), grad.size(), ncclFloat32, dp_op,
                                dp_comm, nullptr), dp_comm);
    }
    double sq = 0;
    for (size_t k = 0; k < grad_count; ++k) sq += static_cast<double>(grad[k]) * grad[k];
    double metrics[2] = {last_stage && me.tp == 0 ? loss_sum : 0.0, me.dp == 0 ? sq : 0.0};
    NCCL_OR_DIE(ncclAllReduce(metrics, metrics, 2, ncclFloat64, ncclSum, world, nullptr), world);
    const double loss =
        metrics[0] / (o.replay ? static_cast<double>(o.micro_batches) : static_cast<double>(o.dp) * M);
    const double grad_norm = std::sqrt(metrics[1]);
    std::printf("[peregrine] step=%d loss=%.9g grad_norm=%.9g iter_ms=%.3f", step, loss, grad_norm,
                MsSince(step_start));
    if (!o.no_plans) std::printf(" mb=%d", Ms);
    if (o.compute_ms > 0) std::printf(" model_ms=%.3f", model_ms);
    std::printf("\n");
    if (o.replay) {
      uint64_t loss_bits, norm_bits;
      std::memcpy(&loss_bits, &loss, sizeof(loss));
      std::memcpy(&norm_bits, &grad_norm, sizeof(grad_norm));
      std::printf("[peregrine] replay step=%d loss_bits=%016llx grad_norm_bits=%016llx\n", step,
                  static_cast<unsigned long long>(loss_bits), static_cast<unsigned long long>(norm_bits));
    }
    std::fflush(stdout);
    if (o.replay) continue;
    // SGD with momentum on this rank's shard; a non-finite step changes nothing.
    if (std::isfinite(loss) && std::isfinite(grad_norm)) {
      for (size_t k = 0; k < grad_count; ++k) {
        state.momentum[k] = kMomentum * state.momentum[k] + grad[k];
        w[k] -= kLearningRate * state.momentum[k];
      }
    }
    state.data_position += static_cast<uint64_t>(M);
    state.step = static_cast<uint64_t>(step);
    if (store && o.checkpoint_interval > 0 && step % o.checkpoint_interval == 0) {
      if (absl::Status s = SaveTrainState(shape, state); !s.ok()) {
        std::fprintf(stderr, "[peregrine] rank %d: %s\n", o.rank, s.ToString().c_str());
      }
    }
  }
  if (!o.weights_out.empty()) {
    std::string path = o.weights_out;
    if (size_t at = path.find("{rank}"); at != std::string::npos) path.replace(at, 6, std::to_string(o.rank));
    std::FILE* f = std::fopen(path.c_str(), "wb");
    const bool written = f != nullptr && std::fwrite(w.data(), sizeof(float), w.size(), f) == w.size();
    if (f == nullptr || std::fclose(f) != 0 || !written) {
      std::fprintf(stderr, "[peregrine] rank %d: cannot write --weights-out %s: %s\n", o.rank, path.c_str(),
                   std::strerror(errno));
      return kExitUsage;
    }
  }
  std::printf("[peregrine] final step=%llu weight_digest=%s\n",
              static_cast<unsigned long long>(o.replay ? o.steps : state.step), WeightDigest(w).c_str());
  std::fflush(stdout);
  ncclCommDestroy(dp_comm);
  ncclCommDestroy(pp_comm);
  ncclCommDestroy(tp_comm);
  ncclCommDestroy(world);
  return kExitOk;
}

}  // namespace peregrine::sim
