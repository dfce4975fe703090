// The NCCL rendezvous of the collective tools (nccl_world.h) and of the stand-in trainer:
// rank 0 hands its ncclUniqueId to every other rank over TCP at MASTER_ADDR:MASTER_PORT
// (the role torch.distributed's TCPStore plays for NCCL).
//
// Wire format (all little-endian): the client sends {uint32 magic 0x50524753 "PRGS",
// uint32 rank, uint32 world_size, uint32 0}; the server answers with the 128-byte id, or
// closes the connection when world_size disagrees. The server serves world_size - 1
// clients on a background thread and then closes its socket.
//
// Thread safety: free functions; ServeUniqueId's thread owns its socket.
#ifndef PEREGRINE_DIAGNOSIS_TOOLS_NCCL_RENDEZVOUS_H_
#define PEREGRINE_DIAGNOSIS_TOOLS_NCCL_RENDEZVOUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nccl.h"

namespace peregrine {

// Binds addr:port (retrying EADDRINUSE until timeout_ms) and starts a detached thread that
// answers world_size - 1 requests with `id`. Fails with kUnavailable when the port stays
// taken, kInvalidArgument when addr does not resolve.
absl::Status ServeUniqueId(const std::string& addr, int port, int world_size,
                           const ncclUniqueId& id, int timeout_ms);

// Connects to addr:port (retrying every 50 ms while nothing listens, up to timeout_ms)
// and fetches the id. kDeadlineExceeded when the server never answered.
absl::StatusOr<ncclUniqueId> FetchUniqueId(const std::string& addr, int port, int rank,
                                           int world_size, int timeout_ms);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_TOOLS_NCCL_RENDEZVOUS_H_
