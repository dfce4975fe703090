// libperegrine_nccl.so: the NCCL interposer loaded with LD_PRELOAD.
//
// Each exported nccl* function forwards to the next definition (dlsym RTLD_NEXT, or the
// loaded libnccl.so.2 when that is in a local scope; resolved once) and appends a fixed-size record to this process's shared-memory ring
// (ring_format.h). What NCCL returns is returned unchanged; nothing here throws.
//
// Hot path (a traffic call with profiling and trap off): one relaxed load of the trap
// word, a lock-free probe of the communicator map, clock_gettime (vDSO), one fetch_add
// and a CAS on the ring, eight stores. No lock, no system call, no allocation.
//
// Slow paths, each taken rarely: the first NCCL call of the process (resolve symbols,
// create the ring), communicator creation/destruction (one mutex, comm table update),
// trap mode (waits with sched_yield/nanosleep: system calls are allowed only while
// trapped), profiling (host exit record; CUDA events when libcudart and a device exist).
//
// Trap mode pauses only at call boundaries: a call already inside NCCL finishes (or
// waits inside NCCL for a peer that is trapped), and the next call of any thread waits
// at entry until the agent bumps the release epoch or clears the trap word.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/nccl_hook/hook_state.h"
#include "agent/nccl_ring/ring_format.h"
#include "nccl.h"

#define PEREGRINE_EXPORT extern "C" __attribute__((visibility("default")))
#define PEREGRINE_LIKELY(x) __builtin_expect(!!(x), 1)
#define PEREGRINE_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace peregrine::nccl_hook {
namespace {

using nccl_ring::AppendRecord;
using nccl_ring::CommSlot;
using nccl_ring::LoadAcquire;
using nccl_ring::LoadRelaxed;
using nccl_ring::RecordPayload;
using nccl_ring::RingHeader;
using nccl_ring::StoreRelaxed;
using nccl_ring::StoreRelease;

// ---------------------------------------------------------------- real symbols

struct RealNccl {
  ncclResult_t (*GetVersion)(int*);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*);
  ncclResult_t (*CommInitRankScalable)(ncclComm_t*, int, int, int, ncclUniqueId*,
                                       ncclConfig_t*);
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
  ncclResult_t (*CommShrink)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommRevoke)(ncclComm_t, int);
  ncclResult_t (*CommCount)(const ncclComm_t, int*);
  ncclResult_t (*CommUserRank)(const ncclComm_t, int*);
  ncclResult_t (*CommCuDevice)(const ncclComm_t, int*);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                            ncclComm_t, cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Bcast)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int,
                         ncclComm_t, cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                           cudaStream_t);
  ncclResult_t (*Gather)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*Scatter)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                          cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  ncclResult_t (*GroupSimulateEnd)(ncclSimInfo_t*);
};

RealNccl g_real;
pthread_once_t g_resolve_once = PTHREAD_ONCE_INIT;

// Where the wrappers find the real functions. Normally the next definition in the global
// lookup order (RTLD_NEXT). But a libnccl.so.2 loaded into a local scope is invisible to
// RTLD_NEXT while its callers still bind to these wrappers (LD_PRELOAD comes first in every
// scope): PyTorch's, pulled in by an extension module that Python opens with RTLD_LOCAL.
// Seen on a GPU machine (PyTorch 2.11, NCCL 2.28.9): every wrapper found nothing, so
// every NCCL call of the job failed. Such a copy is found among the loaded objects by its
// soname (RTLD_NOLOAD loads nothing); dlsym on its handle searches it and its own
// dependencies only, never this library.
void* g_local_nccl = nullptr;

template <typename F>
void Resolve(F* slot, const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr && g_local_nccl != nullptr) f = dlsym(g_local_nccl, name);
  *slot = reinterpret_cast<F>(f);
}

void ResolveAll() {
  if (dlsym(RTLD_NEXT, "ncclGetVersion") == nullptr) {
    g_local_nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  }
  Resolve(&g_real.GetVersion, "ncclGetVersion");
  Resolve(&g_real.GetUniqueId, "ncclGetUniqueId");
  Resolve(&g_real.CommInitRank, "ncclCommInitRank");
  Resolve(&g_real.CommInitRankConfig, "ncclCommInitRankConfig");
  Resolve(&g_real.CommInitAll, "ncclCommInitAll");
  Resolve(&g_real.CommInitRankScalable, "ncclCommInitRankScalable");
  Resolve(&g_real.CommSplit, "ncclCommSplit");
  Resolve(&g_real.CommShrink, "ncclCommShrink");
  Resolve(&g_real.CommFinalize, "ncclCommFinalize");
  Resolve(&g_real.CommDestroy, "ncclCommDestroy");
  Resolve(&g_real.CommAbort, "ncclCommAbort");
  Resolve(&g_real.CommCount, "ncclCommCount");
  Resolve(&g_real.CommUserRank, "ncclCommUserRank");
  Resolve(&g_real.CommCuDevice, "ncclCommCuDevice");
  Resolve(&g_real.AllReduce, "ncclAllReduce");
  Resolve(&g_real.Broadcast, "ncclBroadcast");
  Resolve(&g_real.Bcast, "ncclBcast");
  Resolve(&g_real.Reduce, "ncclReduce");
  Resolve(&g_real.AllGather, "ncclAllGather");
  Resolve(&g_real.ReduceScatter, "ncclReduceScatter");
  // Newer than some deployed libraries: may stay null; the wrapper then reports
  // ncclInvalidUsage exactly as a link against that library would have failed.
  Resolve(&g_real.AlltoAll, "ncclAlltoAll");
  Resolve(&g_real.Gather, "ncclGather");
  Resolve(&g_real.Scatter, "ncclScatter");
  Resolve(&g_real.Send, "ncclSend");
  Resolve(&g_real.Recv, "ncclRecv");
  Resolve(&g_real.GroupStart, "ncclGroupStart");
  Resolve(&g_real.GroupEnd, "ncclGroupEnd");
  Resolve(&g_real.CommRevoke, "ncclCommRevoke");              // 2.28
  Resolve(&g_real.GroupSimulateEnd, "ncclGroupSimulateEnd");  // 2.22
}

