// The data channel between two real CheckpointPeer servers on loopback: backups copied
// and held, fetched back on restore, a wrong or missing data token refused (and every
// call while the server has no token yet), corrupt data refused, and the bandwidth limit
// followed under a manual clock.
#include "agent/checkpoint/peer_service.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/checkpoint/backup_sender.h"
#include "agent/checkpoint/peer_channel.h"
#include "agent/checkpoint/restore_fetch.h"
#include "agent/checkpoint/shard_files.h"
#include "agent/checkpoint/shard_store.h"
#include "base/clock.h"
#include "tests/agent/checkpoint/loopback_peer.h"
#include "tests/agent/checkpoint/shard_samples.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::checkpoint {
namespace {

namespace v1 = ::peregrine::v1;
using ::peregrine::testing::Eventually;
using ::peregrine::testing::LoopbackPeer;
using ::peregrine::testing::PublishShard;
using ::peregrine::testing::ReadBytes;
using ::peregrine::testing::SampleShard;
using ::peregrine::testing::ShardKeyOf;
using ::peregrine::testing::TempDir;

constexpr char kToken[] = "job-token-0123456789";

// One agent's store and data channel, on loopback, with the job token.
struct Peer : LoopbackPeer {
  Peer(const TempDir& dir, const std::string& pod) : LoopbackPeer(dir, "ns", "job", pod, kToken) {}
  void Configure(uint32_t slot, std::vector<uint32_t> ranks, v1::CheckpointPlan plan) {
    plan.set_interval_steps(10);
    REQUIRE(store->Configure(slot, ranks, 2, plan).ok());
  }
  std::vector<v1::CheckpointEvent> PollAll() {
    std::vector<v1::CheckpointEvent> out = store->Poll();
    events.insert(events.end(), out.begin(), out.end());
    return out;
  }
  bool Holds(uint32_t slot, uint64_t step) {
    const v1::CheckpointReport report = store->Report();
    for (const v1::HeldBackup& h : report.held()) {
      if (h.slot() == slot && h.step() == step) return true;
    }
    return false;
  }
  int Count(v1::CheckpointEvent::Kind kind) const {
    int n = 0;
    for (const auto& e : events) n += e.kind() == kind;
    return n;
  }

