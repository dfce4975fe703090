// The snapshot save mode of libperegrine_client.so on real files and real processes:
// pg_save forks, the child writes the shard from its copy-on-write image, the caller's
// later writes do not reach the shard, one child at a time, failures reported by pg_wait
// with a marker and no process left behind, load and exit wait for the child.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/shard_format.h"
#include "client/peregrine_client.h"
#include "tests/client/client_store.h"
#include "tests/testing/files.h"
#include "tests/testing/process_guard.h"

namespace peregrine {
namespace {

namespace ckpt = checkpoint;
using client_testing::Finish;
using client_testing::LoadStrings;
using client_testing::Pattern;
using client_testing::Store;
using testing::DescendantGuard;
using testing::Descendants;
using testing::NoDescendantsLeft;
using testing::ReadFile;
using testing::ReadFileIfExists;

struct Outcome {
  int code = PG_NOT_FOUND;
  uint64_t step = 0;
  std::string message;
};

Outcome Wait(bool block = true) {
  Outcome o;
  char err[1024] = "unchanged";
  o.code = pg_wait(block ? 1 : 0, &o.step, err, sizeof(err));
  o.message = err;
  return o;
}

// Saves the strings' current bytes in the given mode (the strings stay the caller's).
int SaveMode(uint64_t step, std::vector<std::string>& segments, int mode, std::string* message = nullptr) {
  std::vector<const void*> data;
  std::vector<uint64_t> lengths;
  for (const auto& s : segments) {
    data.push_back(s.data());
    lengths.push_back(s.size());
  }
  char err[1024] = "unchanged";
  const int rc = pg_save_mode(step, data.data(), lengths.data(), static_cast<uint32_t>(segments.size()), mode, err,
                              sizeof(err));
  if (message != nullptr) *message = err;
  return rc;
}

void Scribble(std::vector<std::string>& segments) {
  for (auto& s : segments) std::memset(s.data(), 0x5a, s.size());
}

TEST_CASE("a snapshot save is published by its child and loads bit-identical though the caller overwrote the state at once", "[unit]") {
  DescendantGuard guard;
  Store store("snapshot");
  const std::vector<std::string> original = {Pattern(1000, 1), "", Pattern(65, 2), Pattern(24 << 20, 3)};
  std::vector<std::string> live = original;
  std::string message;
  REQUIRE(SaveMode(7, live, PG_MODE_DEFAULT, &message) == PG_OK);  // PEREGRINE_CHECKPOINT_MODE=snapshot
  CHECK(message.empty());
  Scribble(live);  // the training step right after save returned
  const Outcome o = Wait();
  INFO(o.message);
  REQUIRE(o.code == PG_OK);
  CHECK(o.step == 7);
  CHECK(Wait().code == PG_NOT_FOUND);  // each outcome is reported once
  CHECK(store.Names() == std::vector<std::string>{ckpt::ShardFileName(7)});
  Finish(store.Shard(7));
  CHECK(LoadStrings(7) == original);
  CHECK(NoDescendantsLeft());
}

TEST_CASE("a snapshot of segments that overlap in memory saves every byte of each", "[unit]") {
  DescendantGuard guard;
  Store store("snapshot");
  // One buffer saved whole and through two views (a tensor and views of its storage): the
  // child must not release pages another segment still has to read.
  std::string buffer = Pattern(8 << 20, 11);
  const std::vector<std::string> expected = {buffer, buffer.substr(4096, 3 << 20), buffer.substr(6 << 20, 1 << 20)};
  const void* data[] = {buffer.data(), buffer.data() + 4096, buffer.data() + (6 << 20)};
  const uint64_t lengths[] = {buffer.size(), 3 << 20, 1 << 20};
  char err[256] = "";
  REQUIRE(pg_save_mode(2, data, lengths, 3, PG_MODE_SNAPSHOT, err, sizeof(err)) == PG_OK);
  std::memset(buffer.data(), 0, buffer.size());
  REQUIRE(Wait().code == PG_OK);
  Finish(store.Shard(2));
  CHECK(LoadStrings(2) == expected);
}

TEST_CASE("back-to-back snapshot saves each wait for the previous child and all publish", "[unit]") {
  DescendantGuard guard;
  Store store("copy");  // the argument overrides the environment
  std::vector<std::string> live = {Pattern(4 << 20, 0), Pattern(100, 0)};
  std::vector<std::vector<std::string>> saved;
  for (uint64_t step = 1; step <= 6; ++step) {
    live = {Pattern(4 << 20, static_cast<unsigned>(step)), Pattern(100, static_cast<unsigned>(step))};
    saved.push_back(live);
    REQUIRE(SaveMode(step, live, PG_MODE_SNAPSHOT) == PG_OK);
    CHECK(Descendants().size() <= 1);  // never more than one child in flight
    Scribble(live);
  }
  for (uint64_t step = 1; step <= 6; ++step) {
    const Outcome o = Wait();
    INFO(o.message);
    CHECK(o.code == PG_OK);
    CHECK(o.step == step);  // oldest first
  }
  CHECK(Wait().code == PG_NOT_FOUND);
  for (uint64_t step = 1; step <= 6; ++step) {
    Finish(store.Shard(step));
    CHECK(LoadStrings(step) == saved[step - 1]);
  }
  CHECK(NoDescendantsLeft());
}

TEST_CASE("a snapshot child that cannot create its file is reported with a marker and leaves no process", "[unit]") {
  DescendantGuard guard;
  Store store("snapshot");
  // A directory where the child must create step-5.tmp: open fails in the child only.
  std::filesystem::create_directory(store.Temp(5));
  std::vector<std::string> live = {Pattern(1 << 20, 5)};
  REQUIRE(SaveMode(5, live, PG_MODE_DEFAULT) == PG_OK);
  const Outcome o = Wait();
  CHECK(o.code == PG_ERROR);
  CHECK(o.step == 5);
  CHECK_THAT(o.message, Catch::Contains("cannot create " + store.Temp(5)));
  CHECK_THAT(ReadFile(store.Skipped(5)), Catch::Contains("cannot create"));
  CHECK_FALSE(std::filesystem::exists(store.Shard(5)));
  CHECK(Descendants().empty());  // reaped: no zombie
}

TEST_CASE("a snapshot into a removed store directory fails in the child, is reported and leaves nothing", "[unit]") {
  DescendantGuard guard;
  Store store("snapshot");
  const std::string gone = store.dir.Path("rank-0");
  std::filesystem::create_directory(gone);
  setenv("PEREGRINE_CHECKPOINT_DIR", gone.c_str(), 1);
  std::filesystem::remove(gone);
  std::vector<std::string> live = {Pattern(4096, 1)};
  REQUIRE(SaveMode(3, live, PG_MODE_SNAPSHOT) == PG_OK);
  // The next save (into the store that exists) waits for the failed child first; its
  // outcome is kept for pg_wait.
  setenv("PEREGRINE_CHECKPOINT_DIR", store.dir.path().c_str(), 1);
  REQUIRE(SaveMode(4, live, PG_MODE_SNAPSHOT) == PG_OK);
  const Outcome first = Wait();
  CHECK(first.code == PG_ERROR);
  CHECK(first.step == 3);
  CHECK_THAT(first.message, Catch::Contains("No such file or directory"));
  const Outcome second = Wait();
  CHECK(second.code == PG_OK);
  CHECK(second.step == 4);
  CHECK(store.Names() == std::vector<std::string>{ckpt::ShardFileName(4)});
  CHECK(Descendants().empty());
}

TEST_CASE("a load of the step being snapshotted waits for the child", "[unit]") {
  DescendantGuard guard;
  Store store("snapshot");
  std::vector<std::string> live = {Pattern(64 << 20, 9)};
  REQUIRE(SaveMode(9, live, PG_MODE_DEFAULT) == PG_OK);
  pg_shard* shard = nullptr;
  char err[512] = "";
  // Not PG_NOT_FOUND: the shard is there (published, not yet finished by the agent).
  CHECK(pg_load(9, &shard, err, sizeof(err)) == PG_ERROR);
  CHECK_THAT(std::string(err), Catch::Contains("checksum not set"));
  CHECK(Descendants().empty());
  CHECK(Wait(/*block=*/false).code == PG_OK);  // the result waits for pg_wait
  Finish(store.Shard(9));
  CHECK(LoadStrings(9) == std::vector<std::string>{Pattern(64 << 20, 9)});
}

TEST_CASE("a process that exits right after a snapshot save leaves its shard complete and no child", "[unit]") {
  DescendantGuard guard;
  Store store("snapshot");
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::vector<std::string> live = {Pattern(64 << 20, 4)};
    const int rc = SaveMode(4, live, PG_MODE_SNAPSHOT);
    std::exit(rc == PG_OK ? 0 : 3);  // exit(): the library waits for its child
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(Descendants().empty());  // the grandchild ended before its parent did
  REQUIRE(std::filesystem::exists(store.Shard(4)));
  Finish(store.Shard(4));
  CHECK(LoadStrings(4) == std::vector<std::string>{Pattern(64 << 20, 4)});
}

TEST_CASE("the save mode is checked: an unknown environment value or argument is an error naming it", "[unit]") {
  Store store("sometimes");
  std::vector<std::string> live = {"x"};
  std::string message;
  CHECK(SaveMode(1, live, PG_MODE_DEFAULT, &message) == PG_ERROR);
  CHECK_THAT(message, Catch::Contains("PEREGRINE_CHECKPOINT_MODE=\"sometimes\""));
  CHECK(SaveMode(1, live, 7, &message) == PG_ERROR);
  CHECK_THAT(message, Catch::Contains("mode 7"));
  CHECK(SaveMode(1, live, PG_MODE_COPY, &message) == PG_OK);  // copy: published on return
  CHECK(store.Names() == std::vector<std::string>{ckpt::ShardFileName(1)});
  CHECK(Wait().code == PG_NOT_FOUND);  // a copy save has no outcome to report
}

}  // namespace
}  // namespace peregrine