inline const RealNccl& Real() {
  pthread_once(&g_resolve_once, ResolveAll);  // one acquire load once initialised
  return g_real;
}

// ---------------------------------------------------------------- ring creation

// 0: not created, 1: creating, 2: done (ring or forward-only).
int g_ring_state = 0;
Ring g_ring_storage;
Ring* g_ring = nullptr;  // published with release once mapped
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;  // creation paths only

int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < -1 || x > (1l << 30)) return fallback;
  return static_cast<int>(x);
}

// Records why this process runs without a ring, where the agent looks for it: a small
// marker file "<dir>/peregrine-nccl-r<RANK>-p<PID>.unavailable" holding one line
// "<step>: <strerror>" (best effort: on a full file system the marker may be empty or
// missing), and one line on stderr. Creation path only.
void ReportRingUnavailable(const char* dir, const char* rank_text, int pid, const char* step,
                           int err) {
  char reason[192];
  if (err != 0) {
    snprintf(reason, sizeof(reason), "%s: %s", step, strerror(err));
  } else {
    snprintf(reason, sizeof(reason), "%s", step);
  }
  fprintf(stderr, "peregrine-nccl: no ring for pid %d (%s); NCCL calls are forwarded unrecorded\n",
          pid, reason);
  if (dir == nullptr || *dir == '\0') return;
  char path[512];
  snprintf(path, sizeof(path), "%s/peregrine-nccl-r%s-p%d.unavailable", dir, rank_text, pid);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const size_t n = strlen(reason);
  if (write(fd, reason, n) != static_cast<ssize_t>(n)) {
    // Nothing more to do: the agent reports an unreadable reason.
  }
  close(fd);
}

// Creates and maps the ring. Every page is reserved (posix_fallocate) and mapped
// populated (MAP_POPULATE) before the first record, so a full or size-limited file
// system makes the hook forward-only here, at creation, instead of raising SIGBUS in a
// later NCCL call, and the hot path never takes a first-touch page fault.
void CreateRing() {
  if (EnvInt("PEREGRINE_NCCL_DISABLE", 0) == 1) return;
  long cap = EnvInt("PEREGRINE_NCCL_RING_CAPACITY", nccl_ring::kDefaultCapacity);
  if (!nccl_ring::ValidCapacity(static_cast<uint64_t>(cap))) cap = nccl_ring::kDefaultCapacity;
  const uint32_t capacity = static_cast<uint32_t>(cap);
  const int rank = EnvInt("RANK", -1);
  const int local_rank = EnvInt("LOCAL_RANK", -1);
  const pid_t pid = getpid();
  char rank_text[16];
  if (rank >= 0) {
    snprintf(rank_text, sizeof(rank_text), "%d", rank);
  } else {
    snprintf(rank_text, sizeof(rank_text), "x");
  }
  const size_t bytes = nccl_ring::RingBytes(capacity);
  int fd = -1;
  const char* dir = getenv("PEREGRINE_NCCL_RING_DIR");
  const bool in_dir = dir != nullptr && *dir != '\0';
  const char* report_dir = in_dir ? dir : "/dev/shm";
  char path[512];
  // A file larger than RLIMIT_FSIZE would raise SIGXFSZ (default: terminate) in
  // ftruncate / posix_fallocate: check first, never let the ring kill training.
  rlimit fsize;
  if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(fsize.rlim_cur) < bytes) {
    ReportRingUnavailable(report_dir, rank_text, static_cast<int>(pid),
                          "ring larger than RLIMIT_FSIZE", 0);
    return;
  }
  if (in_dir) {
    snprintf(path, sizeof(path), "%s/peregrine-nccl-r%s-p%d.ring", dir, rank_text,
             static_cast<int>(pid));
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  } else {
    snprintf(path, sizeof(path), "/peregrine-nccl-r%s-p%d", rank_text,
             static_cast<int>(pid));
    shm_unlink(path);  // a stale object of a recycled pid
    fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    ReportRingUnavailable(report_dir, rank_text, static_cast<int>(pid), "create", errno);
    return;
  }
  auto fail = [&](const char* step, int err) {
    close(fd);
    if (in_dir) {
      unlink(path);
    } else {
      shm_unlink(path);
    }
    ReportRingUnavailable(report_dir, rank_text, static_cast<int>(pid), step, err);
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    fail("ftruncate", errno);
    return;
  }
  // posix_fallocate returns the error number (it does not set errno).
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    fail("posix_fallocate", err);
    return;
  }
  void* base =
      mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    fail("mmap", errno);
    return;
  }
  close(fd);
  nccl_ring::InitRing(base, capacity, static_cast<int32_t>(pid), rank, local_rank,
                      MonotonicNs());
  RingHeader* h = static_cast<RingHeader*>(base);
  const RealNccl& real = Real();
  Dl_info info;
  if (real.AllReduce != nullptr &&
      dladdr(reinterpret_cast<void*>(real.AllReduce), &info) != 0 &&
      info.dli_fname != nullptr) {
    snprintf(h->lib_path, sizeof(h->lib_path), "%s", info.dli_fname);
  }
  int version = 0;
  if (real.GetVersion != nullptr && real.GetVersion(&version) == ncclSuccess) {
    StoreRelaxed(&h->nccl_version, static_cast<int32_t>(version));
  }
  // Start with profiling on (the agent can switch it at any time).
  if (EnvInt("PEREGRINE_NCCL_PROFILING", 0) == 1) StoreRelease(&h->profiling, 1u);
  // Start trapped: the first call waits until the agent releases it.
  if (EnvInt("PEREGRINE_NCCL_TRAP", 0) == 1) StoreRelease(&h->trap, 1u);
  g_ring_storage.header = h;
  g_ring_storage.slots = nccl_ring::Records(base);
}

