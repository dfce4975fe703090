// The agent's parts run on the Clock they are given (base/clock.h), not the system clock:
// the controller link's reconnect backoff, a helper tool's timeout and the diagnostic
// runner's timing of a helper.
#include <atomic>
#include <mutex>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"
#include "agent/controller_link.h"
#include "agent/diagnostics/diagnostic_runner.h"
#include "agent/supervisor.h"
#include "base/clock.h"
#include "tests/testing/eventually.h"
#include "tests/testing/ports.h"

namespace peregrine {
namespace {

using ::peregrine::testing::Eventually;

// A clock that moves a minute forward every time it is read.
class RacingClock : public Clock {
 public:
  absl::Time Now() override { return absl::FromUnixSeconds(1700000000) + absl::Minutes(reads_++); }
  bool WaitWithDeadline(absl::CondVar&, absl::Mutex&, absl::Time deadline) override {
    return Now() >= deadline;
  }

 private:
  std::atomic<int64_t> reads_{0};
};

TEST_CASE("the controller link waits its reconnect backoff on the injected clock", "[unit]") {
  ManualClock clock;
  std::mutex mu;
  int closed = 0;
  ControllerLinkOptions options;
  options.target = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());  // nothing listens there
  options.backoff_initial = absl::Hours(1);  // on the system clock: no second attempt within the test
  options.backoff_max = absl::Hours(1);
  options.clock = &clock;
  ControllerLink::Callbacks callbacks;
  callbacks.on_stream_open = [](uint64_t) {};
  callbacks.on_message = [](uint64_t, v1::ControllerMessage) {};
  callbacks.on_stream_closed = [&](uint64_t, absl::Status) {
    std::lock_guard<std::mutex> lock(mu);
    ++closed;
  };
  auto closed_at_least = [&](int n) {
    return Eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return closed >= n;
    });
  };
  ControllerLink link(options, callbacks);
  link.Start();
  REQUIRE(closed_at_least(1));
  clock.Advance(absl::Hours(2));
  CHECK(closed_at_least(2));
  link.Stop();
}

TEST_CASE("a helper tool's timeout runs on the injected clock", "[unit]") {
  RacingClock clock;  // 30 s of timeout are gone at the next reading
  absl::StatusOr<ToolRun> run = RunTool({"sh", "-c", "exec sleep 30"}, absl::Seconds(30), 1024, &clock);
  REQUIRE(run.ok());
  CHECK(run->timed_out);
}

TEST_CASE("the diagnostic runner times a helper on the injected clock", "[unit]") {
  ManualClock clock;
  std::mutex mu;
  double seconds = -1;
  {
    DiagnosticRunnerOptions options;
    options.helper_binary = "peregrine-diagnose";
    options.clock = &clock;
    options.spawn = [&](const std::vector<std::string>&, absl::Duration) -> absl::StatusOr<HelperRun> {
      clock.Advance(absl::Seconds(7));
      return HelperRun{0, 0, false, "peregrine-diagnose: result passed: true\n"};
    };
    DiagnosticRunner runner(options);
    DiagnosticRunRequest request;
    request.kind = "eud";
    REQUIRE(runner.Submit(request, [&](const v1::Status&, const v1::DiagnosticResult& result) {
      std::lock_guard<std::mutex> lock(mu);
      seconds = result.seconds();
    }).ok());
    REQUIRE(Eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return seconds >= 0;
    }));
  }
  CHECK(seconds == 7.0);
}

}  // namespace
}  // namespace peregrine
