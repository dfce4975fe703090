// Persisted checkpoints: the pure choice of the step to write and of the steps to drop,
// the manifest, the files under a real directory (written, scanned, read back, a corrupt
// or mismatching copy refused, one slot's drop leaving the other's), and the writer
// thread over a real ShardStore (its report, retention, a missing directory's event and
// the retry, a restart that finds the older steps) plus the restore that falls back to
// the persisted copy.
#include "agent/checkpoint/persist_writer.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "agent/checkpoint/restore_fetch.h"
#include "agent/checkpoint/shard_files.h"
#include "tests/agent/checkpoint/shard_samples.h"
#include "tests/testing/eventually.h"
#include "tests/testing/temp_dir.h"

namespace peregrine::checkpoint {
namespace {

namespace v1 = ::peregrine::v1;
namespace fs = std::filesystem;
using ::peregrine::testing::Eventually;
using ::peregrine::testing::PublishShard;
using ::peregrine::testing::ReadBytes;
using ::peregrine::testing::SampleShard;
using ::peregrine::testing::TempDir;
using ::peregrine::testing::WriteBytes;

TEST_CASE("NextPersistStep: the newest eligible step at least every steps after the last persisted", "[unit]") {
  CHECK(NextPersistStep({2, 4}, {}, 0, 4) == 4u);
  CHECK(NextPersistStep({2}, {}, 0, 4) == std::nullopt);        // not yet every steps
  CHECK(NextPersistStep({4, 6}, {4}, 0, 4) == std::nullopt);    // 6 < 4 + 4
  CHECK(NextPersistStep({6, 8}, {4}, 0, 4) == 8u);
  CHECK(NextPersistStep({6, 10}, {4}, 0, 4) == 10u);            // not a multiple: the newest wins
  CHECK(NextPersistStep({8}, {}, 8, 4) == std::nullopt);        // failed at 8: retried at the next step
  CHECK(NextPersistStep({8, 10}, {}, 8, 4) == 10u);
  CHECK(NextPersistStep({8}, {}, 0, 0) == std::nullopt);        // off
  CHECK(NextPersistStep({}, {}, 0, 1) == std::nullopt);
  CHECK(NextPersistStep({12}, {20}, 0, 4) == std::nullopt);     // older than what is persisted
}

TEST_CASE("PersistedToDrop keeps the newest two", "[unit]") {
  CHECK(PersistedToDrop({}).empty());
  CHECK(PersistedToDrop({4, 8}).empty());
  CHECK(PersistedToDrop({12, 4, 8}) == std::vector<uint64_t>{4});
  CHECK(PersistedToDrop({4, 8, 12, 16}, 1) == std::vector<uint64_t>{4, 8, 12});
}

TEST_CASE("Persist paths and step directory names", "[unit]") {
  CHECK(PersistShardPath("/p", 12, 3, 7) == "/p/step-00000000000000000012/slot-3/rank-7.shard");
  CHECK(PersistManifestPath("/p", 12, 3) == "/p/step-00000000000000000012/slot-3.manifest");
  CHECK(ParsePersistStepDirName("step-00000000000000000012") == 12u);
  CHECK(ParsePersistStepDirName("step-12") == std::nullopt);
  CHECK(ParsePersistStepDirName("step-0000000000000000001x") == std::nullopt);
  CHECK(ParsePersistStepDirName("slot-00000000000000000012") == std::nullopt);
}

TEST_CASE("PersistManifest round trip and bad manifests named", "[unit]") {
  PersistManifest m;
  m.step = 40;
  m.slot = 2;
  m.ranks = {{4, 8192, 0xdeadbeef}, {5, 4096, 7}};
  absl::StatusOr<PersistManifest> back = ParsePersistManifest(EncodePersistManifest(m));
  REQUIRE(back.ok());
  CHECK(*back == m);
  auto error = [](const std::string& text) { return std::string(ParsePersistManifest(text).status().message()); };
  CHECK(error("not json") == "manifest is not a JSON object");
  CHECK(error(R"({"slot": 1, "ranks": [{"globalRank": 0, "bytes": 1, "crc32c": 2}]})") ==
        "manifest step is missing or not an unsigned integer");
  CHECK(error(R"({"step": 1, "slot": 1, "ranks": []})") == "manifest ranks is missing or empty");
  CHECK(error(R"({"step": 1, "slot": 1, "ranks": [{"globalRank": 0, "bytes": -1, "crc32c": 2}]})") ==
        "manifest ranks[0].bytes is missing or not an unsigned integer");
  CHECK(error(R"({"step": 1, "slot": 1, "ranks": [{"globalRank": 0, "bytes": 1, "crc32c": 4294967296}]})") ==
        "manifest ranks[0].crc32c is missing or not an unsigned integer");
  CHECK(error(R"({"step": 1, "slot": 1, "ranks": [{"globalRank": 0, "bytes": 1, "crc32c": 2},
                                               {"globalRank": 0, "bytes": 1, "crc32c": 2}]})") ==
        "manifest names rank 0 twice");
}