Ring* SlowRing() {
  int expected = 0;
  if (__atomic_compare_exchange_n(&g_ring_state, &expected, 1, false, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE)) {
    CreateRing();
    if (g_ring_storage.header != nullptr) StoreRelease(&g_ring, &g_ring_storage);
    StoreRelease(&g_ring_state, 2);
  } else {
    // Another thread is creating it: wait (first call of the process only).
    while (LoadAcquire(&g_ring_state) == 1) sched_yield();
  }
  return LoadAcquire(&g_ring);
}

inline Ring* GetRing() {
  Ring* r = LoadAcquire(&g_ring);
  if (PEREGRINE_LIKELY(r != nullptr)) return r;
  if (LoadAcquire(&g_ring_state) == 2) return nullptr;
  return SlowRing();
}

// ---------------------------------------------------------------- communicator map

constexpr uint32_t kMapCapacity = 1024;  // pointer-keyed, open addressing

struct LocalComm {
  void* key;            // the ncclComm_t; published with release after the fields
  bool live;
  bool query_pending;   // rank/nranks still to be asked (non-blocking creation)
  uint64_t comm_id;
  int32_t rank;
  int32_t nranks;
  uint64_t calls;       // per-communicator call number (single caller at a time per NCCL)
  uint64_t split_seq;   // splits of this communicator so far
  uint64_t shrink_seq;  // shrinks of this communicator so far
  int32_t table_index;  // CommSlot index in the ring, -1 none
};

LocalComm g_comms[kMapCapacity];

