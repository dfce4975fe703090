// DiagnosticRunner with a fake spawner: validation before queueing, one diagnostic at a time
// in order, the helper's command line, and shutdown dropping what is queued.
#include <condition_variable>
#include <mutex>

#include <catch2/catch.hpp>

#include "agent/diagnostics/diagnostic_runner.h"

namespace peregrine {
namespace {

// Blocks each spawn until released; records the kinds in the order they started.
struct GatedSpawner {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> started;
  int running = 0, max_running = 0, released = 0;

  absl::StatusOr<HelperRun> Spawn(const std::vector<std::string>& argv, absl::Duration) {
    std::unique_lock<std::mutex> lock(mu);
    started.push_back(argv.at(2));  // --kind KIND
    const size_t me = started.size();
    max_running = std::max(max_running, ++running);
    cv.notify_all();
    cv.wait(lock, [&] { return released >= static_cast<int>(me); });
    --running;
    HelperRun run;
    run.output = "peregrine-diagnose: result passed: true detail: \"" + argv.at(2) + "\"\n";
    return run;
  }
  void WaitStarted(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started.size() >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    ++released;
    cv.notify_all();
  }
};

TEST_CASE("the runner validates, then runs diagnostics one at a time in order", "[unit]") {
  GatedSpawner spawner;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> done;
  {
    DiagnosticRunnerOptions options;
    options.helper_binary = "peregrine-diagnose";
    options.spawn = [&](const std::vector<std::string>& argv, absl::Duration t) { return spawner.Spawn(argv, t); };
    DiagnosticRunner runner(options);
    auto on_done = [&](const v1::Status& status, const v1::DiagnosticResult& result) {
      std::lock_guard<std::mutex> lock(mu);
      CHECK(status.code() == 0);
      done.push_back(result.detail());
      cv.notify_all();
    };
    DiagnosticRunRequest bad;
    bad.kind = "eud";
    bad.params = {{"level", "7"}};
    CHECK(runner.Submit(bad, on_done).code() == absl::StatusCode::kInvalidArgument);
    for (const char* kind : {"eud", "alignment", "gemm"}) {
      DiagnosticRunRequest r;
      r.kind = kind;
      REQUIRE(runner.Submit(r, on_done).ok());
    }
    spawner.WaitStarted(1);
    spawner.Release();
    spawner.WaitStarted(2);
    spawner.Release();
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done.size() == 2; });
    }
    spawner.WaitStarted(3);
    spawner.Release();  // the third finishes, or is dropped by the destructor: either way no callback after it
  }
  CHECK(spawner.max_running == 1);
  CHECK(spawner.started == std::vector<std::string>{"eud", "alignment", "gemm"});
  REQUIRE(done.size() >= 2);
  CHECK(done[0] == "eud");
  CHECK(done[1] == "alignment");
}

}  // namespace
}  // namespace peregrine
