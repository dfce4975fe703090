// Internal to libperegrine_nccl.so: the process-wide state the exported NCCL wrappers
// (nccl_hook.cc) and the CUDA-event profiler (cuda_timing.cc) share. Not installed,
// not used outside the shared library; everything here has hidden visibility.
//
// Thread safety: the ring and the pointer-keyed communicator map are read lock-free on
// the hot path; creation paths (first call, communicator creation and destruction)
// serialise on one pthread mutex. Nothing here throws or allocates with operator new.
#ifndef PEREGRINE_AGENT_NCCL_HOOK_HOOK_STATE_H_
#define PEREGRINE_AGENT_NCCL_HOOK_HOOK_STATE_H_

#include <stdint.h>
#include <time.h>

#include "agent/nccl_ring/ring_format.h"

namespace peregrine::nccl_hook {

inline uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call with a TSC clocksource
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The mapped ring of this process, or null when the hook only forwards (disabled, or
// the ring could not be created).
struct Ring {
  nccl_ring::RingHeader* header = nullptr;
  nccl_ring::RingSlot* slots = nullptr;
};
Ring* CurrentRing();

// CUDA-event profiling (cuda_timing.cc). All functions are no-ops returning false /
// -1 until EnableCudaTiming succeeded.
//
// Loads libcudart at the first profiled call (never at load time), pre-creates the
// event pool and starts the resolver thread. Returns true when events can be used.
// Called by whichever thread first sees profiling on; concurrent callers return false
// while one is loading.
bool CudaTimingReady();
// Takes an event pair and records its start event on `stream`. Returns the pair's
// index, or -1 (pool exhausted / CUDA error; counted in profiling_skipped).
int CudaTimingBegin(void* stream);
// Records the end event on `stream` and hands the pair to the resolver thread, which
// appends a kOpDeviceTime record (link = call_seq) once both events completed.
void CudaTimingEnd(int pair, void* stream, uint64_t call_seq, uint64_t comm_id,
                   int32_t rank, int32_t nranks, uint8_t op);
// Returns a pair taken by CudaTimingBegin without timing anything (the group it was
// opened for launched nothing: ncclGroupSimulateEnd). No record is appended.
void CudaTimingCancel(int pair);
// After fork(): forget the pool (the child cannot use the parent's CUDA context).
void CudaTimingResetAfterFork();

}  // namespace peregrine::nccl_hook

#endif  // PEREGRINE_AGENT_NCCL_HOOK_HOOK_STATE_H_