inline uint32_t PointerHash(const void* p) {
  uint64_t x = reinterpret_cast<uintptr_t>(p);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

void RetryQuery(LocalComm* c);

inline LocalComm* FindComm(const void* comm) {
  if (comm == nullptr) return nullptr;
  const uint32_t h = PointerHash(comm);
  for (uint32_t i = 0; i < kMapCapacity; ++i) {
    LocalComm* e = &g_comms[(h + i) & (kMapCapacity - 1)];
    void* k = LoadAcquire(&e->key);
    if (k == comm) {
      if (PEREGRINE_UNLIKELY(LoadRelaxed(&e->query_pending))) RetryQuery(e);
      return e;
    }
    if (k == nullptr) return nullptr;
  }
  return nullptr;
}

// Under g_mutex. Reuses the entry of the same pointer (a destroyed communicator whose
// address came back) or takes the first empty / dead entry of the probe sequence.
LocalComm* InsertCommLocked(void* comm) {
  const uint32_t h = PointerHash(comm);
  LocalComm* dead = nullptr;
  for (uint32_t i = 0; i < kMapCapacity; ++i) {
    LocalComm* e = &g_comms[(h + i) & (kMapCapacity - 1)];
    void* k = e->key;
    if (k == comm) return e;
    if (k == nullptr) return dead != nullptr ? dead : e;
    if (dead == nullptr && !e->live) dead = e;
  }
  return dead;
}

// Writes (or rewrites) the ring's CommSlot of `c`. Under g_mutex.
void PublishCommLocked(LocalComm* c, uint64_t parent_id, int32_t color, int32_t key,
                       uint8_t created_by, bool destroyed, void* comm) {
  Ring* r = GetRing();
  if (r == nullptr) return;
  RingHeader* h = r->header;
  if (c->table_index < 0) {
    const uint32_t n = LoadRelaxed(&h->comm_count);
    if (n >= h->comm_capacity) {
      __atomic_fetch_add(&h->comm_overflow, 1, __ATOMIC_RELAXED);
      return;
    }
    c->table_index = static_cast<int32_t>(n);
    StoreRelease(&h->comm_count, n + 1);
  }
  CommSlot* s = &nccl_ring::CommTable(h)[c->table_index];
  const uint64_t state = LoadRelaxed(&s->state);
  StoreRelaxed(&s->state, (state | 1) == state ? state + 2 : state + 1);  // odd
  __atomic_thread_fence(__ATOMIC_RELEASE);
  if (created_by != nccl_ring::kOpNone) {
    StoreRelaxed(&s->comm_id, c->comm_id);
    StoreRelaxed(&s->parent_id, parent_id);
    StoreRelaxed(&s->created_ns, MonotonicNs());
    StoreRelaxed(&s->destroyed_ns, uint64_t{0});
    StoreRelaxed(&s->global_rank, h->global_rank);
    StoreRelaxed(&s->color, color);
    StoreRelaxed(&s->key, key);
    StoreRelaxed(&s->created_by, created_by);
    int device = -1;
    const RealNccl& real = Real();
    if (comm == nullptr || real.CommCuDevice == nullptr ||
        real.CommCuDevice(static_cast<ncclComm_t>(comm), &device) != ncclSuccess) {
      device = -1;
    }
    StoreRelaxed(&s->device, static_cast<int32_t>(device));
  }
  StoreRelaxed(&s->rank, c->rank);
  StoreRelaxed(&s->nranks, c->nranks);
  if (destroyed) StoreRelaxed(&s->destroyed_ns, MonotonicNs());
  const uint64_t odd = LoadRelaxed(&s->state);
  StoreRelease(&s->state, odd + 1);  // even: stable
}

// Asks the real library for rank and size; false while the communicator is still
// being created (non-blocking mode).
bool QueryRankLocked(LocalComm* c, void* comm) {
  const RealNccl& real = Real();
  int rank = -1, count = -1;
  if (real.CommUserRank == nullptr || real.CommCount == nullptr) return false;
  if (real.CommUserRank(static_cast<ncclComm_t>(comm), &rank) != ncclSuccess) return false;
  if (real.CommCount(static_cast<ncclComm_t>(comm), &count) != ncclSuccess) return false;
  c->rank = rank;
  c->nranks = count;
  return true;
}

void RetryQuery(LocalComm* c) {
  pthread_mutex_lock(&g_mutex);
  if (c->query_pending && QueryRankLocked(c, c->key)) {
    StoreRelaxed(&c->query_pending, false);
    PublishCommLocked(c, 0, 0, 0, nccl_ring::kOpNone, false, nullptr);
  }
  pthread_mutex_unlock(&g_mutex);
}

// Registers a communicator created by this process. rank/nranks < 0: ask the library.
void RegisterComm(void* comm, uint64_t comm_id, uint64_t parent_id, int32_t rank,
                  int32_t nranks, int32_t color, int32_t key, uint8_t created_by) {
  if (comm == nullptr || GetRing() == nullptr) return;
  pthread_mutex_lock(&g_mutex);
  LocalComm* c = InsertCommLocked(comm);
  if (c != nullptr) {
    c->comm_id = comm_id;
    c->rank = rank;
    c->nranks = nranks;
    c->calls = 0;
    c->split_seq = 0;
    c->shrink_seq = 0;
    c->table_index = -1;
    c->live = true;
    bool pending = false;
    if (rank < 0 || nranks < 0) pending = !QueryRankLocked(c, comm);
    StoreRelaxed(&c->query_pending, pending);
    StoreRelease(&c->key, comm);
    PublishCommLocked(c, parent_id, color, key, created_by, false, comm);
  }
  pthread_mutex_unlock(&g_mutex);
}

// True when a creation call left a communicator: created, or still being created
// (non-blocking mode).
inline bool Created(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// The ids of the communicator a split or shrink of `comm` creates: its parent's id, and the
// child's, which every member derives alike from the parent's id, `salt` and the parent's
// count of such calls (`counter`, counted even when there is no child). Zeros when `comm` is
// not known (no ring); child 0 when `has_child` is false.
struct ChildIds {
  uint64_t parent = 0;
  uint64_t child = 0;
};
ChildIds ChildOf(void* comm, uint64_t LocalComm::*counter, bool has_child, int32_t salt) {
  ChildIds ids;
  LocalComm* parent = GetRing() != nullptr ? FindComm(comm) : nullptr;
  if (parent == nullptr) return ids;
  ids.parent = parent->comm_id;
  const uint64_t n = (parent->*counter)++;
  if (has_child) ids.child = nccl_ring::SplitCommId(ids.parent, salt, n);
  return ids;
}

void MarkDestroyed(void* comm) {
  if (comm == nullptr) return;
  pthread_mutex_lock(&g_mutex);
  LocalComm* c = nullptr;
  const uint32_t h = PointerHash(comm);
  for (uint32_t i = 0; i < kMapCapacity; ++i) {
    LocalComm* e = &g_comms[(h + i) & (kMapCapacity - 1)];
    if (e->key == comm) {
      c = e;
      break;
    }
    if (e->key == nullptr) break;
  }
  if (c != nullptr && c->live) {
    c->live = false;
    StoreRelaxed(&c->query_pending, false);
    PublishCommLocked(c, 0, 0, 0, nccl_ring::kOpNone, true, nullptr);
  }
  pthread_mutex_unlock(&g_mutex);
}

// ---------------------------------------------------------------- recording

__attribute__((tls_model("initial-exec"))) thread_local int t_group_depth = 0;
// Device timing of a whole group: events around the outermost group, on the stream of
// its first operation (inside a group NCCL launches nothing until ncclGroupEnd).
__attribute__((tls_model("initial-exec"))) thread_local int t_group_pair = -1;
__attribute__((tls_model("initial-exec"))) thread_local void* t_group_stream = nullptr;
__attribute__((tls_model("initial-exec"))) thread_local uint64_t t_group_comm = 0;

// Waits while trapped. Returns true if it waited. System calls are made here only.
__attribute__((noinline)) bool TrapWait(RingHeader* h) {
  const uint64_t epoch = LoadAcquire(&h->release_epoch);
  if (LoadAcquire(&h->trap) == 0) return false;
  __atomic_fetch_add(&h->trapped_now, 1, __ATOMIC_ACQ_REL);
  __atomic_fetch_add(&h->trapped_total, 1, __ATOMIC_RELAXED);
  long sleep_ns = 50000;
  for (uint32_t i = 0;
       LoadAcquire(&h->trap) != 0 && LoadAcquire(&h->release_epoch) == epoch; ++i) {
    if (i < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else if (i < 128) {
      sched_yield();
    } else {
      timespec ts{0, sleep_ns};
      nanosleep(&ts, nullptr);
      if (sleep_ns < 2000000) sleep_ns *= 2;
    }
  }
  __atomic_fetch_sub(&h->trapped_now, 1, __ATOMIC_ACQ_REL);
  return true;
}

struct Call {
  Ring* ring = nullptr;
  uint64_t seq = 0;
  uint64_t t0 = 0;
  uint64_t comm_id = 0;
  int32_t rank = -1;
  int32_t nranks = -1;
  int cuda_pair = -1;
  bool profiled = false;
  uint8_t op = 0;
};

// Appends the entry record of a call. `comm` may be null (no communicator).
// Creation calls have no communicator yet: they pass the id, rank and size it will get.
inline void Enter(Call* call, uint8_t op, const void* comm, uint64_t count, int datatype,
                  int32_t peer, uint64_t value = 0, uint64_t new_comm_id = 0,
                  int32_t new_rank = -1, int32_t new_nranks = -1) {
  Ring* r = GetRing();
  if (PEREGRINE_UNLIKELY(r == nullptr)) return;
  RingHeader* h = r->header;
  uint8_t flags = 0;
  if (PEREGRINE_UNLIKELY(LoadRelaxed(&h->trap) != 0)) {
    if (TrapWait(h)) flags |= nccl_ring::kFlagTrapped;
  }
  RecordPayload p;
  p.time_ns = MonotonicNs();
  LocalComm* c = FindComm(comm);
  if (c != nullptr) {
    p.comm_id = c->comm_id;
    p.rank = c->rank;
    p.nranks = c->nranks;
    const uint64_t n = LoadRelaxed(&c->calls);
    StoreRelaxed(&c->calls, n + 1);
    p.link = n;
  } else {
    p.comm_id = new_comm_id;
    p.rank = new_rank;
    p.nranks = new_nranks;
    p.link = 0;
  }
  p.count = count;
  p.value = value;
  p.peer = peer;
  p.op = op;
  p.datatype = static_cast<uint8_t>(datatype);
  if (t_group_depth > 0) flags |= nccl_ring::kFlagInGroup;
  const bool profiled = LoadRelaxed(&h->profiling) != 0;
  if (PEREGRINE_UNLIKELY(profiled)) flags |= nccl_ring::kFlagProfiled;
  p.flags = flags;
  p.result = 0;
  call->ring = r;
  call->op = op;
  call->comm_id = p.comm_id;
  call->rank = p.rank;
  call->nranks = p.nranks;
  call->seq = AppendRecord(h, r->slots, p);
  if (PEREGRINE_UNLIKELY(profiled)) {
    call->profiled = true;
    call->t0 = p.time_ns;
  }
}

// For traffic calls: starts device timing when profiling with CUDA.
inline void BeginDevice(Call* call, void* stream) {
  if (PEREGRINE_LIKELY(!call->profiled) || !CudaTimingReady()) return;
  if (t_group_depth > 0) {
    if (t_group_pair < 0) {
      t_group_pair = CudaTimingBegin(stream);
      t_group_stream = stream;
      t_group_comm = call->comm_id;
    }
    return;
  }
  call->cuda_pair = CudaTimingBegin(stream);
}

__attribute__((noinline)) void ExitProfiled(Call* call, ncclResult_t result, void* stream) {
  const uint64_t t1 = MonotonicNs();
  if (call->cuda_pair >= 0) {
    CudaTimingEnd(call->cuda_pair, stream, call->seq, call->comm_id, call->rank,
                  call->nranks, call->op);
  }
  RecordPayload p;
  p.time_ns = t1;
  p.comm_id = call->comm_id;
  p.count = 0;
  p.link = call->seq;
  p.value = t1 - call->t0;
  p.rank = call->rank;
  p.nranks = call->nranks;
  p.peer = -1;
  p.op = nccl_ring::kOpHostExit;
  p.datatype = 0;
  p.flags = 0;
  p.result = static_cast<int8_t>(result);
  AppendRecord(call->ring->header, call->ring->slots, p);
}

inline void Exit(Call* call, ncclResult_t result, void* stream = nullptr) {
  if (PEREGRINE_UNLIKELY(call->profiled)) ExitProfiled(call, result, stream);
}

// A call that moves no data: records its entry (op on `comm`, count and value as given),
// runs `real` (the real function, and what the hook does around it) and records its exit;
// returns the real function's result unchanged.
template <typename RealCall>
inline ncclResult_t RecordCall(uint8_t op, const void* comm, uint64_t count, uint64_t value, RealCall real) {
  Call call;
  Enter(&call, op, comm, count, 0, -1, value);
  const ncclResult_t r = real();
  Exit(&call, r);
  return r;
}

void AtForkChild() {
  // The child must not write into its parent's ring: it creates its own at its first
  // NCCL call. Communicators do not survive fork either.
  g_ring = nullptr;
  g_ring_storage = Ring{};
  g_ring_state = 0;
  pthread_mutex_init(&g_mutex, nullptr);
  memset(g_comms, 0, sizeof(g_comms));
  t_group_depth = 0;
  t_group_pair = -1;
  CudaTimingResetAfterFork();
}

__attribute__((constructor)) void InstallForkHandler() {
  pthread_atfork(nullptr, nullptr, AtForkChild);
}

uint64_t g_initall_seq = 0;

}  // namespace

Ring* CurrentRing() { return GetRing(); }

}  // namespace peregrine::nccl_hook

// ==================================================================== exported ABI

using peregrine::nccl_hook::Call;
using peregrine::nccl_hook::Enter;
using peregrine::nccl_hook::Exit;
using peregrine::nccl_hook::Real;
using peregrine::nccl_hook::RecordCall;
namespace ring = peregrine::nccl_ring;
namespace hook = peregrine::nccl_hook;

PEREGRINE_EXPORT ncclResult_t ncclGetVersion(int* version) {
  const auto& real = Real();
  if (real.GetVersion == nullptr) return ncclSystemError;
  return real.GetVersion(version);
}

PEREGRINE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  const auto& real = Real();
  if (real.GetUniqueId == nullptr) return ncclSystemError;
  const uint64_t t0 = hook::MonotonicNs();
  const ncclResult_t r = real.GetUniqueId(unique_id);
  hook::Ring* ring = hook::GetRing();
  if (r == ncclSuccess && unique_id != nullptr && ring != nullptr) {
    ring::RecordPayload p{};
    p.time_ns = t0;
    p.comm_id = ring::HashBytes(unique_id->internal, sizeof(unique_id->internal));
    p.rank = -1;
    p.nranks = -1;
    p.peer = -1;
    p.op = ring::kOpGetUniqueId;
    ring::AppendRecord(ring->header, ring->slots, p);
  }
  return r;
}