// Finished shards of `step` for `ranks` under `dir`/src/, as the store keeps them.
std::vector<std::pair<uint32_t, std::string>> Sources(const TempDir& dir, uint64_t step, std::vector<uint32_t> ranks) {
  std::vector<std::pair<uint32_t, std::string>> out;
  fs::create_directories(dir.Path("src"));
  for (uint32_t rank : ranks) {
    const std::string path = dir.Path("src/") + std::to_string(rank) + "-" + ShardFileName(step);
    WriteBytes(path, SampleShard(step, rank, 20000 + rank, /*finished=*/true));
    out.emplace_back(rank, path);
  }
  return out;
}

TEST_CASE("PersistStepFiles writes the shards and the manifest, ScanPersisted and ReadPersistedShard read them", "[integration]") {
  TempDir dir("persist-files");
  const std::string persist = dir.Path("persist");
  fs::create_directories(persist);
  REQUIRE(PersistStepFiles(persist, 1, 8, Sources(dir, 8, {2, 3})).ok());
  REQUIRE(PersistStepFiles(persist, 0, 8, Sources(dir, 8, {0, 1})).ok());
  REQUIRE(PersistStepFiles(persist, 1, 12, Sources(dir, 12, {2, 3})).ok());
  // Only complete copies with their manifest count; leftovers of a cut write do not.
  fs::create_directories(PersistSlotDir(persist, 16, 1));
  WriteBytes(PersistShardPath(persist, 16, 1, 2), SampleShard(16, 2, 100, true));
  CHECK(ScanPersisted(persist, 1).value() == std::vector<uint64_t>{8, 12});
  CHECK(ScanPersisted(persist, 0).value() == std::vector<uint64_t>{8});
  CHECK(ScanPersisted(dir.Path("none"), 0).value().empty());

  absl::StatusOr<std::string> text = [&]() -> absl::StatusOr<std::string> {
    std::ifstream in(PersistManifestPath(persist, 8, 1));
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }();
  absl::StatusOr<PersistManifest> manifest = ParsePersistManifest(*text);
  REQUIRE(manifest.ok());
  REQUIRE(manifest->ranks.size() == 2);
  CHECK(manifest->ranks[0].global_rank == 2);
  CHECK(manifest->ranks[0].bytes == fs::file_size(PersistShardPath(persist, 8, 1, 2)));
  CHECK(manifest->ranks[0].crc32c == VerifyShardFile(PersistShardPath(persist, 8, 1, 2))->payload_crc32c);

  const std::string dest = dir.Path("restored.shard");
  REQUIRE(ReadPersistedShard(persist, 1, 3, 8, dest).ok());
  CHECK(ReadBytes(dest) == SampleShard(8, 3, 20003, true));
  CHECK(absl::IsNotFound(ReadPersistedShard(persist, 1, 9, 8, dest)));   // rank not in the manifest
  CHECK(absl::IsNotFound(ReadPersistedShard(persist, 1, 2, 20, dest)));  // no such step

  SECTION("a flipped byte in a persisted shard is refused") {
    const std::string path = PersistShardPath(persist, 8, 1, 2);
    std::vector<uint8_t> bytes = ReadBytes(path);
    bytes[bytes.size() - 10] ^= 0xff;
    WriteBytes(path, bytes);
    absl::Status s = ReadPersistedShard(persist, 1, 2, 8, dir.Path("x.shard"));
    CHECK(absl::IsDataLoss(s));
    CHECK_FALSE(fs::exists(dir.Path("x.shard")));
    CHECK_FALSE(fs::exists(dir.Path("x.shard.persisted")));
  }
  SECTION("a valid shard that is not the one in the manifest is refused") {
    WriteBytes(PersistShardPath(persist, 8, 1, 2), SampleShard(8, 2, 999, true));
    absl::Status s = ReadPersistedShard(persist, 1, 2, 8, dir.Path("x.shard"));
    CHECK(absl::IsDataLoss(s));
    CHECK(absl::StrContains(s.message(), "does not match its manifest"));
  }
  SECTION("dropping one slot's step leaves the other slot's copy and the step directory") {
    REQUIRE(DropPersistedStep(persist, 1, 8).ok());
    CHECK_FALSE(fs::exists(PersistSlotDir(persist, 8, 1)));
    CHECK_FALSE(fs::exists(PersistManifestPath(persist, 8, 1)));
    CHECK(ScanPersisted(persist, 0).value() == std::vector<uint64_t>{8});
    REQUIRE(DropPersistedStep(persist, 0, 8).ok());
    CHECK_FALSE(fs::exists(PersistStepDir(persist, 8)));
  }
}