  std::vector<v1::CheckpointEvent> events;
};

v1::CheckpointPeerAddress Address(uint32_t slot, const std::string& address) {
  v1::CheckpointPeerAddress a;
  a.set_slot(slot);
  a.set_address(address);
  return a;
}

// Slot 0 (ranks 0, 1) backs up to slot 1 (ranks 2, 3), which holds for slot 0.
struct TwoPeers {
  TwoPeers() : a(dir, "pod-a"), b(dir, "pod-b") {
    v1::CheckpointPlan plan_a;
    *plan_a.add_backup_to() = Address(1, b.address());
    a.Configure(0, {0, 1}, plan_a);
    v1::CheckpointPlan plan_b;
    plan_b.add_hold_for(0);
    b.Configure(1, {2, 3}, plan_b);
  }
  void SaveStep(uint64_t step, uint64_t bytes = 3 << 20) {
    for (uint32_t rank : {0u, 1u}) PublishShard(a.store->OwnRankDir(rank), step, SampleShard(step, rank, bytes));
    REQUIRE(Eventually([&] {
      a.PollAll();
      const auto r = a.store->Report();
      return r.stored_steps_size() > 0 && r.stored_steps(r.stored_steps_size() - 1) == step;
    }));
  }
  TempDir dir{"ckpt-peers"};
  Peer a;
  Peer b;
};

TEST_CASE("a stored step is backed up to its holder, held there verified, and fetched back on restore",
          "[integration]") {
  TwoPeers p;
  p.SaveStep(10);
  {
    BackupSender sender(BackupSenderOptions{p.a.store.get(), &p.a.token, RealClock()});
    sender.Wake();
    REQUIRE(Eventually([&] {
      p.a.PollAll();
      p.b.PollAll();
      const auto r = p.a.store->Report();
      return r.backed_up_steps_size() == 1 && p.b.Holds(0, 10);
    }));
  }
  CHECK(p.a.store->Report().backed_up_steps(0) == 10);
  CHECK(p.a.Count(v1::CheckpointEvent::BACKUP_FAILED) == 0);
  for (uint32_t rank : {0u, 1u}) {
    const std::string held = absl::StrCat(p.b.store->area(), "/held/slot-0/rank-", rank, "/", ShardFileName(10));
    CHECK(ReadBytes(held) == ReadBytes(p.a.store->OwnShardPath(rank, 10)));
  }

  // A replacement machine for slot 0 restores step 10 from the holder.
  Peer c(p.dir, "pod-c");
  c.Configure(0, {0, 1}, {});
  RestoreOutcome restored = RestoreShards(*c.store, 0, {0, 1}, 10, {Address(1, p.b.address())}, kToken);
  REQUIRE(restored.status.ok());
  CHECK(restored.events.size() == 2);
  for (const auto& e : restored.events) CHECK(e.kind() == v1::CheckpointEvent::RESTORED);
  for (uint32_t rank : {0u, 1u}) {
    CHECK(ReadBytes(c.store->OwnShardPath(rank, 10)) == ReadBytes(p.a.store->OwnShardPath(rank, 10)));
    CHECK(VerifyShardFileFor(c.store->OwnShardPath(rank, 10), 10, rank).ok());
  }
  // The own copy is used when it verifies (no fetch, no event).
  RestoreOutcome again = RestoreShards(*c.store, 0, {0, 1}, 10, {}, kToken);
  CHECK(again.status.ok());
  CHECK(again.events.empty());
}

TEST_CASE("a restore with no holder of the step fails naming the rank and step", "[integration]") {
  TwoPeers p;
  RestoreOutcome outcome = RestoreShards(*p.a.store, 0, {0, 1}, 30, {Address(1, p.b.address())}, kToken);
  CHECK(absl::IsFailedPrecondition(outcome.status));
  CHECK_THAT(std::string(outcome.status.message()), Catch::Contains("rank 0") && Catch::Contains("step 30"));
  int failed = 0;
  for (const auto& e : outcome.events) failed += e.kind() == v1::CheckpointEvent::RESTORE_FAILED;
  CHECK(failed == 2);
}

TEST_CASE("calls without the job token are refused", "[integration]") {
  TwoPeers p;
  p.SaveStep(10, 100000);
  absl::Status put = SendShard(p.b.address(), "wrong-token", ShardKeyOf(0, 0, 10), p.a.store->OwnShardPath(0, 10), nullptr,
                               RealClock(), [] { return false; });
  CHECK(absl::IsUnauthenticated(put));
  absl::Status none = SendShard(p.b.address(), "", ShardKeyOf(0, 0, 10), p.a.store->OwnShardPath(0, 10), nullptr,
                                RealClock(), [] { return false; });
  CHECK(absl::IsUnauthenticated(none));
  p.b.PollAll();
  CHECK(p.b.store->Report().held().empty());
  TempDir out("fetch");
  absl::Status get = FetchShard(p.a.address(), "wrong-token", ShardKeyOf(0, 0, 10), out.Path("s"));
  CHECK(absl::IsUnauthenticated(get));
  CHECK(FetchShard(p.a.address(), kToken, ShardKeyOf(0, 0, 10), out.Path("s")).ok());  // own shards are served too
}

TEST_CASE("a data channel with no token yet refuses every call until it gets one", "[integration]") {
  TwoPeers p;
  p.SaveStep(10, 100000);
  p.a.token.Set("");  // as before the agent's first RegisterAck
  p.b.token.Set("");
  TempDir out("fetch");
  for (const std::string& presented : {std::string(kToken), std::string(), std::string("anything")}) {
    absl::Status get = FetchShard(p.a.address(), presented, ShardKeyOf(0, 0, 10), out.Path("s"));
    CHECK(absl::IsUnauthenticated(get));
    CHECK_THAT(std::string(get.message()), Catch::Contains("no data-channel token yet"));
    CHECK(absl::IsUnauthenticated(SendShard(p.b.address(), presented, ShardKeyOf(0, 0, 10),
                                            p.a.store->OwnShardPath(0, 10), nullptr, RealClock(),
                                            [] { return false; })));
  }
  CHECK_FALSE(std::filesystem::exists(out.Path("s")));
  p.b.PollAll();
  CHECK(p.b.store->Report().held().empty());
  // The token arrives (the agent registered): the same calls now pass.
  p.a.token.Set(kToken);
  p.b.token.Set(kToken);
  CHECK(FetchShard(p.a.address(), kToken, ShardKeyOf(0, 0, 10), out.Path("s")).ok());
  CHECK(SendShard(p.b.address(), kToken, ShardKeyOf(0, 0, 10), p.a.store->OwnShardPath(0, 10), nullptr, RealClock(),
                  [] { return false; })
            .ok());
}

TEST_CASE("a chunk failing its CRC, and a shard failing its checksum, are refused", "[integration]") {
  TwoPeers p;
  auto stub = PeerStub(p.b.address());
  std::vector<uint8_t> shard = SampleShard(10, 0, 50000, /*finished=*/true);
  auto put = [&](const std::vector<uint8_t>& bytes, bool break_crc) {
    auto context = PeerCallContext(kToken, absl::Seconds(60));
    v1::PutShardReply reply;
    auto stream = stub->PutShard(context.get(), &reply);
    v1::ShardChunk chunk;
    *chunk.mutable_key() = ShardKeyOf(0, 0, 10);
    chunk.set_total_bytes(bytes.size());
    chunk.set_offset(0);
    chunk.set_data(bytes.data(), bytes.size());
    chunk.set_crc32c(Crc32c(absl::MakeConstSpan(bytes)) ^ (break_crc ? 1u : 0u));
    stream->Write(chunk);
    stream->WritesDone();
    return FromGrpc(stream->Finish());
  };
  absl::Status bad_chunk = put(shard, /*break_crc=*/true);
  CHECK(absl::IsDataLoss(bad_chunk));
  CHECK_THAT(std::string(bad_chunk.message()), Catch::Contains("CRC"));
  std::vector<uint8_t> flipped = shard;
  flipped[kShardHeaderBytes + 100] ^= 0x40;  // a payload bit: chunk CRC fine, shard checksum not
  absl::Status bad_shard = put(flipped, /*break_crc=*/false);
  CHECK(absl::IsDataLoss(bad_shard));
  p.b.PollAll();
  CHECK(p.b.Count(v1::CheckpointEvent::CORRUPT_SHARD) == 1);
  CHECK(p.b.store->Report().held().empty());
  CHECK(put(shard, false).ok());  // the intact shard is taken
}

TEST_CASE("backups follow the bandwidth limit under a manual clock", "[integration]") {
  TwoPeers p;
  // One shard of 5 MiB (and its padding) at 1 MiB/s with a 1 MiB burst: 1 MiB at once, then one per second.
  constexpr uint64_t kMiB = 1 << 20;
  PublishShard(p.a.store->OwnRankDir(0), 20, SampleShard(20, 0, 5 * kMiB - kShardHeaderBytes));
  REQUIRE(Eventually([&] {
    p.a.PollAll();
    return VerifyShardFile(p.a.store->OwnShardPath(0, 20)).ok();
  }));
  const uint64_t total = std::filesystem::file_size(p.a.store->OwnShardPath(0, 20));
  ManualClock clock;
  const absl::Time start = clock.Now();
  TokenBucket bucket(kMiB, kMiB, start);
  absl::Status sent = absl::UnknownError("not finished");
  std::atomic<bool> done{false};
  std::thread sender([&] {
    sent = SendShard(p.b.address(), kToken, ShardKeyOf(0, 0, 20), p.a.store->OwnShardPath(0, 20), &bucket, &clock,
                     [] { return false; });
    done = true;
  });
  for (uint64_t second = 0; second * kMiB < total; ++second) {
    // By manual time `second`, at most the burst plus one MiB per second has gone, and
    // exactly that much arrives.
    const uint64_t due = std::min(total, (second + 1) * kMiB);
    REQUIRE(Eventually([&] { return p.b.server->bytes_received() >= due; }));
    CHECK(p.b.server->bytes_received() == due);
    clock.Advance(absl::Seconds(1));
  }
  REQUIRE(Eventually([&] { return done.load(); }));
  sender.join();
  CHECK(sent.ok());
  CHECK(p.b.server->bytes_received() == total);
  CHECK(clock.Now() - start == absl::Seconds(6));  // 5 MiB and a few bytes: six chunks
}

}  // namespace
}  // namespace peregrine::checkpoint