namespace {

ncclResult_t InitRankCommon(uint8_t op, ncclComm_t* comm, int nranks, ncclUniqueId id,
                            int rank, ncclConfig_t* config) {
  const auto& real = Real();
  auto fn_plain = real.CommInitRank;
  auto fn_config = real.CommInitRankConfig;
  if ((op == ring::kOpCommInitRank && fn_plain == nullptr) ||
      (op == ring::kOpCommInitRankConfig && fn_config == nullptr)) {
    return ncclSystemError;
  }
  const uint64_t comm_id = ring::HashBytes(id.internal, sizeof(id.internal));
  Call call;
  Enter(&call, op, nullptr, 0, 0, -1, 0, comm_id, rank, nranks);
  const ncclResult_t r = op == ring::kOpCommInitRank
                             ? fn_plain(comm, nranks, id, rank)
                             : fn_config(comm, nranks, id, rank, config);
  if (hook::Created(r) && comm != nullptr) {
    hook::RegisterComm(*comm, comm_id, 0, rank, nranks, -1, -1, op);
  }
  Exit(&call, r);
  return r;
}

}  // namespace

PEREGRINE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks,
                                               ncclUniqueId comm_id, int rank) {
  return InitRankCommon(ring::kOpCommInitRank, comm, nranks, comm_id, rank, nullptr);
}