TEST_CASE("PersistStepFiles: a directory that cannot be made, a file as directory and a corrupt source are errors", "[integration]") {
  TempDir dir("persist-errors");
  dir.Write("file", "x");
  absl::Status blocked = PersistStepFiles(dir.Path("file/below"), 0, 4, Sources(dir, 4, {0}));
  CHECK(absl::IsNotFound(blocked));
  CHECK(absl::StrContains(blocked.message(), dir.Path("file/below")));
  CHECK_FALSE(PersistStepFiles(dir.Path("file"), 0, 4, Sources(dir, 4, {0})).ok());
  // A missing directory below an existing one is made (persistPath below a volume's mount).
  REQUIRE(PersistStepFiles(dir.Path("mount/job"), 0, 4, Sources(dir, 4, {0})).ok());
  CHECK(ScanPersisted(dir.Path("mount/job"), 0).value() == std::vector<uint64_t>{4});
  fs::create_directories(dir.Path("persist"));
  auto sources = Sources(dir, 4, {0});
  std::vector<uint8_t> bytes = ReadBytes(sources[0].second);
  bytes.back() ^= 1;
  WriteBytes(sources[0].second, bytes);
  CHECK(absl::IsDataLoss(PersistStepFiles(dir.Path("persist"), 0, 4, sources)));
  CHECK_FALSE(fs::exists(PersistManifestPath(dir.Path("persist"), 4, 0)));
}

struct WriterFixture {
  WriterFixture() {
    ShardStoreOptions options;
    options.root = dir.Path("shm");
    options.job_namespace = "ns";
    options.job_name = "job";
    options.pod_name = "pod-0";
    options.system_limits = [] { return BudgetInputs{}; };
    auto created = ShardStore::Create(options);
    REQUIRE(created.ok());
    store = std::move(*created);
    persist = dir.Path("persist");
  }
  void Configure(uint32_t every, const std::string& persist_dir) {
    v1::CheckpointPlan plan;
    plan.set_interval_steps(2);
    plan.set_persist_every_steps(every);
    plan.set_persist_dir(persist_dir);
    plan.set_committed_step(committed);
    REQUIRE(store->Configure(1, {2, 3}, 2, plan).ok());
  }
  void Save(uint64_t step) {
    for (uint32_t rank : {2u, 3u}) PublishShard(store->OwnRankDir(rank), step, SampleShard(step, rank, 5000 + rank));
  }
  // Polls the store and wakes the writer until `pred` holds on the report.
  bool Until(const std::function<bool(const v1::CheckpointReport&)>& pred) {
    return Eventually([&] {
      for (auto& e : store->Poll()) events.push_back(e);
      writer->Wake();
      return pred(store->Report());
    });
  }
  static std::vector<uint64_t> Persisted(const v1::CheckpointReport& r) {
    return {r.persisted_steps().begin(), r.persisted_steps().end()};
  }

  TempDir dir{"persist-writer"};
  std::unique_ptr<ShardStore> store;
  std::unique_ptr<PersistWriter> writer;
  std::string persist;
  uint64_t committed = 0;
  std::vector<v1::CheckpointEvent> events;
};

