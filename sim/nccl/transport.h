// Loopback TCP transport of the stand-in NCCL (internal to sim/nccl).
//
// Sockets between the ranks of a communicator carry framed messages: a 16-byte header
// (magic, tag, payload length) and the payload. RunTransfers progresses any number of
// sends and receives at once with non-blocking I/O and ppoll, so a rank that sends to its
// next peer while receiving from its previous one never deadlocks, and nothing spins:
// the thread sleeps in ppoll until a socket is ready, a paced send may continue, or the
// deadline passes. Messages on one socket in one direction go in list order.
//
// Link faults are applied on the sending side: a per-message delay before the first byte,
// a payload rate cap (token bucket starting empty), and corruption (the payload is sent
// from a copy passed through sim::CorruptPayload; the caller's buffer is untouched).
//
// Thread safety: functions are thread-compatible; a socket must be used by one thread.
#ifndef PEREGRINE_SIM_NCCL_TRANSPORT_H_
#define PEREGRINE_SIM_NCCL_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"
#include "sim/fault/fault_table.h"

namespace peregrine::simnccl {

inline constexpr uint32_t kMessageMagic = 0x50524731;  // "PRG1"
enum MessageTag : uint32_t { kTagCollective = 1, kTagP2p = 2, kTagInternal = 3 };

struct MessageHeader {
  uint32_t magic;
  uint32_t tag;
  uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == 16);

int64_t NowNs();
// Deadline `timeout_ms` from now; -1 (no deadline) when timeout_ms <= 0.
int64_t DeadlineAfterMs(int64_t timeout_ms);

// A listening socket on 127.0.0.1 with an ephemeral port. Returns the fd or -1.
int ListenLoopback(int backlog, uint16_t* port, std::string* error);
// Connects to 127.0.0.1:port. Returns the fd or -1.
int ConnectLoopback(uint16_t port, std::string* error);
// Accepts one connection before the deadline. Returns the fd or -1 (error set).
int AcceptBefore(int listen_fd, int64_t deadline_ns, std::string* error);
// Blocking-style full write/read with a deadline (used for bootstrap). On failure sets
// *error and *code (ncclRemoteError when the peer closed, ncclSystemError otherwise).
bool WriteFully(int fd, const void* data, size_t bytes, int64_t deadline_ns,
                ncclResult_t* code, std::string* error);
bool ReadFully(int fd, void* data, size_t bytes, int64_t deadline_ns, ncclResult_t* code,
               std::string* error);
void SetNoDelay(int fd);

struct Transfer {
  int fd = -1;
  int peer = -1;  // for error messages
  bool send = false;
  void* data = nullptr;
  size_t bytes = 0;
  uint32_t tag = kTagCollective;
  sim::LinkFault link;  // sends only

  // Progress state (owned by RunTransfers).
  MessageHeader header{};
  size_t done = 0;  // header + payload bytes moved
  int64_t ready_ns = 0;
};

// Moves every transfer to completion, or fails: a closed or reset connection gives
// ncclRemoteError, a malformed or mismatched message ncclInvalidUsage, the deadline
// (deadline_ns >= 0) or another system error ncclSystemError. *error names the peer.
ncclResult_t RunTransfers(std::vector<Transfer>& transfers, int64_t deadline_ns,
                          std::string* error);

}  // namespace peregrine::simnccl

#endif  // PEREGRINE_SIM_NCCL_TRANSPORT_H_
