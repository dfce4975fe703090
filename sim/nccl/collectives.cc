// Ring-order collectives and point-to-point transfers of the stand-in NCCL.
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "sim/nccl/comm.h"
#include "sim/nccl/reduce.h"
#include "sim/nccl/transport.h"

namespace peregrine::simnccl {
namespace {

// Segment size of the chain algorithms (broadcast, reduce): pipelines long buffers.
constexpr size_t kChainSegmentBytes = 1 << 20;

struct FaultState {
  std::mutex mu;
  sim::FaultTableReader* reader = nullptr;
  int machine_id = -1;
  int local_rank = -1;
};

FaultState& Faults() {
  static FaultState* state = [] {
    auto* s = new FaultState;
    const char* path = std::getenv("PEREGRINE_SIM_FAULTS");
    s->reader = new sim::FaultTableReader(path != nullptr ? path : "");
    s->machine_id = sim::MachineIdFromEnv();
    s->local_rank = sim::LocalRankFromEnv();
    return s;
  }();
  return *state;
}

struct Chunk {
  size_t offset;  // elements
  size_t count;
};

Chunk ChunkOf(size_t count, int n, int i) {
  const size_t base = count / n;
  const size_t rem = count % n;
  const size_t idx = static_cast<size_t>(i);
  return Chunk{idx * base + std::min(idx, rem), base + (idx < rem ? 1 : 0)};
}

int Mod(int a, int n) { return ((a % n) + n) % n; }

ncclResult_t Exchange(ncclComm* c, int send_peer, const void* sbuf, size_t sbytes,
                      int recv_peer, void* rbuf, size_t rbytes, uint32_t tag) {
  std::vector<Transfer> ts;
  ts.reserve(2);
  if (send_peer >= 0) {
    Transfer t;
    t.fd = c->fds[send_peer];
    t.peer = send_peer;
    t.send = true;
    t.data = const_cast<void*>(sbuf);
    t.bytes = sbytes;
    t.tag = tag;
    if (tag != kTagInternal) t.link = c->link_to[send_peer];
    ts.push_back(t);
  }
  if (recv_peer >= 0) {
    Transfer t;
    t.fd = c->fds[recv_peer];
    t.peer = recv_peer;
    t.send = false;
    t.data = rbuf;
    t.bytes = rbytes;
    t.tag = tag;
    ts.push_back(t);
  }
  std::string error;
  ncclResult_t r = RunTransfers(ts, OperationDeadline(), &error);
  if (r != ncclSuccess) return Fail(c, r, error);
  return ncclSuccess;
}

void ApplyRankFault(const ncclComm* c, void* data, size_t count, ncclDataType_t type) {
  if (c->rank_fault.nan) PoisonWithNan(data, count, type);
  if (c->rank_fault.corrupt) Corrupt(data, count, type);
}

bool Perturbs(const ncclComm* c) { return c->rank_fault.nan || c->rank_fault.corrupt; }

// Ring reduce-scatter in place over `buf` split into n chunks given by `chunk`; afterwards
// rank r holds the reduced chunk r. `tmp` holds at least the largest chunk.
template <typename ChunkFn>
ncclResult_t RingReduceScatter(ncclComm* c, char* buf, char* tmp, size_t es, ChunkFn chunk,
                               ncclDataType_t type, ncclRedOp_t op) {
  const int n = c->nranks, r = c->rank;
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const Chunk sc = chunk(Mod(r - s - 1, n));
    const Chunk rc = chunk(Mod(r - s - 2, n));
    ncclResult_t res = Exchange(c, next, buf + sc.offset * es, sc.count * es, prev, tmp,
                                rc.count * es, kTagCollective);
    if (res != ncclSuccess) return res;
    ReduceInto(buf + rc.offset * es, tmp, rc.count, type, op);
  }
  return ncclSuccess;
}

// Ring all-gather in place: rank r starts with chunk r of `buf`.
template <typename ChunkFn>
ncclResult_t RingAllGather(ncclComm* c, char* buf, size_t es, ChunkFn chunk, uint32_t tag) {
  const int n = c->nranks, r = c->rank;
  const int next = Mod(r + 1, n), prev = Mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    const Chunk sc = chunk(Mod(r - s, n));
    const Chunk rc = chunk(Mod(r - s - 1, n));
    ncclResult_t res = Exchange(c, next, buf + sc.offset * es, sc.count * es, prev,
                                buf + rc.offset * es, rc.count * es, tag);
    if (res != ncclSuccess) return res;
  }
  return ncclSuccess;
}

}  // namespace

int64_t OperationDeadline() {
  static const int64_t timeout_ms = [] {
    const char* v = std::getenv("PEREGRINE_NCCL_TIMEOUT_MS");
    if (v == nullptr) return int64_t{0};
    return static_cast<int64_t>(std::strtoll(v, nullptr, 10));
  }();
  return DeadlineAfterMs(timeout_ms);
}

