// Stack capture of the training process tree (agent/stack_capture.h) on real processes:
// every descendant is found and carries its rank (its ancestor's, or RANK from its
// environment under a launcher that is no rank), and a real stack tool's text parses.
#include "agent/stack_capture.h"

#include <spawn.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "diagnosis/stack_parse.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

extern char** environ;

namespace peregrine {
namespace {

using testing::DescendantGuard;
using testing::Eventually;

// Starts /bin/sh -c `script` (a test fixture, not how the agent starts anything).
pid_t SpawnShell(const std::string& script) {
  std::vector<char*> argv = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                             const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, argv.data(), environ) == 0);
  return pid;
}

std::map<pid_t, int> RanksOf(const std::vector<StackTarget>& targets) {
  std::map<pid_t, int> out;
  for (const StackTarget& t : targets) out[t.pid] = t.global_rank;
  return out;
}

TEST_CASE("Descendants of a rank carry its global rank, to any depth", "[unit]") {
  DescendantGuard guard;
  // A rank with a data-loader worker that has a child of its own, and a checkpoint writer.
  const pid_t rank = SpawnShell("/bin/sh -c 'sleep 60 & wait' & sleep 60 & wait");
  std::vector<StackTarget> found;
  REQUIRE(Eventually([&] {
    found = WithDescendants({StackTarget{rank, 3}});
    return found.size() >= 4;  // sh, inner sh, its sleep, the other sleep
  }));
  CHECK(found[0].pid == rank);
  for (const StackTarget& t : found) CHECK(t.global_rank == 3);
  CHECK(RanksOf(found).size() == found.size());  // no duplicates
}

TEST_CASE("Under a launcher that is no rank, children take RANK from their environment", "[unit]") {
  DescendantGuard guard;
  const pid_t launcher = SpawnShell("RANK=5 sleep 60 & RANK=6 sleep 60 & sleep 60 & wait");
  std::vector<StackTarget> found;
  // Wait until the three children have exec'd sleep: a forked child still running the
  // shell has the launcher's environment (RANK=N applies at exec).
  REQUIRE(Eventually([&] {
    found = WithDescendants({StackTarget{launcher, -1}});
    int sleeping = 0;
    for (const StackTarget& t : found) {
      std::ifstream comm("/proc/" + std::to_string(t.pid) + "/comm");
      std::string name;
      sleeping += (comm >> name) && name == "sleep";
    }
    return found.size() >= 4 && sleeping == 3;
  }));
  std::vector<int> ranks;
  for (const StackTarget& t : found) ranks.push_back(t.global_rank);
  std::sort(ranks.begin(), ranks.end());
  // The launcher and the child without RANK stay -1 (unless the test runs with RANK set).
  const char* inherited = std::getenv("RANK");
  if (inherited == nullptr) CHECK(ranks == std::vector<int>{-1, -1, 5, 6});
  CHECK(std::count(ranks.begin(), ranks.end(), 5) == 1);
  CHECK(std::count(ranks.begin(), ranks.end(), 6) == 1);
}

TEST_CASE("Real processes' stacks are captured (in parallel, in order) and parse", "[integration]") {
  if (!std::filesystem::exists("/usr/bin/eu-stack") && !std::filesystem::exists("/usr/bin/gdb")) {
    WARN("neither eu-stack nor gdb is installed");
    return;
  }
  DescendantGuard guard;
  std::vector<StackTarget> targets;
  for (int rank = 0; rank < 3; ++rank) targets.push_back(StackTarget{SpawnShell("exec sleep 60"), rank});
  for (const StackTarget& t : targets) {
    REQUIRE(Eventually([&] {
      std::ifstream in(absl::StrCat("/proc/", t.pid, "/cmdline"));
      std::string cmd;
      std::getline(in, cmd);
      return cmd.rfind("sleep", 0) == 0;
    }));
  }
  StackCaptureOptions options;
  options.timeout_per_process = absl::Seconds(60);
  options.max_parallel = 2;
  std::vector<CapturedStack> stacks = CaptureStacks(targets, options);
  REQUIRE(stacks.size() == 3);
  for (size_t i = 0; i < stacks.size(); ++i) {
    const CapturedStack& s = stacks[i];
    INFO(s.raw);
    REQUIRE(s.ok);
    CHECK(s.pid == targets[i].pid);
    CHECK(s.global_rank == static_cast<int>(i));
    CHECK(s.command.rfind("sleep 60", 0) == 0);
    StackTool tool =
        s.tool == "gdb" ? StackTool::kGdb : s.tool == "py-spy" ? StackTool::kPySpy : StackTool::kEuStack;
    auto parsed = ParseStackText(tool, s.raw, s.pid);
    REQUIRE(parsed.ok());
    REQUIRE(!parsed->empty());
    REQUIRE(!(*parsed)[0].threads.empty());
    bool sleeping = false;
    for (const StackFrame& f : (*parsed)[0].threads[0].frames) sleeping |= f.function.find("sleep") != std::string::npos;
    CHECK(sleeping);  // clock_nanosleep / __nanosleep
  }
}

// PATH set to `path` for the scope (CaptureStacks looks tools up on PATH), restored after.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& path) {
    const char* old = std::getenv("PATH");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("PATH", path.c_str(), 1);
  }
  ~ScopedPath() {
    if (had_) {
      ::setenv("PATH", old_.c_str(), 1);
    } else {
      ::unsetenv("PATH");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

TEST_CASE("Tools missing from PATH are taken from tool_dir (the agent bundle's bin)", "[integration]") {
  if (!std::filesystem::exists("/usr/bin/gdb")) {
    WARN("gdb is not installed");
    return;
  }
  DescendantGuard guard;
  testing::TempDir temp("peregrine-tools");
  const std::filesystem::path dir = temp.path();
  std::filesystem::create_directories(dir / "empty");
  std::filesystem::create_directories(dir / "bundle-bin");
  std::filesystem::create_symlink("/usr/bin/gdb", dir / "bundle-bin/gdb");
  const std::vector<StackTarget> targets = {StackTarget{SpawnShell("exec sleep 60"), 0}};
  REQUIRE(Eventually([&] {
    std::ifstream in(absl::StrCat("/proc/", targets[0].pid, "/cmdline"));
    std::string cmd;
    std::getline(in, cmd);
    return cmd.rfind("sleep", 0) == 0;
  }));
  StackCaptureOptions options;
  options.timeout_per_process = absl::Seconds(60);
  std::vector<CapturedStack> stacks;
  {
    ScopedPath path((dir / "empty").string());  // the training image has no stack tool
    stacks = CaptureStacks(targets, options);
    REQUIRE(stacks.size() == 1);
    CHECK_FALSE(stacks[0].ok);
    CHECK(stacks[0].raw == "no stack tool available (py-spy, eu-stack, gdb)");
    options.tool_dir = (dir / "bundle-bin").string();
    stacks = CaptureStacks(targets, options);
  }
  REQUIRE(stacks.size() == 1);
  INFO(stacks[0].raw);
  CHECK(stacks[0].ok);
  CHECK(stacks[0].tool == "gdb");
  auto parsed = ParseStackText(StackTool::kGdb, stacks[0].raw, stacks[0].pid);
  REQUIRE(parsed.ok());
  REQUIRE(!parsed->empty());
  CHECK(!(*parsed)[0].threads.empty());
}

}  // namespace
}  // namespace peregrine
