// What both ends of the CheckpointPeer data channel share: the chunk size and layout, the bearer
// token on a call (compared with base/secret_token.h), a client stub for an address, and the
// status mapping at the RPC edge. Thread-safe (no shared state).
#ifndef PEREGRINE_AGENT_CHECKPOINT_PEER_CHANNEL_H_
#define PEREGRINE_AGENT_CHECKPOINT_PEER_CHANNEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "peregrine/v1/checkpoint.grpc.pb.h"

namespace peregrine::checkpoint {

inline constexpr size_t kShardChunkBytes = 1 << 20;

// The data token of a call ("authorization: Bearer <token>"), empty when absent.
std::string BearerToken(const grpc::ServerContext& context);
// A client context carrying the token (when not empty) and a deadline of `timeout`.
std::unique_ptr<grpc::ClientContext> PeerCallContext(const std::string& token, absl::Duration timeout);
// A stub over an insecure channel to host:port (the data channel runs inside the cluster
// network; the job's data token authenticates each call).
std::unique_ptr<peregrine::v1::CheckpointPeer::Stub> PeerStub(const std::string& address);

// The chunk of a shard file at `offset` holding data[0, n): the key and the file's size on
// the first chunk (offset 0) only, and the CRC-32C of the data.
peregrine::v1::ShardChunk MakeShardChunk(const peregrine::v1::ShardKey& key, uint64_t total_bytes, uint64_t offset,
                                         const char* data, size_t n);

absl::Status FromGrpc(const grpc::Status& status);
grpc::Status ToGrpc(const absl::Status& status);

}  // namespace peregrine::checkpoint

#endif  // PEREGRINE_AGENT_CHECKPOINT_PEER_CHANNEL_H_
