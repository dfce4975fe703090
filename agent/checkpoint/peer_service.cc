#include "agent/checkpoint/peer_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/checkpoint/peer_channel.h"
#include "agent/checkpoint/shard_files.h"
#include "checkpoint/shard_format.h"
#include "grpcpp/grpcpp.h"

// PutShard writes the chunks straight into a temp file under held/ (its size reserved in
// the store's budget first), so a shard never sits in the agent's heap whole; a chunk out
// of order, over 1 MiB, past the announced size or with a wrong CRC ends the call with
// DATA_LOSS and removes the file. GetShard reads the file with pread in 1 MiB chunks.

namespace peregrine::checkpoint {
namespace v1 = ::peregrine::v1;

class PeerServer::Impl final : public v1::CheckpointPeer::Service {
 public:
  explicit Impl(PeerServerOptions options) : options_(std::move(options)) {}

  grpc::Status PutShard(grpc::ServerContext* context, grpc::ServerReader<v1::ShardChunk>* reader,
                        v1::PutShardReply* reply) override {
    if (absl::Status s = options_.token->Check(BearerToken(*context)); !s.ok()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, absl::StrCat("PutShard: ", s.message()));
    }
    v1::ShardChunk chunk;
    if (!reader->Read(&chunk)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PutShard: no chunk");
    if (!chunk.has_key()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "PutShard: the first chunk has no key");
    const v1::ShardKey key = chunk.key();
    absl::StatusOr<std::string> temp = options_.store->BeginHeld(key, chunk.total_bytes());
    if (!temp.ok()) return ToGrpc(temp.status());
    absl::StatusOr<ShardFileWriter> writer = ShardFileWriter::Create(*temp, chunk.total_bytes());
    if (!writer.ok()) {
      options_.store->AbortHeld(*temp);
      return ToGrpc(writer.status());
    }
    absl::Status status = absl::OkStatus();
    do {
      if (chunk.data().size() > kShardChunkBytes) {
        status = absl::InvalidArgumentError(absl::StrCat("PutShard: chunk of ", chunk.data().size(), " bytes over 1 MiB"));
        break;
      }
      const auto* data = reinterpret_cast<const uint8_t*>(chunk.data().data());
      const absl::Span<const uint8_t> bytes(data, chunk.data().size());
      if (Crc32c(bytes) != chunk.crc32c()) {
        status = absl::DataLossError(absl::StrCat("PutShard: chunk at offset ", chunk.offset(), " fails its CRC"));
        break;
      }
      status = writer->Append(chunk.offset(), bytes);
      if (!status.ok()) break;
      received_.fetch_add(bytes.size(), std::memory_order_relaxed);
    } while (reader->Read(&chunk));
    if (status.ok()) status = writer->Close();
    if (!status.ok()) {
      options_.store->AbortHeld(*temp);
      return ToGrpc(status);  // the writer removes the file
    }
    writer->Release();
    status = options_.store->CommitHeld(key, *temp);
    if (!status.ok()) return ToGrpc(status);
    reply->set_bytes(writer->written());
    return grpc::Status::OK;
  }

  grpc::Status GetShard(grpc::ServerContext* context, const v1::GetShardRequest* request,
                        grpc::ServerWriter<v1::ShardChunk>* writer) override {
    if (absl::Status s = options_.token->Check(BearerToken(*context)); !s.ok()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, absl::StrCat("GetShard: ", s.message()));
    }
    absl::StatusOr<std::string> path = options_.store->FindShard(request->key());
    if (!path.ok()) return ToGrpc(path.status());
    const int fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("GetShard: ", *path, " is gone"));
    const off_t total = ::lseek(fd, 0, SEEK_END);
    std::vector<char> buffer(kShardChunkBytes);
    uint64_t offset = 0;
    grpc::Status status = grpc::Status::OK;
    while (offset < static_cast<uint64_t>(total) || offset == 0) {
      const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(offset));
      if (n < 0) {
        status = grpc::Status(grpc::StatusCode::INTERNAL, absl::StrCat("GetShard: read ", *path, " failed"));
        break;
      }
      const v1::ShardChunk chunk =
          MakeShardChunk(request->key(), static_cast<uint64_t>(total), offset, buffer.data(), static_cast<size_t>(n));
      if (!writer->Write(chunk)) {
        status = grpc::Status(grpc::StatusCode::CANCELLED, "GetShard: the reader went away");
        break;
      }
      offset += static_cast<uint64_t>(n);
      if (n == 0) break;
    }
    ::close(fd);
    return status;
  }

  uint64_t received() const { return received_.load(std::memory_order_relaxed); }

  std::unique_ptr<grpc::Server> server;

 private:
  const PeerServerOptions options_;
  std::atomic<uint64_t> received_{0};
};

absl::StatusOr<std::unique_ptr<PeerServer>> PeerServer::Start(PeerServerOptions options) {
  if (options.store == nullptr) return absl::InvalidArgumentError("PeerServer needs a store");
  if (options.token == nullptr) return absl::InvalidArgumentError("PeerServer needs a data token holder");
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("data port ", options.port, " is outside 0..65535"));
  }
  const std::string address = absl::StrCat(options.bind.find(':') != std::string::npos ? "[" : "", options.bind,
                                           options.bind.find(':') != std::string::npos ? "]" : "", ":", options.port);
  std::unique_ptr<PeerServer> server(new PeerServer());
  server->impl_ = std::make_unique<Impl>(std::move(options));
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound);
  builder.SetMaxReceiveMessageSize(4 * static_cast<int>(kShardChunkBytes));
  builder.RegisterService(server->impl_.get());
  server->impl_->server = builder.BuildAndStart();
  if (server->impl_->server == nullptr || bound == 0) {
    return absl::UnavailableError(absl::StrCat("data channel: cannot listen on ", address));
  }
  server->port_ = bound;
  return server;
}

PeerServer::~PeerServer() {
  if (impl_ && impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    impl_->server->Wait();
  }
}

uint64_t PeerServer::bytes_received() const { return impl_->received(); }

}  // namespace peregrine::checkpoint
