// StackCaptureWorker: a burst of captures keeps the agent's thread count flat (one worker
// plus CaptureStacks' bounded pool), the excess is refused at once, and every accepted
// capture reaches its callback with real stacks.
#include "agent/stack_capture_worker.h"

#include <dirent.h>
#include <spawn.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process_guard.h"

extern char** environ;

namespace peregrine {
namespace {

using testing::DescendantGuard;
using testing::Eventually;

int ThreadsOfThisProcess() {
  int n = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (struct dirent* e = ::readdir(dir)) n += e->d_name[0] != '.';
    ::closedir(dir);
  }
  return n;
}

TEST_CASE("1000 captures in a row keep the thread count bounded and the excess is refused", "[integration]") {
  DescendantGuard guard;
  std::vector<char*> argv = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                             const_cast<char*>("sleep 300 & sleep 300 & sleep 300 & sleep 300 & sleep 300 & wait"), nullptr};
  pid_t rank = 0;
  REQUIRE(posix_spawn(&rank, "/bin/sh", nullptr, nullptr, argv.data(), environ) == 0);
  constexpr int kParallel = 4;
  const int baseline = ThreadsOfThisProcess();
  std::atomic<int> most{baseline};
  REQUIRE(Eventually([&] { return WithDescendants({StackTarget{rank, 0}}).size() >= 6; }));
  auto sample = [&] {
    const int now = ThreadsOfThisProcess();
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
  };
  std::mutex mu;
  int finished = 0, whole_tree = 0, with_stacks = 0;
  int accepted = 0, refused = 0;
  {
    StackCaptureWorker worker;
    sample();
    for (int i = 0; i < 1000; ++i) {
      StackCaptureOptions options;
      options.max_parallel = kParallel;
      options.timeout_per_process = absl::Seconds(60);
      absl::Status s = worker.Submit({StackTarget{rank, 0}}, options, [&](std::vector<CapturedStack> stacks) {
        sample();
        std::lock_guard<std::mutex> lock(mu);
        ++finished;
        whole_tree += stacks.size() >= 6 && stacks[0].pid == rank;
        with_stacks += !stacks.empty() && stacks[0].ok;
      });
      sample();
      if (s.ok()) {
        ++accepted;
      } else {
        ++refused;
        CHECK(s.code() == absl::StatusCode::kResourceExhausted);
        CHECK(absl::StrContains(s.message(), "captures already wait"));
      }
    }
    REQUIRE(Eventually([&] {
      sample();
      std::lock_guard<std::mutex> lock(mu);
      return finished == accepted;
    }, absl::Seconds(600)));
  }
  INFO("baseline " << baseline << " threads, at most " << most.load() << "; accepted " << accepted);
  CHECK(accepted + refused == 1000);
  CHECK(accepted >= static_cast<int>(kMaxQueuedStackCaptures));  // plus the running one, if it started
  CHECK(refused > 0);
  CHECK(whole_tree == accepted);
  CHECK(with_stacks > 0);  // a real tool ran (one can fail now and then: it is not what this tests)
  // The worker and, while a capture runs, its pool of kParallel - 1 helpers (the worker
  // captures too).
  CHECK(most.load() <= baseline + kParallel);
  CHECK(ThreadsOfThisProcess() == baseline);
}

}  // namespace
}  // namespace peregrine
