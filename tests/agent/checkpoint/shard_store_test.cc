// ShardStore on real files in a temp dir: shards in the real format, published the way
// the client does, finished by the store's worker; corrupt ones refused.
#include "agent/checkpoint/shard_store.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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
using ::peregrine::testing::SampleShard;
using ::peregrine::testing::TempDir;

struct StoreFixture {
  explicit StoreFixture(BudgetInputs limits = {}) {
    ShardStoreOptions options;
    options.root = dir.path();
    options.job_namespace = "ns";
    options.job_name = "job";
    options.pod_name = "pod-0";
    options.system_limits = [limits] { return limits; };
    auto created = ShardStore::Create(options);
    REQUIRE(created.ok());
    store = std::move(*created);
  }
  void Configure(std::vector<uint32_t> ranks, v1::CheckpointPlan plan = {}) {
    plan.set_interval_steps(10);
    REQUIRE(store->Configure(0, ranks, static_cast<uint32_t>(ranks.size()), plan).ok());
  }
  // Polls until `pred` holds on the report; collects the events on the way.
  bool PollUntil(const std::function<bool(const v1::CheckpointReport&)>& pred) {
    return Eventually([&] {
      for (auto& e : store->Poll()) events.push_back(e);
      return pred(store->Report());
    });
  }
  int Count(v1::CheckpointEvent::Kind kind) const {
    int n = 0;
    for (const auto& e : events) n += e.kind() == kind;
    return n;
  }

  TempDir dir{"ckpt-store"};
  std::unique_ptr<ShardStore> store;
  std::vector<v1::CheckpointEvent> events;
};

std::vector<uint64_t> Stored(const v1::CheckpointReport& r) {
  return std::vector<uint64_t>(r.stored_steps().begin(), r.stored_steps().end());
}