TEST_CASE("PersistWriter persists every N steps, keeps two, and a restarted writer finds them", "[integration]") {
  WriterFixture f;
  fs::create_directories(f.persist);
  f.Configure(4, f.persist);
  f.writer = std::make_unique<PersistWriter>(f.store.get());
  f.Save(2);
  REQUIRE(f.Until([](const v1::CheckpointReport& r) { return r.stored_steps_size() == 1; }));
  f.Save(4);
  REQUIRE(f.Until([](const auto& r) { return WriterFixture::Persisted(r) == std::vector<uint64_t>{4}; }));
  for (uint64_t step : {6, 8}) f.Save(step);
  REQUIRE(f.Until([](const auto& r) { return WriterFixture::Persisted(r) == std::vector<uint64_t>{4, 8}; }));
  f.Save(10);
  f.Save(12);
  REQUIRE(f.Until([](const auto& r) { return WriterFixture::Persisted(r) == std::vector<uint64_t>{8, 12}; }));
  CHECK_FALSE(fs::exists(PersistStepDir(f.persist, 4)));  // older steps deleted
  CHECK(ScanPersisted(f.persist, 1).value() == std::vector<uint64_t>{8, 12});
  // The copy is the shard the store finished, byte for byte.
  CHECK(ReadBytes(PersistShardPath(f.persist, 12, 1, 3)) == ReadBytes(f.store->OwnShardPath(3, 12)));

  // A new writer (an agent restart) reports what is on disk before writing anything.
  f.writer.reset();
  f.store->SetPersistedSteps({});
  f.writer = std::make_unique<PersistWriter>(f.store.get());
  REQUIRE(f.Until([](const auto& r) { return WriterFixture::Persisted(r) == std::vector<uint64_t>{8, 12}; }));

  // A restore to 8 abandons 12's timeline (RestoreShards drops the own shards newer
  // than 8): it is no longer reported and its files go.
  f.store->DiscardOwnNewerThan(8);
  f.writer->DiscardNewerThan(8);
  CHECK(WriterFixture::Persisted(f.store->Report()) == std::vector<uint64_t>{8});
  REQUIRE(Eventually([&] {
    f.writer->Wake();
    return !fs::exists(PersistStepDir(f.persist, 12));
  }));
  f.writer.reset();
  for (const auto& e : f.events) CHECK(e.kind() != v1::CheckpointEvent::PERSIST_FAILED);
}

TEST_CASE("PersistWriter: a directory that cannot be made is a PERSIST_FAILED event, retried at the next eligible step", "[integration]") {
  WriterFixture f;
  f.dir.Write("persist", "a file where the directory should be");
  f.Configure(2, f.persist);
  f.writer = std::make_unique<PersistWriter>(f.store.get());
  f.Save(2);
  auto write_failed = [](const v1::CheckpointEvent& e) {
    return e.kind() == v1::CheckpointEvent::PERSIST_FAILED && e.step() == 2;
  };
  REQUIRE(f.Until([&](const auto&) { return std::any_of(f.events.begin(), f.events.end(), write_failed); }));
  const auto failed = std::find_if(f.events.begin(), f.events.end(), write_failed);
  CHECK(absl::StrContains(failed->detail(), f.persist));
  CHECK(absl::StrContains(failed->detail(), "retried at the next eligible step"));
  CHECK(f.store->Report().persisted_steps_size() == 0);
  fs::remove(f.persist);
  f.Save(4);
  REQUIRE(f.Until([](const auto& r) { return WriterFixture::Persisted(r) == std::vector<uint64_t>{4}; }));
  f.writer.reset();
}

TEST_CASE("RestoreShards falls back to the persisted copy when neither the own copy nor a holder has the step", "[integration]") {
  WriterFixture f;
  fs::create_directories(f.persist);
  f.Configure(2, f.persist);
  f.writer = std::make_unique<PersistWriter>(f.store.get());
  f.Save(2);
  REQUIRE(f.Until([](const auto& r) { return WriterFixture::Persisted(r) == std::vector<uint64_t>{2}; }));
  f.writer.reset();
  const std::vector<uint8_t> expected = ReadBytes(f.store->OwnShardPath(2, 2));
  fs::remove(f.store->OwnShardPath(2, 2));  // the own copy of rank 2 is gone; rank 3's stays

  RestoreOutcome out = RestoreShards(*f.store, 1, {2, 3}, 2, {}, "token", f.persist);
  REQUIRE(out.status.ok());
  CHECK(ReadBytes(f.store->OwnShardPath(2, 2)) == expected);
  REQUIRE(out.events.size() == 1);
  CHECK(out.events[0].kind() == v1::CheckpointEvent::RESTORED);
  CHECK(out.events[0].global_rank() == 2);
  CHECK(out.events[0].detail() == "from the persisted copy in " + f.persist);

  SECTION("a corrupt persisted copy fails the restore, naming it") {
    fs::remove(f.store->OwnShardPath(2, 2));
    std::vector<uint8_t> bytes = ReadBytes(PersistShardPath(f.persist, 2, 1, 2));
    bytes[bytes.size() / 2] ^= 0x40;
    WriteBytes(PersistShardPath(f.persist, 2, 1, 2), bytes);
    RestoreOutcome bad = RestoreShards(*f.store, 1, {2, 3}, 2, {}, "token", f.persist);
    CHECK_FALSE(bad.status.ok());
    CHECK(absl::StrContains(bad.status.message(), "persisted copy " + PersistShardPath(f.persist, 2, 1, 2)));
    bool corrupt = false;
    for (const auto& e : bad.events) corrupt |= e.kind() == v1::CheckpointEvent::CORRUPT_SHARD;
    CHECK(corrupt);
  }
}

}  // namespace
}  // namespace peregrine::checkpoint
