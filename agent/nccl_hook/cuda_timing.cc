// CUDA-event profiling for libperegrine_nccl.so (see hook_state.h).
//
// libcudart is opened only when profiling is first switched on (an already loaded
// copy is preferred, so events and the training's streams share a runtime); when it or
// a device is absent, profiling falls back to host timing and cuda_state says so.
// A fixed pool of pre-created event pairs avoids any creation on the hot path; a
// resolver thread, started with the pool, polls submitted pairs with cudaEventQuery
// and appends kOpDeviceTime records, so no caller ever waits for the GPU.
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "agent/nccl_hook/hook_state.h"
#include "agent/nccl_ring/ring_format.h"
#include "cuda_runtime_api.h"

namespace peregrine::nccl_hook {
namespace {

using nccl_ring::LoadAcquire;
using nccl_ring::LoadRelaxed;
using nccl_ring::StoreRelaxed;
using nccl_ring::StoreRelease;

constexpr uint32_t kPairs = 512;  // power of two

struct CudaApi {
  cudaError_t (*EventCreateWithFlags)(cudaEvent_t*, unsigned int);
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t);
  cudaError_t (*EventQuery)(cudaEvent_t);
  cudaError_t (*EventElapsedTime)(float*, cudaEvent_t, cudaEvent_t);
  cudaError_t (*GetDevice)(int*);
  cudaError_t (*SetDevice)(int);
};

enum PairState : uint32_t { kFree = 0, kArmed = 1, kSubmitted = 2 };

struct Pair {
  cudaEvent_t start;
  cudaEvent_t end;
  uint32_t state;
  uint8_t op;
  int32_t rank;
  int32_t nranks;
  uint64_t call_seq;
  uint64_t comm_id;
};

enum CudaState : uint32_t { kNotTried = 0, kLoading = 1, kReady = 2, kUnavailable = 3 };

uint32_t g_state = kNotTried;
CudaApi g_api;
Pair g_pairs[kPairs];
uint32_t g_next = 0;
int g_device = 0;

void PublishState(uint32_t state) {
  StoreRelease(&g_state, state);
  Ring* r = CurrentRing();
  if (r != nullptr) StoreRelaxed(&r->header->cuda_state, state);
}

void* OpenCudart() {
  static const char* const kNames[] = {"libcudart.so.13", "libcudart.so.12",
                                       "libcudart.so.11.0", "libcudart.so"};
  for (const char* name : kNames) {
    void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h != nullptr) return h;
  }
  for (const char* name : kNames) {
    void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) return h;
  }
  return nullptr;
}

void SkipOne() {
  Ring* r = CurrentRing();
  if (r != nullptr) __atomic_fetch_add(&r->header->profiling_skipped, 1, __ATOMIC_RELAXED);
}

void* Resolver(void*) {
  g_api.SetDevice(g_device);
  long idle_ns = 1000000;
  for (;;) {
    bool busy = false;
    for (uint32_t i = 0; i < kPairs; ++i) {
      Pair& p = g_pairs[i];
      if (LoadAcquire(&p.state) != kSubmitted) continue;
      busy = true;
      const cudaError_t q = g_api.EventQuery(p.end);
      if (q == cudaErrorNotReady) continue;
      float ms = 0;
      Ring* r = CurrentRing();
      if (q == cudaSuccess && g_api.EventElapsedTime(&ms, p.start, p.end) == cudaSuccess &&
          r != nullptr) {
        nccl_ring::RecordPayload rec{};
        rec.time_ns = MonotonicNs();
        rec.comm_id = p.comm_id;
        rec.link = p.call_seq;
        rec.value = ms <= 0 ? 0 : static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
        rec.rank = p.rank;
        rec.nranks = p.nranks;
        rec.peer = -1;
        rec.op = nccl_ring::kOpDeviceTime;
        rec.datatype = p.op;  // the op that was timed
        nccl_ring::AppendRecord(r->header, r->slots, rec);
      } else {
        SkipOne();
      }
      StoreRelease(&p.state, static_cast<uint32_t>(kFree));
    }
    Ring* r = CurrentRing();
    const bool profiling = r != nullptr && LoadRelaxed(&r->header->profiling) != 0;
    idle_ns = busy ? 200000 : (profiling ? 2000000 : 50000000);
    timespec ts{0, idle_ns};
    nanosleep(&ts, nullptr);
  }
  return nullptr;
}