PEREGRINE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId comm_id, int rank,
                                                     ncclConfig_t* config) {
  return InitRankCommon(ring::kOpCommInitRankConfig, comm, nranks, comm_id, rank, config);
}

PEREGRINE_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks,
                                                       int myrank, int n_id,
                                                       ncclUniqueId* comm_ids,
                                                       ncclConfig_t* config) {
  const auto& real = Real();
  if (real.CommInitRankScalable == nullptr) return ncclInvalidUsage;
  uint64_t comm_id = 0;
  if (comm_ids != nullptr && n_id > 0) {
    comm_id = ring::HashBytes(comm_ids, sizeof(ncclUniqueId) * static_cast<size_t>(n_id));
  }
  Call call;
  Enter(&call, ring::kOpCommInitRankScalable, nullptr, static_cast<uint64_t>(n_id), 0, -1,
        0, comm_id, myrank, nranks);
  const ncclResult_t r = real.CommInitRankScalable(newcomm, nranks, myrank, n_id, comm_ids,
                                                   config);
  if (hook::Created(r) && newcomm != nullptr) {
    hook::RegisterComm(*newcomm, comm_id, 0, myrank, nranks, -1, -1,
                       ring::kOpCommInitRankScalable);
  }
  Exit(&call, r);
  return r;
}

