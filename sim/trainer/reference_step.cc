#include "sim/trainer/reference_step.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "base/fnv1a.h"
#include "nccl.h"
#include "sim/fault/fault_table.h"
#include "diagnosis/tools/nccl_rendezvous.h"
#include "sim/trainer/trainer.h"

namespace peregrine::sim {
namespace {

constexpr int kShard = 32;        // columns per TP rank
constexpr int kMicroBatches = 2;
constexpr float kLearningRate = 0.1f;

uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float Uniform(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  uint64_t h = Mix(Mix(Mix(Mix(a) ^ b) ^ c) ^ d);
  return static_cast<float>(static_cast<double>(h >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

// crash and hang as the training loop models them (nan and corrupt act on NCCL payloads).
void ApplyDeviceFaults(FaultTableReader& reader, int rank) {
  const int machine = MachineIdFromEnv(), local = LocalRankFromEnv();
  RankFault f = reader.Poll().RankFaultFor(machine, local);
  if (f.crash) {
    std::fprintf(stderr, "[peregrine] rank %d (machine %d, local rank %d): injected crash\n"
                         "RuntimeError: CUDA error: an illegal memory access was encountered\n",
                 rank, machine, local);
    std::fflush(stderr);
    std::abort();
  }
  while (f.hang) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    f = reader.Poll().RankFaultFor(machine, local);
  }
}

#define REF_NCCL(call)                                                                          \
  do {                                                                                          \
    ncclResult_t r_ = (call);                                                                   \
    if (r_ != ncclSuccess) {                                                                    \
      std::fprintf(stderr, "[peregrine] reference-step rank %d: NCCL error in %s: %s\n", o.rank, \
                   #call, ncclGetErrorString(r_));                                              \
      return kExitNcclError;                                                                    \
    }                                                                                           \
  } while (0)

}  // namespace

int RunReferenceStep(const ReferenceStepOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size || o.steps < 1) {
    std::fprintf(stderr, "[peregrine] reference-step: need 0 <= RANK < WORLD_SIZE and --steps >= 1\n");
    return kExitUsage;
  }
  ncclUniqueId id;
  if (o.rank == 0) {
    REF_NCCL(ncclGetUniqueId(&id));
    absl::Status s = ServeUniqueId(o.master_addr, o.master_port, o.world_size, id, o.init_timeout_ms);
    if (!s.ok()) {
      std::fprintf(stderr, "[peregrine] reference-step rank 0: store: %s\n", s.ToString().c_str());
      return kExitUsage;
    }
  } else {
    absl::StatusOr<ncclUniqueId> fetched = FetchUniqueId(o.master_addr, o.master_port, o.rank, o.world_size,
                                                         o.init_timeout_ms);
    if (!fetched.ok()) {
      std::fprintf(stderr, "[peregrine] reference-step rank %d: store: %s\n", o.rank,
                   fetched.status().ToString().c_str());
      return kExitUsage;
    }
    id = *fetched;
  }
  ncclComm_t comm = nullptr;
  REF_NCCL(ncclCommInitRank(&comm, o.world_size, id, o.rank));
  FaultTableReader faults(std::getenv("PEREGRINE_SIM_FAULTS") != nullptr ? std::getenv("PEREGRINE_SIM_FAULTS") : "");

  const int S = kShard, H = kShard * o.world_size, j0 = o.rank * S;
  const float scale = 1.5f / std::sqrt(static_cast<float>(H));
  std::vector<float> w(static_cast<size_t>(H) * S), grad(w.size());
  for (int i = 0; i < H; ++i) {
    for (int jl = 0; jl < S; ++jl) w[static_cast<size_t>(i) * S + jl] = scale * Uniform(o.seed, 1, i, j0 + jl);
  }
  std::vector<float> x(H), y_part(H), y(H), a(H), gy(H);
  uint64_t digest = kFnv1aOffsetBasis;
  double loss = 0, grad_norm = 0;
  bool nan = false;
  for (int step = 1; step <= o.steps; ++step) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    double loss_sum = 0;
    for (int m = 0; m < kMicroBatches; ++m) {
      for (int j = 0; j < H; ++j) x[j] = Uniform(o.seed, 2, m, j);
      for (int i = 0; i < H; ++i) {
        const float* row = &w[static_cast<size_t>(i) * S];
        float acc = 0;
        for (int jl = 0; jl < S; ++jl) acc += row[jl] * x[j0 + jl];
        y_part[i] = acc;
      }
      ApplyDeviceFaults(faults, o.rank);
      REF_NCCL(ncclAllReduce(y_part.data(), y.data(), H, ncclFloat32, ncclSum, comm, nullptr));
      double l = 0;
      for (int i = 0; i < H; ++i) {
        a[i] = std::tanh(y[i]);
        const float d = a[i] - 0.8f * Uniform(o.seed, 3, m, i);
        l += static_cast<double>(d) * d;
        gy[i] = (2.0f * d / static_cast<float>(H)) * (1.0f - a[i] * a[i]);
      }
      loss_sum += l / H;
      for (int i = 0; i < H; ++i) {
        float* grow = &grad[static_cast<size_t>(i) * S];
        for (int jl = 0; jl < S; ++jl) grow[jl] += gy[i] * x[j0 + jl];
      }
    }
    double sq = 0;
    for (float g : grad) sq += static_cast<double>(g) * g;
    REF_NCCL(ncclAllReduce(&sq, &sq, 1, ncclFloat64, ncclSum, comm, nullptr));
    loss = loss_sum / kMicroBatches;
    grad_norm = std::sqrt(sq);
    nan = nan || std::isnan(loss) || std::isnan(grad_norm);
    for (size_t k = 0; k < w.size(); ++k) w[k] -= kLearningRate * grad[k];
    digest = Fnv1aBytes(&step, sizeof(step), digest);
    digest = Fnv1aBytes(&loss, sizeof(loss), digest);
    digest = Fnv1aBytes(&grad_norm, sizeof(grad_norm), digest);
  }
  std::vector<float> all(w.size() * static_cast<size_t>(o.world_size));
  REF_NCCL(ncclAllGather(w.data(), all.data(), w.size(), ncclFloat32, comm, nullptr));
  ncclCommDestroy(comm);
  for (float v : all) nan = nan || std::isnan(v);
  digest = Fnv1aBytes(all.data(), all.size() * sizeof(float), digest);
  std::printf("[peregrine] reference-step digest=%016llx loss=%.9g grad_norm=%.9g nan=%d\n",
              static_cast<unsigned long long>(digest), loss, grad_norm, nan ? 1 : 0);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace peregrine::sim