void RefreshFaults(ncclComm* comm) {
  FaultState& f = Faults();
  std::lock_guard<std::mutex> lock(f.mu);
  const sim::FaultTableSnapshot& snap = f.reader->Poll();
  if (snap.generation == comm->fault_generation &&
      comm->link_to.size() == static_cast<size_t>(comm->nranks)) {
    return;
  }
  comm->fault_generation = snap.generation;
  comm->rank_fault = snap.RankFaultFor(f.machine_id, f.local_rank);
  comm->link_to.assign(comm->nranks, sim::LinkFault{});
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    comm->link_to[p] = snap.LinkFaultFor(f.machine_id, comm->peers[p].machine_id);
    // A bad intra-machine transport corrupts what this GPU sends to its own machine's GPUs.
    if (comm->rank_fault.intra_corrupt && f.machine_id >= 0 && comm->peers[p].machine_id == f.machine_id) {
      comm->link_to[p].corrupt = true;
    }
  }
}

ncclResult_t Fail(ncclComm* comm, ncclResult_t code, const std::string& message) {
  if (!comm->broken) {
    comm->broken = true;
    comm->error = code;
    comm->last_error = "rank " + std::to_string(comm->rank) + "/" +
                       std::to_string(comm->nranks) + ": " + message;
    for (int fd : comm->fds) {
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }
    if (std::getenv("NCCL_DEBUG") != nullptr) {
      std::fprintf(stderr, "NCCL WARN [peregrine-sim] %s\n", comm->last_error.c_str());
    }
  }
  return code;
}

ncclResult_t RunAllReduce(ncclComm* c, const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t type, ncclRedOp_t op) {
  const size_t es = DataTypeSize(type);
  char* buf = static_cast<char*>(recvbuff);
  if (sendbuff != recvbuff) std::memmove(buf, sendbuff, count * es);
  ApplyRankFault(c, buf, count, type);
  const int n = c->nranks;
  if (n == 1) return ncclSuccess;
  auto chunk = [&](int i) { return ChunkOf(count, n, i); };
  std::vector<char> tmp(ChunkOf(count, n, 0).count * es + 1);
  ncclResult_t r = RingReduceScatter(c, buf, tmp.data(), es, chunk, type, op);
  if (r != ncclSuccess) return r;
  if (op == ncclAvg) {
    const Chunk mine = chunk(c->rank);
    DivideBy(buf + mine.offset * es, mine.count, type, n);
  }
  return RingAllGather(c, buf, es, chunk, kTagCollective);
}

ncclResult_t RunReduceScatter(ncclComm* c, const void* sendbuff, void* recvbuff,
                              size_t recvcount, ncclDataType_t type, ncclRedOp_t op) {
  const size_t es = DataTypeSize(type);
  const int n = c->nranks;
  std::vector<char> work(recvcount * n * es + 1);
  std::memcpy(work.data(), sendbuff, recvcount * n * es);
  ApplyRankFault(c, work.data(), recvcount * n, type);
  auto chunk = [&](int i) { return Chunk{static_cast<size_t>(i) * recvcount, recvcount}; };
  std::vector<char> tmp(recvcount * es + 1);
  if (n > 1) {
    ncclResult_t r = RingReduceScatter(c, work.data(), tmp.data(), es, chunk, type, op);
    if (r != ncclSuccess) return r;
  }
  char* mine = work.data() + static_cast<size_t>(c->rank) * recvcount * es;
  if (op == ncclAvg) DivideBy(mine, recvcount, type, n);
  std::memcpy(recvbuff, mine, recvcount * es);
  return ncclSuccess;
}

ncclResult_t RunAllGather(ncclComm* c, const void* sendbuff, void* recvbuff, size_t sendcount,
                          ncclDataType_t type) {
  const size_t es = DataTypeSize(type);
  char* buf = static_cast<char*>(recvbuff);
  char* mine = buf + static_cast<size_t>(c->rank) * sendcount * es;
  if (sendbuff != mine) std::memmove(mine, sendbuff, sendcount * es);
  ApplyRankFault(c, mine, sendcount, type);
  auto chunk = [&](int i) { return Chunk{static_cast<size_t>(i) * sendcount, sendcount}; };
  return RingAllGather(c, buf, es, chunk, kTagCollective);
}

ncclResult_t RunBroadcast(ncclComm* c, const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t type, int root) {
  const size_t es = DataTypeSize(type);
  const size_t bytes = count * es;
  char* buf = static_cast<char*>(recvbuff);
  const int n = c->nranks;
  if (c->rank == root) {
    if (sendbuff != recvbuff) std::memmove(buf, sendbuff, bytes);
    ApplyRankFault(c, buf, count, type);
  }
  if (n == 1) return ncclSuccess;
  // Chain root -> root+1 -> ... -> root-1, pipelined by segment.
  const int pos = Mod(c->rank - root, n);
  const int next = pos < n - 1 ? Mod(c->rank + 1, n) : -1;
  const int prev = pos > 0 ? Mod(c->rank - 1, n) : -1;
  size_t off = 0;
  do {
    const size_t seg = std::min(kChainSegmentBytes, bytes - off);
    if (prev >= 0) {
      ncclResult_t r = Exchange(c, -1, nullptr, 0, prev, buf + off, seg, kTagCollective);
      if (r != ncclSuccess) return r;
    }
    if (next >= 0) {
      ncclResult_t r = Exchange(c, next, buf + off, seg, -1, nullptr, 0, kTagCollective);
      if (r != ncclSuccess) return r;
    }
    off += seg;
  } while (off < bytes);
  return ncclSuccess;
}

