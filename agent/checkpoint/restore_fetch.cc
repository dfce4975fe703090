#include "agent/checkpoint/restore_fetch.h"

#include <unistd.h>

#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "agent/checkpoint/peer_channel.h"
#include "agent/checkpoint/persist_writer.h"
#include "agent/checkpoint/shard_files.h"
#include "checkpoint/shard_format.h"

namespace peregrine::checkpoint {
namespace v1 = ::peregrine::v1;

namespace {

constexpr absl::Duration kFetchDeadline = absl::Hours(1);

v1::CheckpointEvent MakeEvent(v1::CheckpointEvent::Kind kind, uint64_t step, uint32_t rank, std::string detail) {
  v1::CheckpointEvent event;
  event.set_kind(kind);
  event.set_step(step);
  event.set_global_rank(static_cast<int32_t>(rank));
  event.set_detail(std::move(detail));
  return event;
}

}  // namespace

absl::Status FetchShard(const std::string& address, const std::string& token, const v1::ShardKey& key,
                        const std::string& dest_path) {
  auto stub = PeerStub(address);
  std::unique_ptr<grpc::ClientContext> context = PeerCallContext(token, kFetchDeadline);
  v1::GetShardRequest request;
  *request.mutable_key() = key;
  std::unique_ptr<grpc::ClientReader<v1::ShardChunk>> stream = stub->GetShard(context.get(), request);
  const std::string temp = dest_path + ".fetch";
  std::optional<ShardFileWriter> writer;
  absl::Status status = absl::OkStatus();
  v1::ShardChunk chunk;
  while (status.ok() && stream->Read(&chunk)) {
    if (!writer) {
      absl::StatusOr<ShardFileWriter> created = ShardFileWriter::Create(temp, chunk.total_bytes());
      if (!created.ok()) {
        status = created.status();
        break;
      }
      writer.emplace(std::move(*created));
    }
    const absl::Span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(chunk.data().data()), chunk.data().size());
    if (Crc32c(bytes) != chunk.crc32c()) {
      status = absl::DataLossError(absl::StrCat("chunk at offset ", chunk.offset(), " from ", address, " fails its CRC"));
      break;
    }
    status = writer->Append(chunk.offset(), bytes);
  }
  if (!status.ok()) context->TryCancel();
  const absl::Status rpc = FromGrpc(stream->Finish());
  if (status.ok()) status = rpc;
  if (status.ok() && !writer) status = absl::DataLossError(absl::StrCat(address, " sent no chunk"));
  if (status.ok()) status = writer->Close();
  if (status.ok()) status = VerifyShardFileFor(temp, key.step(), key.global_rank()).status();
  if (status.ok() && ::rename(temp.c_str(), dest_path.c_str()) != 0) {
    status = absl::InternalError(absl::StrCat("rename ", temp, " -> ", dest_path, " failed"));
  }
  if (status.ok()) {
    writer->Release();
    return status;
  }
  return absl::Status(status.code(), absl::StrCat("fetch from ", address, ": ", status.message()));
}

RestoreOutcome RestoreShards(ShardStore& store, uint32_t slot, const std::vector<uint32_t>& ranks, uint64_t step,
                             const std::vector<v1::CheckpointPeerAddress>& restore_from, const std::string& token,
                             const std::string& persist_dir) {
  RestoreOutcome out;
  store.DiscardOwnNewerThan(step);
  for (uint32_t rank : ranks) {
    const std::string path = store.OwnShardPath(rank, step);
    absl::Status own = VerifyShardFileFor(path, step, rank).status();
    if (own.ok()) continue;
    if (!absl::IsNotFound(own)) {
      out.events.push_back(MakeEvent(v1::CheckpointEvent::CORRUPT_SHARD, step, rank, std::string(own.message())));
      ::unlink(path.c_str());
    }
    std::string why = absl::StrCat("own copy: ", own.message());
    bool fetched = false;
    v1::ShardKey key;
    key.set_slot(slot);
    key.set_global_rank(rank);
    key.set_step(step);
    for (const v1::CheckpointPeerAddress& holder : restore_from) {
      absl::Status s = FetchShard(holder.address(), token, key, path);
      if (s.ok()) {
        out.events.push_back(MakeEvent(v1::CheckpointEvent::RESTORED, step, rank,
                                       absl::StrCat("fetched from slot ", holder.slot(), " (", holder.address(), ")")));
        fetched = true;
        break;
      }
      if (absl::IsDataLoss(s)) {
        out.events.push_back(MakeEvent(v1::CheckpointEvent::CORRUPT_SHARD, step, rank,
                                       absl::StrCat("backup held by slot ", holder.slot(), ": ", s.message())));
      }
      absl::StrAppend(&why, "; slot ", holder.slot(), ": ", s.message());
    }
    if (!fetched && restore_from.empty()) absl::StrAppend(&why, "; no holder to fetch from");
    if (!fetched && !persist_dir.empty()) {
      absl::Status s = ReadPersistedShard(persist_dir, slot, rank, step, path);
      if (s.ok()) {
        out.events.push_back(MakeEvent(v1::CheckpointEvent::RESTORED, step, rank,
                                       absl::StrCat("from the persisted copy in ", persist_dir)));
        fetched = true;
      } else {
        if (absl::IsDataLoss(s)) {
          out.events.push_back(MakeEvent(v1::CheckpointEvent::CORRUPT_SHARD, step, rank, std::string(s.message())));
        }
        absl::StrAppend(&why, "; ", s.message());
      }
    }
    if (!fetched) {
      out.events.push_back(MakeEvent(v1::CheckpointEvent::RESTORE_FAILED, step, rank, why));
      if (out.status.ok()) {
        out.status = absl::FailedPreconditionError(
            absl::StrCat("restore of step ", step, " failed for rank ", rank, ": ", why));
      }
    }
  }
  return out;
}

}  // namespace peregrine::checkpoint