bool Load() {
  void* h = OpenCudart();
  if (h == nullptr) return false;
  g_api.EventCreateWithFlags = reinterpret_cast<decltype(g_api.EventCreateWithFlags)>(
      dlsym(h, "cudaEventCreateWithFlags"));
  g_api.EventRecord = reinterpret_cast<decltype(g_api.EventRecord)>(dlsym(h, "cudaEventRecord"));
  g_api.EventQuery = reinterpret_cast<decltype(g_api.EventQuery)>(dlsym(h, "cudaEventQuery"));
  g_api.EventElapsedTime = reinterpret_cast<decltype(g_api.EventElapsedTime)>(
      dlsym(h, "cudaEventElapsedTime"));
  g_api.GetDevice = reinterpret_cast<decltype(g_api.GetDevice)>(dlsym(h, "cudaGetDevice"));
  g_api.SetDevice = reinterpret_cast<decltype(g_api.SetDevice)>(dlsym(h, "cudaSetDevice"));
  if (g_api.EventCreateWithFlags == nullptr || g_api.EventRecord == nullptr ||
      g_api.EventQuery == nullptr || g_api.EventElapsedTime == nullptr ||
      g_api.GetDevice == nullptr || g_api.SetDevice == nullptr) {
    return false;
  }
  if (g_api.GetDevice(&g_device) != cudaSuccess) return false;
  for (uint32_t i = 0; i < kPairs; ++i) {
    if (g_api.EventCreateWithFlags(&g_pairs[i].start, cudaEventDefault) != cudaSuccess ||
        g_api.EventCreateWithFlags(&g_pairs[i].end, cudaEventDefault) != cudaSuccess) {
      return false;
    }
    g_pairs[i].state = kFree;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t tid;
  const bool started = pthread_create(&tid, &attr, Resolver, nullptr) == 0;
  pthread_attr_destroy(&attr);
  return started;
}

}  // namespace

bool CudaTimingReady() {
  uint32_t s = LoadAcquire(&g_state);
  if (__builtin_expect(s == kReady, 1)) return true;
  if (s != kNotTried) return false;
  if (!__atomic_compare_exchange_n(&g_state, &s, static_cast<uint32_t>(kLoading), false,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    return false;
  }
  const char* env = getenv("PEREGRINE_NCCL_CUDA_EVENTS");
  const bool allowed = env == nullptr || env[0] != '0';
  PublishState(allowed && Load() ? kReady : kUnavailable);
  return LoadAcquire(&g_state) == kReady;
}

int CudaTimingBegin(void* stream) {
  const uint32_t i = __atomic_fetch_add(&g_next, 1, __ATOMIC_RELAXED) & (kPairs - 1);
  Pair& p = g_pairs[i];
  uint32_t expected = kFree;
  if (!__atomic_compare_exchange_n(&p.state, &expected, static_cast<uint32_t>(kArmed), false,
                                   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
    SkipOne();
    return -1;
  }
  if (g_api.EventRecord(p.start, static_cast<cudaStream_t>(stream)) != cudaSuccess) {
    StoreRelease(&p.state, static_cast<uint32_t>(kFree));
    SkipOne();
    return -1;
  }
  return static_cast<int>(i);
}

void CudaTimingEnd(int pair, void* stream, uint64_t call_seq, uint64_t comm_id,
                   int32_t rank, int32_t nranks, uint8_t op) {
  if (pair < 0 || pair >= static_cast<int>(kPairs)) return;
  Pair& p = g_pairs[pair];
  if (g_api.EventRecord(p.end, static_cast<cudaStream_t>(stream)) != cudaSuccess) {
    StoreRelease(&p.state, static_cast<uint32_t>(kFree));
    SkipOne();
    return;
  }
  p.call_seq = call_seq;
  p.comm_id = comm_id;
  p.rank = rank;
  p.nranks = nranks;
  p.op = op;
  StoreRelease(&p.state, static_cast<uint32_t>(kSubmitted));
}

void CudaTimingCancel(int pair) {
  if (pair < 0 || pair >= static_cast<int>(kPairs)) return;
  StoreRelease(&g_pairs[pair].state, static_cast<uint32_t>(kFree));
}

void CudaTimingResetAfterFork() {
  g_state = kNotTried;
  g_next = 0;
  for (uint32_t i = 0; i < kPairs; ++i) g_pairs[i].state = kFree;
}

}  // namespace peregrine::nccl_hook
