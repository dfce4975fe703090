// libperegrine_client.so's C ABI (client/peregrine_client.h) on real files, in copy mode
// (snapshot_test.cc has the snapshot mode): the store is a TempDir named by
// PEREGRINE_CHECKPOINT_DIR, set in-process (CTest runs each case in its own process). The agent's FinishShard runs in-process where a case needs a stored shard.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/types/span.h"
#include "checkpoint/shard_format.h"
#include "client/checkpoint_client.h"
#include "client/peregrine_client.h"
#include "tests/client/client_store.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

namespace ckpt = checkpoint;
namespace pgc = client;
using testing::ReadFile;
using testing::ReadFileIfExists;
using testing::TempDir;
using testing::WriteFile;
using client_testing::Finish;
using client_testing::LoadStrings;
using client_testing::Pattern;
using client_testing::SaveStrings;
using client_testing::Store;

TEST_CASE("a saved shard is published, refused until the store finishes it, then loads bit-identical", "[unit]") {
  Store store;
  REQUIRE(pg_available() == 1);
  REQUIRE(pg_abi_version() == 1);
  const std::vector<std::string> segments = {Pattern(1000, 1), "", Pattern(65, 2), Pattern(3 << 20, 3)};
  std::string message;
  REQUIRE(SaveStrings(7, segments, &message) == PG_OK);
  CHECK(message.empty());
  CHECK(store.Names() == std::vector<std::string>{ckpt::ShardFileName(7)});

  // The header: this rank, the world, the layout, the checksum left to the store.
  const std::string bytes = ReadFile(store.Shard(7));
  auto header = ckpt::DecodeShardHeader(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                            bytes.size()));
  REQUIRE(header.ok());
  CHECK(header->step == 7);
  CHECK(header->global_rank == 3);
  CHECK(header->world_size == 8);
  CHECK_FALSE(header->checksum_set);
  CHECK(bytes.size() == ckpt::ShardFileBytes(*header));

  pg_shard* shard = nullptr;
  char err[256] = "";
  CHECK(pg_load(7, &shard, err, sizeof(err)) == PG_ERROR);
  CHECK(shard == nullptr);
  CHECK_THAT(std::string(err), Catch::Contains("checksum not set"));

  Finish(store.Shard(7));
  CHECK(LoadStrings(7) == segments);
}

TEST_CASE("the C++ wrapper saves and loads through the same ABI", "[unit]") {
  Store store;
  const std::vector<float> weights = {1.5f, -2.25f, 3.0f};
  const uint64_t position = 12345;
  pgc::Result r = pgc::Save(4, {pgc::Bytes(weights), pgc::BytesOf(position)});
  INFO(r.message);
  REQUIRE(r.ok());
  Finish(store.Shard(4));
  pgc::Shard shard;
  REQUIRE(pgc::Load(4, &shard).ok());
  REQUIRE(shard.segment_count() == 2);
  CHECK(shard.step() == 4);
  std::vector<float> back(3);
  REQUIRE(shard.Segment(0).size() == sizeof(float) * 3);
  std::memcpy(back.data(), shard.Segment(0).data(), sizeof(float) * 3);
  CHECK(back == weights);
  uint64_t position_back = 0;
  std::memcpy(&position_back, shard.Segment(1).data(), sizeof(position_back));
  CHECK(position_back == position);
  CHECK(shard.Segment(2).empty());
  CHECK(pgc::Load(5, &shard).not_found());
  CHECK_FALSE(shard.loaded());

  // A snapshot save through the wrapper; Wait reports a failed child's reason and step.
  REQUIRE(pgc::Save(6, {pgc::Bytes(weights)}, PG_MODE_SNAPSHOT).ok());
  CHECK(pgc::Wait().ok());
  CHECK(std::filesystem::exists(store.Shard(6)));
  std::filesystem::create_directory(store.Temp(8));
  REQUIRE(pgc::Save(8, {pgc::Bytes(weights)}, PG_MODE_SNAPSHOT).ok());
  uint64_t failed_step = 0;
  const pgc::Result waited = pgc::Wait(&failed_step);
  CHECK(waited.code == PG_ERROR);
  CHECK_THAT(waited.message, Catch::Contains("cannot create"));
  CHECK(failed_step == 8);
}

TEST_CASE("a save over the allowance leaves a .skipped marker with the reason and no shard", "[unit]") {
  Store store;
  setenv("PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES", "8192", 1);
  std::string message;
  REQUIRE(SaveStrings(10, {Pattern(4096, 1)}, &message) == PG_OK);  // 4096 header + 4096 payload fits
  REQUIRE(SaveStrings(20, {Pattern(4097, 1)}, &message) == PG_SKIPPED);
  CHECK_THAT(message, Catch::Contains("allowance of 8192 bytes"));
  CHECK(store.Names() == std::vector<std::string>{ckpt::ShardFileName(10), ckpt::SkippedMarkerName(20)});
  CHECK_THAT(ReadFile(store.Skipped(20)), Catch::Contains("8256 bytes is above this rank's allowance of 8192"));
  setenv("PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES", "lots", 1);
  REQUIRE(SaveStrings(30, {"x"}, &message) == PG_ERROR);
  CHECK_THAT(message, Catch::Contains("PEREGRINE_CHECKPOINT_MAX_SHARD_BYTES=\"lots\""));
}