TEST_CASE("the store's area is private and each local rank gets its directory", "[integration]") {
  StoreFixture f;
  f.Configure({4, 5});
  CHECK(f.store->area() == f.dir.path() + "/ns.job/pod-0");
  struct stat st {};
  REQUIRE(::stat(f.store->area().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(fs::is_directory(f.store->OwnRankDir(4)));
  CHECK(fs::is_directory(f.store->OwnRankDir(5)));
}

TEST_CASE("published shards are finished (checksummed) and a step is stored once every rank has it",
          "[integration]") {
  StoreFixture f;
  f.Configure({0, 1});
  const std::string p0 = PublishShard(f.store->OwnRankDir(0), 10, SampleShard(10, 0, 100000));
  CHECK(!VerifyShardFile(p0).ok());  // published without a checksum
  REQUIRE(Eventually([&] {
    f.store->Poll();
    return VerifyShardFile(p0).ok();
  }));
  CHECK(Stored(f.store->Report()).empty());  // rank 1 has not saved step 10
  PublishShard(f.store->OwnRankDir(1), 10, SampleShard(10, 1, 100000));
  REQUIRE(f.PollUntil([](const v1::CheckpointReport& r) { return r.stored_steps_size() == 1; }));
  const v1::CheckpointReport report = f.store->Report();
  CHECK(report.stored_steps(0) == 10);
  CHECK(report.store_bytes() == 2 * (kShardHeaderBytes + 100032));
  CHECK(f.events.empty());
}

TEST_CASE("a backup holder with no address yet is skipped, not failed, and gets the step once its address arrives", "[integration]") {
  StoreFixture f;
  v1::CheckpointPlan plan;
  plan.set_backup_copies(2);
  v1::CheckpointPeerAddress* known = plan.add_backup_to();
  known->set_slot(1);
  known->set_address("10.0.0.2:7000");
  plan.add_backup_to()->set_slot(3);  // a new pod's slot: its agent has not registered
  f.Configure({0}, plan);
  PublishShard(f.store->OwnRankDir(0), 10, SampleShard(10, 0, 1000));
  REQUIRE(f.PollUntil([](const v1::CheckpointReport& r) { return r.stored_steps_size() == 1; }));
  std::optional<BackupJob> job = f.store->NextBackup();
  REQUIRE(job.has_value());
  CHECK(job->peers == std::vector<std::string>{"10.0.0.2:7000"});
  f.store->AcknowledgeBackup(10, "10.0.0.2:7000", 0);
  // One holder has it; the step is not backed up while the other lacks it.
  CHECK(f.store->Report().backed_up_steps_size() == 0);
  job = f.store->NextBackup();
  REQUIRE(job.has_value());
  CHECK(job->peers.empty());

  // Addresses for another plan (other slots or another count) are ignored.
  v1::CheckpointCommit other;
  other.add_backup_to()->set_slot(1);
  CHECK_FALSE(f.store->SetBackupPeers(other.backup_to()));
  other.add_backup_to()->set_slot(2);
  other.mutable_backup_to(1)->set_address("10.0.0.9:7000");
  CHECK_FALSE(f.store->SetBackupPeers(other.backup_to()));

  v1::CheckpointCommit commit;
  *commit.add_backup_to() = *known;
  v1::CheckpointPeerAddress* late = commit.add_backup_to();
  late->set_slot(3);
  late->set_address("10.0.0.4:7000");
  CHECK(f.store->SetBackupPeers(commit.backup_to()));
  CHECK_FALSE(f.store->SetBackupPeers(commit.backup_to()));  // nothing new
  job = f.store->NextBackup();
  REQUIRE(job.has_value());
  CHECK(job->step == 10);
  CHECK(job->peers == std::vector<std::string>{"10.0.0.4:7000"});
  f.store->AcknowledgeBackup(10, "10.0.0.4:7000", 0);
  const v1::CheckpointReport report = f.store->Report();
  REQUIRE(report.backed_up_steps_size() == 1);
  CHECK(report.backed_up_steps(0) == 10);
  CHECK_FALSE(f.store->NextBackup().has_value());
}

TEST_CASE("a corrupt or truncated shard is refused with an event and removed", "[integration]") {
  StoreFixture f;
  f.Configure({0});
  std::vector<uint8_t> truncated = SampleShard(20, 0, 50000);
  truncated.resize(truncated.size() - 100);
  const std::string bad_payload = PublishShard(f.store->OwnRankDir(0), 20, truncated);
  std::vector<uint8_t> bad_header = SampleShard(30, 0, 5000);
  bad_header[3] ^= 0xff;  // the magic
  const std::string bad_magic = PublishShard(f.store->OwnRankDir(0), 30, bad_header);
  REQUIRE(Eventually([&] {
    for (auto& e : f.store->Poll()) f.events.push_back(e);
    return f.Count(v1::CheckpointEvent::CORRUPT_SHARD) == 2;
  }));
  CHECK(!fs::exists(bad_payload));
  CHECK(!fs::exists(bad_magic));
  CHECK(f.store->Report().stored_steps().empty());
}

TEST_CASE("a skipped save's marker becomes a SKIPPED event with its reason", "[integration]") {
  StoreFixture f;
  f.Configure({3});
  const std::string marker = f.store->OwnRankDir(3) + "/" + SkippedMarkerName(40);
  std::ofstream(marker) << "shard of 900 bytes is over the allowance of 800 bytes\n";
  std::vector<v1::CheckpointEvent> events = f.store->Poll();
  REQUIRE(events.size() == 1);
  CHECK(events[0].kind() == v1::CheckpointEvent::SKIPPED);
  CHECK(events[0].step() == 40);
  CHECK(events[0].global_rank() == 3);
  CHECK(events[0].detail() == "shard of 900 bytes is over the allowance of 800 bytes");
  CHECK(!fs::exists(marker));
}

TEST_CASE("pruning keeps the newest two stored steps and the committed one, one pruned file is kept for reuse",
          "[integration]") {
  StoreFixture f;
  v1::CheckpointPlan plan;
  plan.set_committed_step(10);
  f.Configure({0}, plan);
  for (uint64_t step : {10, 20, 30, 40, 50}) PublishShard(f.store->OwnRankDir(0), step, SampleShard(step, 0, 8000));
  REQUIRE(f.PollUntil([](const v1::CheckpointReport& r) { return r.stored_steps_size() == 3; }));
  CHECK(Stored(f.store->Report()) == std::vector<uint64_t>{10, 40, 50});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(f.store->OwnRankDir(0))) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  REQUIRE(names.size() == 4);
  CHECK(absl::StartsWith(names[0], "free-"));
  CHECK(names[1] == ShardFileName(10));
  CHECK(names[2] == ShardFileName(40));
  CHECK(names[3] == ShardFileName(50));
}

TEST_CASE("a small budget reports MEMORY_SHORT once and allows one version", "[integration]") {
  // 2 ranks, ~20 KB shards: two versions need ~80 KB; the plan allows 60 KB.
  StoreFixture f(BudgetInputs{1ull << 40, 0, 0, 0});
  v1::CheckpointPlan plan;
  plan.set_memory_limit_bytes(60000);
  f.Configure({0, 1}, plan);
  CHECK(f.store->Poll().empty());
  CHECK(f.store->AllowanceBytes() == 15000);  // before any save: 60000 / (2 ranks * 2 versions)
  for (uint32_t rank : {0u, 1u}) PublishShard(f.store->OwnRankDir(rank), 10, SampleShard(10, rank, 16000));
  REQUIRE(f.PollUntil([](const v1::CheckpointReport& r) { return r.stored_steps_size() == 1; }));
  for (int i = 0; i < 3; ++i) {
    for (auto& e : f.store->Poll()) f.events.push_back(e);
  }
  CHECK(f.Count(v1::CheckpointEvent::MEMORY_SHORT) == 1);
  CHECK(f.store->AllowanceBytes() == 30000);
  CHECK(f.store->Report().memory_budget_bytes() == 60000);
}

TEST_CASE("the system budget is the smallest of the filesystem, cgroup and file size limits", "[integration]") {
  TempDir cgroup("cgroup");
  cgroup.Write("memory.max", "max\n");
  BudgetInputs none = ReadSystemBudgetInputs(cgroup.path(), cgroup.path());
  CHECK(none.filesystem_bytes > 0);
  CHECK(none.cgroup_limit_bytes == 0);
  cgroup.Write("memory.max", "123456789\n");
  CHECK(ReadSystemBudgetInputs(cgroup.path(), cgroup.path()).cgroup_limit_bytes == 123456789);
  TempDir v1("cgroup-v1");
  v1.Write("memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  CHECK(ReadSystemBudgetInputs(v1.path(), v1.path()).cgroup_limit_bytes == 0);
  v1.Write("memory/memory.limit_in_bytes", "4096000\n");
  CHECK(ReadSystemBudgetInputs(v1.path(), v1.path()).cgroup_limit_bytes == 4096000);
}

TEST_CASE("a restore drops own shards newer than its step", "[integration]") {
  StoreFixture f;
  f.Configure({0});
  for (uint64_t step : {10, 20}) PublishShard(f.store->OwnRankDir(0), step, SampleShard(step, 0, 1000));
  REQUIRE(f.PollUntil([](const v1::CheckpointReport& r) { return r.stored_steps_size() == 2; }));
  f.store->DiscardOwnNewerThan(10);
  CHECK(Stored(f.store->Report()) == std::vector<uint64_t>{10});
  f.store->Poll();
  CHECK(Stored(f.store->Report()) == std::vector<uint64_t>{10});
  CHECK(!fs::exists(f.store->OwnShardPath(0, 20)));
}

}  // namespace
}  // namespace peregrine::checkpoint
