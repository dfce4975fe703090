// WorkQueue and rate limiters: de-duplication, never-concurrent processing, delays on a
// manual clock, client-go's default backoff numbers, shutdown.
#include "controller/kube/work_queue.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/strings/str_cat.h"

namespace peregrine::kube {
namespace {

TEST_CASE("work queue: an item added while queued is queued once", "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  queue.Add("ns/a");
  queue.Add("ns/a");
  queue.Add("ns/b");
  REQUIRE(queue.Len() == 2);
  REQUIRE(queue.TryGet() == "ns/a");
  REQUIRE(queue.TryGet() == "ns/b");
  REQUIRE_FALSE(queue.TryGet().has_value());
}

TEST_CASE("work queue: the depth observer sees ready items on add and get, not delayed ones", "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  std::vector<int> depths;
  queue.SetDepthObserver([&](int d) { depths.push_back(d); });
  CHECK(depths == std::vector<int>{0});
  queue.Add("ns/a");
  queue.Add("ns/a");  // de-duplicated: no change
  queue.AddAfter("ns/b", absl::Seconds(10));  // delayed: not depth
  CHECK(depths.back() == 1);
  REQUIRE(queue.TryGet() == "ns/a");
  CHECK(depths.back() == 0);
  queue.Add("ns/a");  // re-added while processing: queued again only at Done
  CHECK(depths.back() == 0);
  queue.Done("ns/a");
  CHECK(depths.back() == 1);
  clock.Advance(absl::Seconds(10));
  CHECK(queue.Len() == 2);  // the delayed item became ready
  CHECK(depths.back() == 2);
  CHECK(depths == std::vector<int>{0, 1, 0, 1, 2});
}

TEST_CASE("work queue: an item re-added while processing runs again only after Done", "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  queue.Add("ns/a");
  REQUIRE(queue.TryGet() == "ns/a");
  queue.Add("ns/a");
  queue.Add("ns/a");
  REQUIRE(queue.Len() == 0);
  REQUIRE_FALSE(queue.TryGet().has_value());
  queue.Done("ns/a");
  REQUIRE(queue.Len() == 1);
  REQUIRE(queue.TryGet() == "ns/a");
  queue.Done("ns/a");
  REQUIRE(queue.Len() == 0);
}

TEST_CASE("work queue: AddAfter waits on the clock and the earliest time wins", "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  queue.AddAfter("ns/a", absl::Seconds(10));
  queue.AddAfter("ns/a", absl::Seconds(2));
  queue.AddAfter("ns/a", absl::Seconds(5));
  REQUIRE(queue.Len() == 0);
  REQUIRE(queue.NumWaiting() == 1);
  clock.Advance(absl::Milliseconds(1999));
  REQUIRE_FALSE(queue.TryGet().has_value());
  clock.Advance(absl::Milliseconds(1));
  REQUIRE(queue.TryGet() == "ns/a");
  queue.Done("ns/a");
  clock.Advance(absl::Seconds(20));
  REQUIRE(queue.Len() == 0);  // the later AddAfter calls did not leave copies behind
  REQUIRE(queue.NumWaiting() == 0);
}

TEST_CASE("work queue: a delayed item already queued is not queued twice", "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  queue.Add("ns/a");
  queue.AddAfter("ns/a", absl::Seconds(1));
  clock.Advance(absl::Seconds(1));
  REQUIRE(queue.Len() == 1);
}

TEST_CASE("work queue: per-item backoff doubles from 5ms to 1000s and Forget resets", "[unit]") {
  ItemExponentialRateLimiter limiter(absl::Milliseconds(5), absl::Seconds(1000));
  REQUIRE(limiter.When("a") == absl::Milliseconds(5));
  REQUIRE(limiter.When("a") == absl::Milliseconds(10));
  REQUIRE(limiter.When("a") == absl::Milliseconds(20));
  REQUIRE(limiter.When("b") == absl::Milliseconds(5));
  REQUIRE(limiter.NumRequeues("a") == 3);
  for (int i = 0; i < 100; ++i) limiter.When("a");
  REQUIRE(limiter.When("a") == absl::Seconds(1000));
  limiter.Forget("a");
  REQUIRE(limiter.NumRequeues("a") == 0);
  REQUIRE(limiter.When("a") == absl::Milliseconds(5));
}

TEST_CASE("work queue: the token bucket allows a burst of 100 then 10 per second", "[unit]") {
  ManualClock clock;
  TokenBucketRateLimiter bucket(10.0, 100, &clock);
  for (int i = 0; i < 100; ++i) REQUIRE(bucket.When("x") == absl::ZeroDuration());
  REQUIRE(bucket.When("x") == absl::Milliseconds(100));
  REQUIRE(bucket.When("x") == absl::Milliseconds(200));
  clock.Advance(absl::Seconds(1));  // 10 tokens back; 2 were already owed
  for (int i = 0; i < 8; ++i) REQUIRE(bucket.When("x") == absl::ZeroDuration());
  REQUIRE(bucket.When("x") == absl::Milliseconds(100));
}

TEST_CASE("work queue: the default limiter is the max of both and AddRateLimited uses it",
          "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  queue.AddRateLimited("ns/a");
  queue.AddRateLimited("ns/a");  // second failure: 10ms, but the 5ms one is earlier
  REQUIRE(queue.NumRequeues("ns/a") == 2);
  REQUIRE(queue.Len() == 0);
  clock.Advance(absl::Milliseconds(5));
  REQUIRE(queue.TryGet() == "ns/a");
  queue.Done("ns/a");
  queue.Forget("ns/a");
  REQUIRE(queue.NumRequeues("ns/a") == 0);

  // Past the burst the global bucket dominates the per-item delay.
  ManualClock clock2;
  auto limiter = DefaultControllerRateLimiter(&clock2);
  for (int i = 0; i < 100; ++i) limiter->When(absl::StrCat("key", i));
  REQUIRE(limiter->When("fresh") == absl::Milliseconds(100));
}

TEST_CASE("work queue: a blocked Get wakes for Add, for a delay on the clock, and for ShutDown",
          "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  std::optional<std::string> got;
  std::thread getter([&] { got = queue.Get(); });
  queue.Add("ns/a");
  getter.join();
  REQUIRE(got == "ns/a");
  queue.Done("ns/a");

  queue.AddAfter("ns/b", absl::Minutes(1));
  std::thread delayed([&] { got = queue.Get(); });
  clock.Advance(absl::Minutes(1));
  delayed.join();
  REQUIRE(got == "ns/b");
  queue.Done("ns/b");

  std::thread stopped([&] { got = queue.Get(); });
  queue.ShutDown();
  stopped.join();
  REQUIRE_FALSE(got.has_value());
}

TEST_CASE("work queue: after ShutDown, queued items drain, new and delayed items are dropped",
          "[unit]") {
  ManualClock clock;
  WorkQueue queue(&clock);
  queue.Add("ns/a");
  queue.AddAfter("ns/b", absl::Seconds(1));
  queue.ShutDown();
  queue.Add("ns/c");
  clock.Advance(absl::Seconds(2));
  REQUIRE(queue.ShuttingDown());
  REQUIRE(queue.Get() == "ns/a");
  REQUIRE_FALSE(queue.Get().has_value());
}

TEST_CASE("work queue: concurrent workers never hold the same key at once", "[unit]") {
  WorkQueue queue(RealClock());
  absl::Mutex mu;
  std::set<std::string> in_flight;
  std::atomic<bool> overlap{false};
  std::atomic<int> processed{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (std::optional<std::string> key = queue.Get()) {
        {
          absl::MutexLock lock(&mu);
          if (!in_flight.insert(*key).second) overlap = true;
        }
        queue.Add(*key);  // re-added while processing: must wait for Done
        std::this_thread::yield();
        {
          absl::MutexLock lock(&mu);
          in_flight.erase(*key);
        }
        ++processed;
        queue.Done(*key);
      }
    });
  }
  for (int round = 0; round < 200; ++round) queue.Add(absl::StrCat("ns/k", round % 3));
  // Each key keeps re-adding itself; stop once plenty of work has gone through.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (processed.load() < 500 && absl::Now() < deadline) std::this_thread::yield();
  queue.ShutDown();
  for (auto& t : workers) t.join();
  REQUIRE(processed.load() >= 500);
  REQUIRE_FALSE(overlap.load());
}

}  // namespace
}  // namespace peregrine::kube