PEREGRINE_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev,
                                              const int* devlist) {
  const auto& real = Real();
  if (real.CommInitAll == nullptr) return ncclSystemError;
  // One process holds every rank, so any id unique to this process and call works.
  uint64_t key[3] = {static_cast<uint64_t>(getpid()), hook::MonotonicNs(),
                     __atomic_fetch_add(&hook::g_initall_seq, 1, __ATOMIC_RELAXED)};
  const uint64_t comm_id = ring::HashBytes(key, sizeof(key), /*seed=*/0x4941u);
  Call call;
  Enter(&call, ring::kOpCommInitAll, nullptr, 0, 0, -1, 0, comm_id, -1, ndev);
  const ncclResult_t r = real.CommInitAll(comms, ndev, devlist);
  if (r == ncclSuccess && comms != nullptr) {
    for (int i = 0; i < ndev; ++i) {
      hook::RegisterComm(comms[i], comm_id, 0, i, ndev, -1, -1, ring::kOpCommInitAll);
    }
  }
  Exit(&call, r);
  return r;
}

PEREGRINE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                            ncclComm_t* newcomm, ncclConfig_t* config) {
  const auto& real = Real();
  if (real.CommSplit == nullptr) return ncclSystemError;
  // Every member of the parent calls split, in the same order: the counter agrees.
  const hook::ChildIds ids =
      hook::ChildOf(comm, &hook::LocalComm::split_seq, color != NCCL_SPLIT_NOCOLOR, color);
  Call call;
  Enter(&call, ring::kOpCommSplit, comm, static_cast<uint64_t>(static_cast<uint32_t>(key)),
        0, color, ids.child);
  const ncclResult_t r = real.CommSplit(comm, color, key, newcomm, config);
  if (hook::Created(r) && newcomm != nullptr && ids.child != 0) {
    hook::RegisterComm(*newcomm, ids.child, ids.parent, -1, -1, color, key, ring::kOpCommSplit);
  }
  Exit(&call, r);
  return r;
}

PEREGRINE_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* exclude_ranks,
                                             int exclude_count, ncclComm_t* newcomm,
                                             ncclConfig_t* config, int shrink_flags) {
  const auto& real = Real();
  if (real.CommShrink == nullptr) return ncclInvalidUsage;
  // Excluded ranks do not call shrink, so shrinks get their own counter; the
  // excluded list is the same on every caller.
  const uint64_t h = ring::HashBytes(exclude_ranks,
                                     exclude_ranks != nullptr && exclude_count > 0
                                         ? sizeof(int) * static_cast<size_t>(exclude_count)
                                         : 0,
                                     /*seed=*/0x5348u);
  const hook::ChildIds ids =
      hook::ChildOf(comm, &hook::LocalComm::shrink_seq, /*has_child=*/true, static_cast<int32_t>(h));
  Call call;
  Enter(&call, ring::kOpCommShrink, comm, static_cast<uint64_t>(exclude_count), 0, -1,
        ids.child);
  const ncclResult_t r =
      real.CommShrink(comm, exclude_ranks, exclude_count, newcomm, config, shrink_flags);
  if (hook::Created(r) && newcomm != nullptr && ids.child != 0) {
    hook::RegisterComm(*newcomm, ids.child, ids.parent, -1, -1, -1, -1, ring::kOpCommShrink);
  }
  Exit(&call, r);
  return r;
}

PEREGRINE_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  const auto& real = Real();
  if (real.CommFinalize == nullptr) return ncclInvalidUsage;
  return RecordCall(ring::kOpCommFinalize, comm, 0, 0, [&] { return real.CommFinalize(comm); });
}

PEREGRINE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  const auto& real = Real();
  if (real.CommDestroy == nullptr) return ncclSystemError;
  return RecordCall(ring::kOpCommDestroy, comm, 0, 0, [&] {
    hook::MarkDestroyed(comm);
    return real.CommDestroy(comm);
  });
}

PEREGRINE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  const auto& real = Real();
  if (real.CommAbort == nullptr) return ncclSystemError;
  return RecordCall(ring::kOpCommAbort, comm, 0, 0, [&] {
    hook::MarkDestroyed(comm);
    return real.CommAbort(comm);
  });
}

#define PEREGRINE_TRAFFIC(op, fn, comm, count, datatype, peer, stream, call_args) \
  const auto& real = Real();                                                      \
  if (real.fn == nullptr) return ncclInvalidUsage;                                \
  Call call;                                                                      \
  Enter(&call, op, comm, count, datatype, peer);                                  \
  hook::BeginDevice(&call, stream);                                               \
  const ncclResult_t r = real.fn call_args;                                       \
  Exit(&call, r, stream);                                                         \
  return r;

