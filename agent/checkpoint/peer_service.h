// PeerServer: this agent's CheckpointPeer service (proto/peregrine/v1/checkpoint.proto).
// PutShard stores a backup another slot sends (chunks of at most 1 MiB, each CRC-checked,
// in order; the whole shard verified before it counts as held); GetShard streams a held or
// own shard back. Every call must carry the job's data token ("authorization: Bearer
// <token>", data_token.h), read from the DataToken at each call; otherwise, and while the
// holder has no token yet, UNAUTHENTICATED.
//
// Thread safety: gRPC's threads run the handlers; the store and the token are
// thread-safe. Ownership: the store and the token must outlive the server; destroying the server shuts it down (in-flight calls are
// cancelled) and waits. Errors: Start's status when the address cannot be bound.
#ifndef PEREGRINE_AGENT_CHECKPOINT_PEER_SERVICE_H_
#define PEREGRINE_AGENT_CHECKPOINT_PEER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "agent/checkpoint/data_token.h"
#include "agent/checkpoint/shard_store.h"

namespace peregrine::checkpoint {

struct PeerServerOptions {
  std::string bind = "0.0.0.0";  // --data-bind
  int port = 0;                  // --data-port; 0: a free port
  const DataToken* token = nullptr;  // the job's data token every call must carry
  ShardStore* store = nullptr;
};

class PeerServer {
 public:
  static absl::StatusOr<std::unique_ptr<PeerServer>> Start(PeerServerOptions options);
  ~PeerServer();
  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  int port() const { return port_; }
  // Shard bytes received by PutShard so far (chunks accepted), for the bandwidth limit's
  // tests and the agent's logs.
  uint64_t bytes_received() const;

  class Impl;

 private:
  PeerServer() = default;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_PEER_SERVICE_H_
