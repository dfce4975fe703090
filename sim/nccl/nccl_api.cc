// The exported NCCL API of the stand-in (C linkage, the signatures of nccl.h).
//
// Bootstrap, like NCCL's: ncclGetUniqueId starts a root listener thread on 127.0.0.1 and
// writes its port (and a random nonce) into the id. Every rank's ncclCommInitRank opens its
// own listener, registers (rank, port, machine id, local rank) with the root, receives the
// table of all ranks and builds the full mesh. ncclCommSplit exchanges (color, key, port)
// over the parent communicator and builds the child's mesh without a root.
//
// Groups: between ncclGroupStart and ncclGroupEnd operations are queued per thread; at the
// outermost ncclGroupEnd each communicator's queue runs in order, consecutive send/recv
// operations as one concurrently progressed batch; several communicators in one group
// run on one thread each (as ncclCommInitAll users expect).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "sim/fault/fault_table.h"
#include "sim/nccl/comm.h"
#include "sim/nccl/reduce.h"
#include "sim/nccl/transport.h"

using peregrine::simnccl::P2pOp;

namespace peregrine::simnccl {
namespace {

constexpr uint64_t kIdMagic = 0x50524749444c3031ull;     // unique id
constexpr uint64_t kHelloMagic = 0x505247484c4f3031ull;  // rank -> root
constexpr uint64_t kMeshMagic = 0x5052474d53483031ull;   // rank -> rank

struct UniqueIdBody {
  uint64_t magic;
  uint64_t nonce;
  uint32_t addr;  // IPv4, host order (always 127.0.0.1 here)
  uint16_t port;
  uint16_t reserved;
  int32_t pid;
};
static_assert(sizeof(UniqueIdBody) <= NCCL_UNIQUE_ID_BYTES);

struct RootHello {
  uint64_t magic;
  uint64_t nonce;
  int32_t rank;
  int32_t nranks;
  int32_t machine_id;
  int32_t local_rank;
  uint16_t port;
  uint16_t reserved[3];
};

struct PeerEntry {
  int32_t machine_id;
  int32_t local_rank;
  uint16_t port;
  uint16_t reserved;
};

struct MeshHello {
  uint64_t magic;
  uint64_t comm_id;
  int32_t rank;
  int32_t reserved;
};

struct SplitInfo {
  int32_t color;
  int32_t key;
  uint16_t port;
  uint16_t reserved[3];
};

thread_local std::string tls_last_error;

ncclResult_t SetError(ncclResult_t code, const std::string& message) {
  tls_last_error = message;
  if (std::getenv("NCCL_DEBUG") != nullptr) {
    std::fprintf(stderr, "NCCL WARN [peregrine-sim] %s\n", message.c_str());
  }
  return code;
}

uint64_t RandomNonce() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ (static_cast<uint64_t>(getpid()) << 16) ^
         static_cast<uint64_t>(NowNs());
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void RootMain(int listen_fd, uint64_t nonce) {
  const int64_t deadline = OperationDeadline();
  int nranks = -1;
  int arrived = 0;
  std::vector<int> fds;
  std::vector<PeerEntry> table;
  std::string error;
  while (nranks < 0 || arrived < nranks) {
    int fd = AcceptBefore(listen_fd, deadline, &error);
    if (fd < 0) break;
    RootHello h{};
    ncclResult_t code;
    if (!ReadFully(fd, &h, sizeof(h), deadline, &code, &error) || h.magic != kHelloMagic ||
        h.nonce != nonce || h.nranks <= 0 || h.rank < 0 || h.rank >= h.nranks ||
        (nranks >= 0 && (h.nranks != nranks || fds[h.rank] >= 0))) {
      close(fd);  // the rank sees the connection close and fails its init
      continue;
    }
    if (nranks < 0) {
      nranks = h.nranks;
      fds.assign(nranks, -1);
      table.assign(nranks, PeerEntry{});
    }
    fds[h.rank] = fd;
    table[h.rank] = PeerEntry{h.machine_id, h.local_rank, h.port, 0};
    ++arrived;
  }
  if (nranks > 0 && arrived == nranks) {
    for (int fd : fds) {
      ncclResult_t code;
      WriteFully(fd, table.data(), table.size() * sizeof(PeerEntry), deadline, &code, &error);
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  close(listen_fd);
}

// Connects comm (rank, nranks, id, peers set) to every peer. Takes ownership of listen_fd.
ncclResult_t BuildMesh(ncclComm* c, const std::vector<uint16_t>& ports, int listen_fd) {
  const int64_t deadline = OperationDeadline();
  c->fds.assign(c->nranks, -1);
  std::string error;
  ncclResult_t code = ncclSuccess;
  auto fail = [&](ncclResult_t rc, const std::string& what) {
    close(listen_fd);
    for (int& fd : c->fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
    return SetError(rc, "rank " + std::to_string(c->rank) + ": " + what);
  };
  for (int j = 0; j < c->rank; ++j) {
    int fd = ConnectLoopback(ports[j], &error);
    if (fd < 0) return fail(ncclSystemError, "connecting to rank " + std::to_string(j) + ": " + error);
    c->fds[j] = fd;
    MeshHello h{kMeshMagic, c->id, c->rank, 0};
    if (!WriteFully(fd, &h, sizeof(h), deadline, &code, &error)) {
      return fail(code, "greeting rank " + std::to_string(j) + ": " + error);
    }
  }
  for (int k = c->rank + 1; k < c->nranks; ++k) {
    int fd = AcceptBefore(listen_fd, deadline, &error);
    if (fd < 0) return fail(ncclSystemError, "accepting peers: " + error);
    MeshHello h{};
    if (!ReadFully(fd, &h, sizeof(h), deadline, &code, &error)) {
      close(fd);
      return fail(code, "reading a peer greeting: " + error);
    }
    if (h.magic != kMeshMagic || h.comm_id != c->id || h.rank <= c->rank ||
        h.rank >= c->nranks || c->fds[h.rank] >= 0) {
      close(fd);
      return fail(ncclInternalError, "unexpected peer greeting (rank " + std::to_string(h.rank) + ")");
    }
    c->fds[h.rank] = fd;
  }
  close(listen_fd);
  return ncclSuccess;
}

ncclComm* ValidComm(ncclComm_t comm) {
  if (comm == nullptr || comm->magic != ncclComm::kMagic) return nullptr;
  return comm;
}

void DestroyComm(ncclComm* c) {
  for (int fd : c->fds) {
    if (fd >= 0) close(fd);
  }
  c->magic = 0;
  delete c;
}

// ---- Groups and operation dispatch ----

enum class OpKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSend, kRecv };

struct PendingOp {
  OpKind kind;
  ncclComm* comm;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root_or_peer;
};

thread_local int tls_group_depth = 0;
thread_local std::vector<PendingOp> tls_pending;

bool IsP2p(const PendingOp& op) { return op.kind == OpKind::kSend || op.kind == OpKind::kRecv; }

ncclResult_t RunCollective(const PendingOp& o) {
  switch (o.kind) {
    case OpKind::kAllReduce:
      return RunAllReduce(o.comm, o.sendbuff, o.recvbuff, o.count, o.type, o.op);
    case OpKind::kReduceScatter:
      return RunReduceScatter(o.comm, o.sendbuff, o.recvbuff, o.count, o.type, o.op);
    case OpKind::kAllGather:
      return RunAllGather(o.comm, o.sendbuff, o.recvbuff, o.count, o.type);
    case OpKind::kBroadcast:
      return RunBroadcast(o.comm, o.sendbuff, o.recvbuff, o.count, o.type, o.root_or_peer);
    case OpKind::kReduce:
      return RunReduce(o.comm, o.sendbuff, o.recvbuff, o.count, o.type, o.op, o.root_or_peer);
    default:
      return ncclInternalError;
  }
}

// Runs one communicator's operations in order.
ncclResult_t ExecuteOnComm(const std::vector<PendingOp>& ops) {
  if (ops.empty()) return ncclSuccess;
  ncclComm* c = ops.front().comm;
  if (c->broken) return SetError(c->error, c->last_error);
  RefreshFaults(c);
  size_t i = 0;
  while (i < ops.size()) {
    ncclResult_t r;
    if (IsP2p(ops[i])) {
      std::vector<P2pOp> batch;
      for (; i < ops.size() && IsP2p(ops[i]); ++i) {
        const PendingOp& o = ops[i];
        P2pOp p;
        p.send = o.kind == OpKind::kSend;
        p.peer = o.root_or_peer;
        p.buffer = p.send ? const_cast<void*>(o.sendbuff) : o.recvbuff;
        p.bytes = o.count * DataTypeSize(o.type);
        p.type = o.type;
        p.count = o.count;
        batch.push_back(p);
      }
      r = RunP2p(c, batch);
    } else {
      r = RunCollective(ops[i]);
      ++i;
    }
    if (r != ncclSuccess) return SetError(r, c->last_error);
  }
  return ncclSuccess;
}

ncclResult_t ExecuteGroup(std::vector<PendingOp> ops) {
  std::vector<ncclComm*> order;
  std::vector<std::vector<PendingOp>> per_comm;
  for (const PendingOp& op : ops) {
    size_t k = std::find(order.begin(), order.end(), op.comm) - order.begin();
    if (k == order.size()) {
      order.push_back(op.comm);
      per_comm.emplace_back();
    }
    per_comm[k].push_back(op);
  }
  if (per_comm.empty()) return ncclSuccess;
  std::vector<ncclResult_t> results(per_comm.size(), ncclSuccess);
  std::vector<std::string> errors(per_comm.size());
  std::vector<std::thread> threads;
  for (size_t k = 1; k < per_comm.size(); ++k) {
    threads.emplace_back([&, k] {
      results[k] = ExecuteOnComm(per_comm[k]);
      errors[k] = tls_last_error;
    });
  }
  results[0] = ExecuteOnComm(per_comm[0]);
  errors[0] = tls_last_error;
  for (auto& t : threads) t.join();
  for (size_t k = 0; k < results.size(); ++k) {
    if (results[k] != ncclSuccess) return SetError(results[k], errors[k]);
  }
  return ncclSuccess;
}

ncclResult_t Submit(const PendingOp& op) {
  if (tls_group_depth > 0) {
    tls_pending.push_back(op);
    return ncclSuccess;
  }
  return ExecuteOnComm({op});
}

// Argument checks shared by every operation; records the error for ncclGetLastError.
ncclResult_t CheckOp(ncclComm_t comm, const void* a, const void* b, size_t count,
                     ncclDataType_t type, const char* name) {
  if (ValidComm(comm) == nullptr) {
    return SetError(ncclInvalidArgument, std::string(name) + ": invalid communicator");
  }
  if (DataTypeSize(type) == 0) {
    return SetError(ncclInvalidArgument,
                    std::string(name) + ": unsupported datatype " + std::to_string(type));
  }
  if (count > 0 && (a == nullptr || b == nullptr)) {
    return SetError(ncclInvalidArgument, std::string(name) + ": null buffer");
  }
  if (comm->broken) return SetError(comm->error, comm->last_error);
  return ncclSuccess;
}

ncclResult_t CheckRedOp(ncclRedOp_t op, const char* name) {
  if (!IsSupportedOp(op)) {
    return SetError(ncclInvalidArgument,
                    std::string(name) + ": unsupported reduction op " + std::to_string(op));
  }
  return ncclSuccess;
}

// A reduction whose two buffers hold data on every rank (all-reduce, reduce-scatter): the
// checks of every operation and of its reduction op, then Submit.
ncclResult_t SubmitReduction(const PendingOp& op, const char* name) {
  ncclResult_t r = CheckOp(op.comm, op.sendbuff, op.recvbuff, op.count, op.type, name);
  if (r == ncclSuccess) r = CheckRedOp(op.op, name);
  if (r != ncclSuccess) return r;
  return Submit(op);
}

ncclResult_t CheckRank(ncclComm_t comm, int r, const char* name, const char* what) {
  if (r < 0 || r >= comm->nranks) {
    return SetError(ncclInvalidArgument, std::string(name) + ": " + what + " " +
                                             std::to_string(r) + " out of range [0, " +
                                             std::to_string(comm->nranks) + ")");
  }
  return ncclSuccess;
}

ncclResult_t InitRankImpl(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank) {
  if (out == nullptr) return SetError(ncclInvalidArgument, "ncclCommInitRank: null comm pointer");
  *out = nullptr;
  UniqueIdBody body;
  std::memcpy(&body, id.internal, sizeof(body));
  if (body.magic != kIdMagic) {
    return SetError(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
  }
  if (nranks <= 0 || rank < 0 || rank >= nranks) {
    return SetError(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) +
                                             " / nranks " + std::to_string(nranks) + " invalid");
  }
  std::string error;
  uint16_t my_port = 0;
  int listen_fd = ListenLoopback(nranks, &my_port, &error);
  if (listen_fd < 0) return SetError(ncclSystemError, "ncclCommInitRank: " + error);
  const int64_t deadline = OperationDeadline();
  int root = ConnectLoopback(body.port, &error);
  if (root < 0) {
    close(listen_fd);
    return SetError(ncclSystemError, "ncclCommInitRank: bootstrap root unreachable: " + error);
  }
  RootHello h{};
  h.magic = kHelloMagic;
  h.nonce = body.nonce;
  h.rank = rank;
  h.nranks = nranks;
  h.machine_id = sim::MachineIdFromEnv();
  h.local_rank = sim::LocalRankFromEnv();
  h.port = my_port;
  std::vector<PeerEntry> table(nranks);
  ncclResult_t code = ncclSuccess;
  if (!WriteFully(root, &h, sizeof(h), deadline, &code, &error) ||
      !ReadFully(root, table.data(), table.size() * sizeof(PeerEntry), deadline, &code, &error)) {
    close(root);
    close(listen_fd);
    return SetError(code, "ncclCommInitRank: bootstrap with the root failed (another rank with "
                          "the same id and rank, mismatched nranks, or a dead root): " + error);
  }
  close(root);
  auto* c = new ncclComm;
  c->id = Mix(body.nonce, 0);
  c->rank = rank;
  c->nranks = nranks;
  std::vector<uint16_t> ports(nranks);
  for (int i = 0; i < nranks; ++i) {
    c->peers.push_back(PeerIdentity{table[i].machine_id, table[i].local_rank});
    ports[i] = table[i].port;
  }
  ncclResult_t r = BuildMesh(c, ports, listen_fd);
  if (r != ncclSuccess) {
    delete c;
    return r;
  }
  *out = c;
  return ncclSuccess;
}

}  // namespace
}  // namespace peregrine::simnccl

using namespace peregrine::simnccl;  // NOLINT: the C entry points below

#define PEREGRINE_NCCL_EXPORT extern "C" __attribute__((visibility("default")))

PEREGRINE_NCCL_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return SetError(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::string error;
  uint16_t port = 0;
  int fd = ListenLoopback(1024, &port, &error);
  if (fd < 0) return SetError(ncclSystemError, "ncclGetUniqueId: " + error);
  UniqueIdBody body{};
  body.magic = kIdMagic;
  body.nonce = RandomNonce();
  body.addr = 0x7f000001u;
  body.port = port;
  body.pid = getpid();
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  std::memcpy(unique_id->internal, &body, sizeof(body));
  try {
    std::thread(RootMain, fd, body.nonce).detach();
  } catch (...) {
    close(fd);
    return SetError(ncclSystemError, "ncclGetUniqueId: cannot start the bootstrap thread");
  }
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks,
                                                    ncclUniqueId comm_id, int rank) {
  return InitRankImpl(comm, nranks, comm_id, rank);
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                          ncclUniqueId comm_id, int rank,
                                                          ncclConfig_t* /*config*/) {
  return InitRankImpl(comm, nranks, comm_id, rank);
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev,
                                                   const int* /*devlist*/) {
  if (comms == nullptr || ndev <= 0) {
    return SetError(ncclInvalidArgument, "ncclCommInitAll: null comms or ndev <= 0");
  }
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) return r;
  std::vector<ncclResult_t> results(ndev, ncclSuccess);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i) {
    threads.emplace_back([&, i] { results[i] = InitRankImpl(&comms[i], ndev, id, i); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < ndev; ++i) {
    if (results[i] != ncclSuccess) {
      for (int j = 0; j < ndev; ++j) {
        if (comms[j] != nullptr) DestroyComm(comms[j]);
        comms[j] = nullptr;
      }
      return results[i];
    }
  }
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                                 ncclComm_t* newcomm, ncclConfig_t* /*config*/) {
  if (ValidComm(comm) == nullptr || newcomm == nullptr) {
    return SetError(ncclInvalidArgument, "ncclCommSplit: invalid communicator or null newcomm");
  }
  *newcomm = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    return SetError(ncclInvalidArgument, "ncclCommSplit: negative color " + std::to_string(color));
  }
  if (comm->broken) return SetError(comm->error, comm->last_error);
  ++comm->splits;
  std::string error;
  SplitInfo mine{};
  mine.color = color;
  mine.key = key;
  int listen_fd = -1;
  if (color != NCCL_SPLIT_NOCOLOR) {
    listen_fd = ListenLoopback(comm->nranks, &mine.port, &error);
    if (listen_fd < 0) return SetError(ncclSystemError, "ncclCommSplit: " + error);
  }
  std::vector<SplitInfo> all(comm->nranks);
  ncclResult_t r = InternalAllGather(comm, &mine, sizeof(mine), all.data());
  if (r != ncclSuccess) {
    if (listen_fd >= 0) close(listen_fd);
    return SetError(r, comm->last_error);
  }
  if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::vector<int> members;
  for (int i = 0; i < comm->nranks; ++i) {
    if (all[i].color == color) members.push_back(i);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[a].key != all[b].key ? all[a].key < all[b].key : a < b;
  });
  auto* c = new ncclComm;
  c->id = Mix(Mix(comm->id, comm->splits), static_cast<uint64_t>(color));
  c->nranks = static_cast<int>(members.size());
  std::vector<uint16_t> ports;
  for (int i = 0; i < c->nranks; ++i) {
    if (members[i] == comm->rank) c->rank = i;
    c->peers.push_back(comm->peers[members[i]]);
    ports.push_back(all[members[i]].port);
  }
  r = BuildMesh(c, ports, listen_fd);
  if (r != ncclSuccess) {
    delete c;
    return r;
  }
  *newcomm = c;
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (ValidComm(comm) == nullptr) return ncclInvalidArgument;
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (ValidComm(comm) == nullptr) return ncclInvalidArgument;
  DestroyComm(comm);
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (ValidComm(comm) == nullptr) return ncclInvalidArgument;
  DestroyComm(comm);
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (ValidComm(comm) == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (ValidComm(comm) == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (ValidComm(comm) == nullptr || device == nullptr) return ncclInvalidArgument;
  *device = std::max(0, peregrine::sim::LocalRankFromEnv());
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
                                                         ncclResult_t* async_error) {
  if (ValidComm(comm) == nullptr || async_error == nullptr) return ncclInvalidArgument;
  *async_error = comm->error;
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

PEREGRINE_NCCL_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  if (ValidComm(comm) != nullptr && !comm->last_error.empty()) return comm->last_error.c_str();
  return tls_last_error.c_str();
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return ncclInvalidArgument;
  *ptr = std::malloc(size == 0 ? 1 : size);
  return *ptr != nullptr ? ncclSuccess : ncclSystemError;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclMemFree(void* ptr) {
  std::free(ptr);
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff,
                                                 size_t count, ncclDataType_t datatype,
                                                 ncclRedOp_t op, ncclComm_t comm,
                                                 cudaStream_t /*stream*/) {
  return SubmitReduction({OpKind::kAllReduce, comm, sendbuff, recvbuff, count, datatype, op, 0},
                         "ncclAllReduce");
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                     size_t recvcount, ncclDataType_t datatype,
                                                     ncclRedOp_t op, ncclComm_t comm,
                                                     cudaStream_t /*stream*/) {
  return SubmitReduction(
      {OpKind::kReduceScatter, comm, sendbuff, recvbuff, recvcount, datatype, op, 0},
      "ncclReduceScatter");
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff,
                                                 size_t sendcount, ncclDataType_t datatype,
                                                 ncclComm_t comm, cudaStream_t /*stream*/) {
  ncclResult_t r = CheckOp(comm, sendbuff, recvbuff, sendcount, datatype, "ncclAllGather");
  if (r != ncclSuccess) return r;
  return Submit({OpKind::kAllGather, comm, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0});
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff,
                                                 size_t count, ncclDataType_t datatype, int root,
                                                 ncclComm_t comm, cudaStream_t /*stream*/) {
  // Only the root reads sendbuff.
  ncclResult_t r = CheckOp(comm, recvbuff, recvbuff, count, datatype, "ncclBroadcast");
  if (r == ncclSuccess) r = CheckRank(comm, root, "ncclBroadcast", "root");
  if (r == ncclSuccess && comm->rank == root && count > 0 && sendbuff == nullptr) {
    r = SetError(ncclInvalidArgument, "ncclBroadcast: null sendbuff at the root");
  }
  if (r != ncclSuccess) return r;
  return Submit({OpKind::kBroadcast, comm, sendbuff, recvbuff, count, datatype, ncclSum, root});
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype,
                                             int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, ncclRedOp_t op, int root,
                                              ncclComm_t comm, cudaStream_t /*stream*/) {
  // Only the root writes recvbuff.
  ncclResult_t r = CheckOp(comm, sendbuff, sendbuff, count, datatype, "ncclReduce");
  if (r == ncclSuccess) r = CheckRedOp(op, "ncclReduce");
  if (r == ncclSuccess) r = CheckRank(comm, root, "ncclReduce", "root");
  if (r == ncclSuccess && comm->rank == root && count > 0 && recvbuff == nullptr) {
    r = SetError(ncclInvalidArgument, "ncclReduce: null recvbuff at the root");
  }
  if (r != ncclSuccess) return r;
  return Submit({OpKind::kReduce, comm, sendbuff, recvbuff, count, datatype, op, root});
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count,
                                            ncclDataType_t datatype, int peer, ncclComm_t comm,
                                            cudaStream_t /*stream*/) {
  ncclResult_t r = CheckOp(comm, sendbuff, sendbuff, count, datatype, "ncclSend");
  if (r == ncclSuccess) r = CheckRank(comm, peer, "ncclSend", "peer");
  if (r != ncclSuccess) return r;
  return Submit({OpKind::kSend, comm, sendbuff, nullptr, count, datatype, ncclSum, peer});
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                            int peer, ncclComm_t comm, cudaStream_t /*stream*/) {
  ncclResult_t r = CheckOp(comm, recvbuff, recvbuff, count, datatype, "ncclRecv");
  if (r == ncclSuccess) r = CheckRank(comm, peer, "ncclRecv", "peer");
  if (r != ncclSuccess) return r;
  return Submit({OpKind::kRecv, comm, nullptr, recvbuff, count, datatype, ncclSum, peer});
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclGroupStart() {
  ++tls_group_depth;
  return ncclSuccess;
}

PEREGRINE_NCCL_EXPORT ncclResult_t ncclGroupEnd() {
  if (tls_group_depth <= 0) {
    return SetError(ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  }
  if (--tls_group_depth > 0) return ncclSuccess;
  std::vector<PendingOp> ops;
  ops.swap(tls_pending);
  return ExecuteGroup(std::move(ops));
}