ncclResult_t RunReduce(ncclComm* c, const void* sendbuff, void* recvbuff, size_t count,
                       ncclDataType_t type, ncclRedOp_t op, int root) {
  const size_t es = DataTypeSize(type);
  const size_t bytes = count * es;
  const int n = c->nranks;
  std::vector<char> own;
  char* acc;
  if (c->rank == root) {
    acc = static_cast<char*>(recvbuff);
    if (sendbuff != recvbuff) std::memmove(acc, sendbuff, bytes);
  } else {
    own.assign(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
    acc = own.data();
  }
  ApplyRankFault(c, acc, count, type);
  if (n > 1) {
    // Chain root+1 -> root+2 -> ... -> root, pipelined by segment.
    const int pos = Mod(c->rank - root - 1, n);
    const int next = pos < n - 1 ? Mod(c->rank + 1, n) : -1;
    const int prev = pos > 0 ? Mod(c->rank - 1, n) : -1;
    std::vector<char> tmp(std::min(kChainSegmentBytes, bytes) + 1);
    size_t off = 0;
    do {
      const size_t seg = std::min(kChainSegmentBytes, bytes - off);
      if (prev >= 0) {
        ncclResult_t r = Exchange(c, -1, nullptr, 0, prev, tmp.data(), seg, kTagCollective);
        if (r != ncclSuccess) return r;
        ReduceInto(acc + off, tmp.data(), seg / es, type, op);
      }
      if (next >= 0) {
        ncclResult_t r = Exchange(c, next, acc + off, seg, -1, nullptr, 0, kTagCollective);
        if (r != ncclSuccess) return r;
      }
      off += seg;
    } while (off < bytes);
  }
  if (c->rank == root && op == ncclAvg) DivideBy(acc, count, type, n);
  return ncclSuccess;
}

ncclResult_t RunP2p(ncclComm* c, const std::vector<P2pOp>& ops) {
  std::vector<std::vector<char>> perturbed;
  perturbed.reserve(ops.size());
  std::vector<Transfer> ts;
  ts.reserve(ops.size());
  // Operations with itself as the peer: the k-th send pairs with the k-th receive.
  std::vector<const P2pOp*> self_sends, self_recvs;
  for (const P2pOp& op : ops) {
    if (op.peer == c->rank) (op.send ? self_sends : self_recvs).push_back(&op);
  }
  if (self_sends.size() != self_recvs.size()) {
    return Fail(c, ncclInvalidUsage, "unmatched send/receive with itself in a group");
  }
  for (size_t i = 0; i < self_sends.size(); ++i) {
    if (self_sends[i]->bytes != self_recvs[i]->bytes) {
      return Fail(c, ncclInvalidUsage, "send/receive with itself of different sizes");
    }
    std::memmove(self_recvs[i]->buffer, self_sends[i]->buffer, self_sends[i]->bytes);
    ApplyRankFault(c, self_recvs[i]->buffer, self_recvs[i]->count, self_recvs[i]->type);
  }
  for (const P2pOp& op : ops) {
    if (op.peer == c->rank) continue;
    Transfer t;
    t.fd = c->fds[op.peer];
    t.peer = op.peer;
    t.send = op.send;
    t.data = op.buffer;
    t.bytes = op.bytes;
    t.tag = kTagP2p;
    if (op.send) {
      t.link = c->link_to[op.peer];
      if (Perturbs(c)) {
        const char* src = static_cast<const char*>(op.buffer);
        perturbed.emplace_back(src, src + op.bytes);
        ApplyRankFault(c, perturbed.back().data(), op.count, op.type);
        t.data = perturbed.back().data();
      }
    }
    ts.push_back(t);
  }
  std::string error;
  ncclResult_t r = RunTransfers(ts, OperationDeadline(), &error);
  if (r != ncclSuccess) return Fail(c, r, error);
  return ncclSuccess;
}

ncclResult_t InternalAllGather(ncclComm* c, const void* mine, size_t bytes, void* all) {
  char* buf = static_cast<char*>(all);
  std::memcpy(buf + static_cast<size_t>(c->rank) * bytes, mine, bytes);
  auto chunk = [&](int i) { return Chunk{static_cast<size_t>(i) * bytes, bytes}; };
  return RingAllGather(c, buf, 1, chunk, kTagInternal);
}

}  // namespace peregrine::simnccl
