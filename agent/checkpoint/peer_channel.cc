#include "agent/checkpoint/peer_channel.h"

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "checkpoint/shard_format.h"

namespace peregrine::checkpoint {

std::string BearerToken(const grpc::ServerContext& context) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  std::string value(it->second.data(), it->second.size());
  return absl::StartsWith(value, "Bearer ") ? value.substr(7) : "";
}

std::unique_ptr<grpc::ClientContext> PeerCallContext(const std::string& token, absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  return context;
}

std::unique_ptr<peregrine::v1::CheckpointPeer::Stub> PeerStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(4 * static_cast<int>(kShardChunkBytes));
  return peregrine::v1::CheckpointPeer::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

peregrine::v1::ShardChunk MakeShardChunk(const peregrine::v1::ShardKey& key, uint64_t total_bytes, uint64_t offset,
                                         const char* data, size_t n) {
  peregrine::v1::ShardChunk chunk;
  if (offset == 0) {
    *chunk.mutable_key() = key;
    chunk.set_total_bytes(total_bytes);
  }
  chunk.set_offset(offset);
  chunk.set_data(data, n);
  chunk.set_crc32c(Crc32c(absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(data), n)));
  return chunk;
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace peregrine::checkpoint