PEREGRINE_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff,
                                            size_t count, ncclDataType_t datatype,
                                            ncclRedOp_t op, ncclComm_t comm,
                                            cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpAllReduce, AllReduce, comm, count, datatype, -1, stream,
                    (sendbuff, recvbuff, count, datatype, op, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff,
                                            size_t count, ncclDataType_t datatype, int root,
                                            ncclComm_t comm, cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpBroadcast, Broadcast, comm, count, datatype, root, stream,
                    (sendbuff, recvbuff, count, datatype, root, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype,
                                        int root, ncclComm_t comm, cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpBcast, Bcast, comm, count, datatype, root, stream,
                    (buff, count, datatype, root, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, int root,
                                         ncclComm_t comm, cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpReduce, Reduce, comm, count, datatype, root, stream,
                    (sendbuff, recvbuff, count, datatype, op, root, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff,
                                            size_t sendcount, ncclDataType_t datatype,
                                            ncclComm_t comm, cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpAllGather, AllGather, comm, sendcount, datatype, -1, stream,
                    (sendbuff, recvbuff, sendcount, datatype, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                size_t recvcount, ncclDataType_t datatype,
                                                ncclRedOp_t op, ncclComm_t comm,
                                                cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpReduceScatter, ReduceScatter, comm, recvcount, datatype, -1,
                    stream, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff,
                                           size_t count, ncclDataType_t datatype,
                                           ncclComm_t comm, cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpAlltoAll, AlltoAll, comm, count, datatype, -1, stream,
                    (sendbuff, recvbuff, count, datatype, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpGather, Gather, comm, count, datatype, root, stream,
                    (sendbuff, recvbuff, count, datatype, root, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff,
                                          size_t count, ncclDataType_t datatype, int root,
                                          ncclComm_t comm, cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpScatter, Scatter, comm, count, datatype, root, stream,
                    (sendbuff, recvbuff, count, datatype, root, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count,
                                       ncclDataType_t datatype, int peer, ncclComm_t comm,
                                       cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpSend, Send, comm, count, datatype, peer, stream,
                    (sendbuff, count, datatype, peer, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int peer, ncclComm_t comm, cudaStream_t stream) {
  PEREGRINE_TRAFFIC(ring::kOpRecv, Recv, comm, count, datatype, peer, stream,
                    (recvbuff, count, datatype, peer, comm, stream))
}

PEREGRINE_EXPORT ncclResult_t ncclGroupStart() {
  const auto& real = Real();
  if (real.GroupStart == nullptr) return ncclSystemError;
  return RecordCall(ring::kOpGroupStart, nullptr, 0, 0, [&] {
    const ncclResult_t r = real.GroupStart();
    if (r == ncclSuccess) ++hook::t_group_depth;
    return r;
  });
}

PEREGRINE_EXPORT ncclResult_t ncclGroupEnd() {
  const auto& real = Real();
  if (real.GroupEnd == nullptr) return ncclSystemError;
  Call call;
  Enter(&call, ring::kOpGroupEnd, nullptr, 0, 0, -1, /*value=*/
        static_cast<uint64_t>(hook::t_group_depth));
  const ncclResult_t r = real.GroupEnd();
  if (hook::t_group_depth > 0) --hook::t_group_depth;
  void* stream = nullptr;
  if (hook::t_group_depth == 0 && hook::t_group_pair >= 0) {
    // The group launched its work: close the device timing opened at its first op.
    if (call.ring != nullptr) {
      hook::CudaTimingEnd(hook::t_group_pair, hook::t_group_stream, call.seq,
                          hook::t_group_comm, -1, -1, ring::kOpGroupEnd);
    }
    stream = hook::t_group_stream;
    hook::t_group_pair = -1;
    hook::t_group_stream = nullptr;
  }
  Exit(&call, r, stream);
  return r;
}

// Ends a group like ncclGroupEnd (NCCL's group depth drops) but launches nothing: the
// group's device timing, opened at its first operation, is abandoned, not recorded.
PEREGRINE_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* sim_info) {
  const auto& real = Real();
  if (real.GroupSimulateEnd == nullptr) return ncclInvalidUsage;
  return RecordCall(ring::kOpGroupSimulateEnd, nullptr, 0, static_cast<uint64_t>(hook::t_group_depth), [&] {
    const ncclResult_t r = real.GroupSimulateEnd(sim_info);
    if (hook::t_group_depth > 0) --hook::t_group_depth;
    if (hook::t_group_depth == 0 && hook::t_group_pair >= 0) {
      hook::CudaTimingCancel(hook::t_group_pair);
      hook::t_group_pair = -1;
      hook::t_group_stream = nullptr;
    }
    return r;
  });
}

// Stops the communicator's in-flight operations; the communicator stays (destroy,
// split and shrink may follow), so it is not marked destroyed.
PEREGRINE_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revoke_flags) {
  const auto& real = Real();
  if (real.CommRevoke == nullptr) return ncclInvalidUsage;
  return RecordCall(ring::kOpCommRevoke, comm, static_cast<uint64_t>(static_cast<uint32_t>(revoke_flags)), 0,
                    [&] { return real.CommRevoke(comm, revoke_flags); });
}
