// Communicator internals of the stand-in NCCL (internal to sim/nccl).
//
// A communicator is a full mesh of loopback TCP connections between its ranks (one socket
// per peer pair), built at init from the peers' listening ports. Collectives run in ring
// order over it; point-to-point operations use the socket to the peer directly. Each rank
// knows every peer's physical identity (machine id, local rank), exchanged at bootstrap,
// so link faults between machines apply to the right transfers.
//
// Like NCCL, a communicator is used by one thread at a time; different communicators may
// be used concurrently from different threads. After any transport error the communicator
// is broken: all its sockets are shut down (so peers blocked on it fail too instead of
// hanging) and every later operation returns the sticky error.
#ifndef PEREGRINE_SIM_NCCL_COMM_H_
#define PEREGRINE_SIM_NCCL_COMM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"
#include "sim/fault/fault_table.h"

struct PeerIdentity {
  int32_t machine_id;
  int32_t local_rank;
};

struct ncclComm {
  static constexpr uint64_t kMagic = 0x5052474e43434c31ull;  // "PRGNCCL1"
  uint64_t magic = kMagic;
  uint64_t id = 0;  // shared by all ranks of the communicator
  int rank = 0;
  int nranks = 0;
  std::vector<int> fds;  // fds[peer]; -1 for self
  std::vector<PeerIdentity> peers;
  uint64_t splits = 0;
  bool broken = false;
  ncclResult_t error = ncclSuccess;
  std::string last_error;
  uint64_t fault_generation = ~uint64_t{0};
  peregrine::sim::RankFault rank_fault;
  std::vector<peregrine::sim::LinkFault> link_to;  // by peer rank
};

namespace peregrine::simnccl {

// One point-to-point operation of a group (or a lone ncclSend/ncclRecv).
struct P2pOp {
  bool send = false;
  int peer = 0;
  void* buffer = nullptr;  // sendbuff (const in the API) or recvbuff
  size_t bytes = 0;
  ncclDataType_t type = ncclFloat32;
  size_t count = 0;
};

// The deadline for a blocking operation started now (env PEREGRINE_NCCL_TIMEOUT_MS; none
// when unset or <= 0).
int64_t OperationDeadline();

// Re-reads the process-wide fault table when it changed and refreshes comm's cached rank
// and link faults. Cheap when nothing changed.
void RefreshFaults(ncclComm* comm);

// Marks comm broken with `code` and `message`, shuts its sockets down, and returns code.
ncclResult_t Fail(ncclComm* comm, ncclResult_t code, const std::string& message);

ncclResult_t RunAllReduce(ncclComm* comm, const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t type, ncclRedOp_t op);
ncclResult_t RunReduceScatter(ncclComm* comm, const void* sendbuff, void* recvbuff,
                              size_t recvcount, ncclDataType_t type, ncclRedOp_t op);
ncclResult_t RunAllGather(ncclComm* comm, const void* sendbuff, void* recvbuff, size_t sendcount,
                          ncclDataType_t type);
ncclResult_t RunBroadcast(ncclComm* comm, const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t type, int root);
ncclResult_t RunReduce(ncclComm* comm, const void* sendbuff, void* recvbuff, size_t count,
                       ncclDataType_t type, ncclRedOp_t op, int root);
// Progresses all operations at once (grouped sends and receives never deadlock).
ncclResult_t RunP2p(ncclComm* comm, const std::vector<P2pOp>& ops);
// Gathers `bytes` from every rank into `all` (nranks * bytes) without faults applied.
ncclResult_t InternalAllGather(ncclComm* comm, const void* mine, size_t bytes, void* all);

}  // namespace peregrine::simnccl

#endif  // PEREGRINE_SIM_NCCL_COMM_H_