TEST_CASE("a save that cannot grow its file is skipped, not killed by SIGXFSZ", "[unit]") {
  Store store;
  const std::string state = Pattern(2 << 20, 5);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child's files may not exceed 1 MiB: growing the shard would raise SIGXFSZ.
    rlimit limit{1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(20);
    const void* data[] = {state.data()};
    const uint64_t lengths[] = {state.size()};
    char err[256];
    const int rc = pg_save(9, data, lengths, 1, err, sizeof(err));
    _exit(rc == PG_SKIPPED && std::strstr(err, "RLIMIT_FSIZE") != nullptr ? 0 : 30 + rc);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("wait status " << status);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(store.Names() == std::vector<std::string>{ckpt::SkippedMarkerName(9)});
  CHECK_THAT(ReadFile(store.Skipped(9)), Catch::Contains("file size limit"));
}

TEST_CASE("the first save of a process removes the .tmp files an earlier process of the rank left", "[unit]") {
  Store store;
  WriteFile(store.Temp(5), std::string(8192, 'x'));  // killed in the middle of a save
  WriteFile(store.Skipped(5) + ".writing", "half a reason");
  std::filesystem::create_directory(store.dir.Path("other"));
  REQUIRE(SaveStrings(6, {Pattern(100, 6)}) == PG_OK);
  CHECK(store.Names() == std::vector<std::string>{"other", ckpt::ShardFileName(6)});
}

TEST_CASE("a save claims the agent's free buffer by rename and reuses its pages", "[unit]") {
  Store store;
  // A pruned 1 MiB shard file the agent kept, full of old bytes.
  WriteFile(store.dir.Path("free-0.buf"), std::string(1 << 20, '\xAB'));
  struct stat before{};
  REQUIRE(stat(store.dir.Path("free-0.buf").c_str(), &before) == 0);
  const std::vector<std::string> segments = {Pattern(1001, 7), Pattern(30, 8)};
  REQUIRE(SaveStrings(12, segments) == PG_OK);
  CHECK(store.Names() == std::vector<std::string>{ckpt::ShardFileName(12)});
  struct stat after{};
  REQUIRE(stat(store.Shard(12).c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);  // the same file, renamed
  // Sized to the shard, the old bytes gone from the padding too (the checksum covers it).
  const std::string bytes = ReadFile(store.Shard(12));
  CHECK(bytes.size() == ckpt::kShardHeaderBytes + 1024 + 64);
  CHECK(bytes.substr(ckpt::kShardHeaderBytes + 1001, 23) == std::string(23, '\0'));
  CHECK(bytes.find('\xAB', ckpt::kShardHeaderBytes + 1024 + 30) == std::string::npos);
  Finish(store.Shard(12));
  CHECK(LoadStrings(12) == segments);
  // No buffer left: the next save creates its file.
  REQUIRE(SaveStrings(13, segments) == PG_OK);
  CHECK(store.Names() == std::vector<std::string>{ckpt::ShardFileName(12), ckpt::ShardFileName(13)});
}

TEST_CASE("a corrupt or truncated or foreign shard is refused with a reason and a missing one is not found",
          "[unit]") {
  Store store;
  REQUIRE(SaveStrings(5, {Pattern(5000, 9)}) == PG_OK);
  Finish(store.Shard(5));
  const std::string good = ReadFile(store.Shard(5));
  auto refused = [&](const std::string& bytes) {
    WriteFile(store.Shard(5), bytes);
    pg_shard* shard = nullptr;
    char err[256] = "";
    const int rc = pg_load(5, &shard, err, sizeof(err));
    CHECK(rc == PG_ERROR);
    CHECK(shard == nullptr);
    return std::string(err);
  };
  std::string flipped = good;
  flipped[ckpt::kShardHeaderBytes + 100] ^= 1;
  CHECK_THAT(refused(flipped), Catch::Contains("checksum mismatch"));
  CHECK_THAT(refused(good.substr(0, good.size() - 1)), Catch::Contains("header says"));
  CHECK_THAT(refused(good.substr(0, 100)), Catch::Contains("truncated"));
  CHECK_THAT(refused(std::string(8192, 'x')), Catch::Contains("bad magic"));
  // A shard of another step under this step's name.
  REQUIRE(SaveStrings(6, {Pattern(5000, 9)}) == PG_OK);
  Finish(store.Shard(6));
  CHECK_THAT(refused(ReadFile(store.Shard(6))), Catch::Contains("says step 6"));

  WriteFile(store.Shard(5), good);
  CHECK(LoadStrings(5) == std::vector<std::string>{Pattern(5000, 9)});
  pg_shard* shard = nullptr;
  char err[256] = "";
  CHECK(pg_load(99, &shard, err, sizeof(err)) == PG_NOT_FOUND);
  CHECK_THAT(std::string(err), Catch::Contains("no shard of step 99"));
}

TEST_CASE("without an agent nothing is saved or found", "[unit]") {
  unsetenv("PEREGRINE_CHECKPOINT_DIR");
  CHECK(pg_available() == 0);
  std::string message;
  CHECK(SaveStrings(1, {"state"}, &message) == PG_NO_AGENT);
  CHECK_THAT(message, Catch::Contains("PEREGRINE_CHECKPOINT_DIR"));
  pg_shard* shard = nullptr;
  char err[128];
  CHECK(pg_load(1, &shard, err, sizeof(err)) == PG_NO_AGENT);
  CHECK(shard == nullptr);
  CHECK(pgc::Save(1, {pgc::Bytes(std::string("x"))}).no_agent());
}

TEST_CASE("the resume step comes from PEREGRINE_RESUME_STEP", "[unit]") {
  unsetenv("PEREGRINE_RESUME_STEP");
  CHECK(pg_resume_step() == 0);
  setenv("PEREGRINE_RESUME_STEP", "420", 1);
  CHECK(pg_resume_step() == 420);
  CHECK(pgc::ResumeStep() == 420);
  setenv("PEREGRINE_RESUME_STEP", "-3", 1);
  CHECK(pg_resume_step() == 0);
}

TEST_CASE("bad arguments are errors naming what is wrong", "[unit]") {
  Store store;
  std::string message;
  std::vector<std::string> many(251, "x");
  CHECK(SaveStrings(1, many, &message) == PG_ERROR);
  CHECK_THAT(message, Catch::Contains("at most 250"));
  const uint64_t length = 10;
  const void* null_data[] = {nullptr};
  char err[256];
  CHECK(pg_save(1, null_data, &length, 1, err, sizeof(err)) == PG_ERROR);
  CHECK_THAT(std::string(err), Catch::Contains("segment 0 has a length but no data"));
  CHECK(pg_save(1, nullptr, nullptr, 1, err, sizeof(err)) == PG_ERROR);
  setenv("RANK", "three", 1);
  CHECK(SaveStrings(1, {"x"}, &message) == PG_ERROR);
  CHECK_THAT(message, Catch::Contains("RANK=\"three\""));
  // A short error buffer is truncated and terminated.
  char tiny[8];
  std::memset(tiny, 'z', sizeof(tiny));
  CHECK(pg_save(1, null_data, &length, 1, tiny, sizeof(tiny)) == PG_ERROR);
  CHECK(std::strlen(tiny) == 7);
  CHECK(store.Names().empty());  // nothing left behind
}

TEST_CASE("concurrent saves are serialised: every one is published whole", "[unit]") {
  Store store;
  // 24 MiB each: above the parallel-copy threshold, so the worker pool is shared too.
  constexpr int kThreads = 4;
  std::vector<std::string> states;
  for (int t = 0; t < kThreads; ++t) states.push_back(Pattern(24 << 20, 100 + t));
  std::vector<int> codes(kThreads * 2, -100);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      codes[2 * t] = SaveStrings(50, {states[t]});         // the same step from every thread
      codes[2 * t + 1] = SaveStrings(60 + t, {states[t]});  // a step of its own
    });
  }
  for (auto& th : threads) th.join();
  CHECK(codes == std::vector<int>(kThreads * 2, PG_OK));
  for (int t = 0; t < kThreads; ++t) {
    Finish(store.Shard(60 + t));
    CHECK(LoadStrings(60 + t) == std::vector<std::string>{states[t]});
  }
  Finish(store.Shard(50));
  const std::vector<std::string> last = LoadStrings(50);
  REQUIRE(last.size() == 1);
  CHECK(std::find(states.begin(), states.end(), last[0]) != states.end());  // one save's bytes, whole
  CHECK_FALSE(std::filesystem::exists(store.Temp(50)));
}

TEST_CASE("pg_step prints one flushed progress line", "[unit]") {
  TempDir dir("client-step");
  const std::string out = dir.Path("stdout");
  std::fflush(stdout);
  const int saved = dup(1);
  const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  dup2(fd, 1);
  close(fd);
  const char* names[] = {"grad_norm", "iter_ms"};
  const double values[] = {std::nan(""), 412.5};
  const int with_loss = pg_step(120, 1, 2.5, names, values, 2);
  const int without_loss = pg_step(121, 0, 0, nullptr, nullptr, 0);
  const char* bad[] = {"bad name"};
  const int bad_name = pg_step(122, 0, 0, bad, values, 1);
  const std::string written = ReadFileIfExists(out);  // before stdout comes back: flushed already
  dup2(saved, 1);
  close(saved);
  CHECK(with_loss == PG_OK);
  CHECK(without_loss == PG_OK);
  CHECK(bad_name == PG_ERROR);
  CHECK(written == "[peregrine] step=120 loss=2.5 grad_norm=nan iter_ms=412.5\n[peregrine] step=121\n");
}

}  // namespace
}  // namespace peregrine
