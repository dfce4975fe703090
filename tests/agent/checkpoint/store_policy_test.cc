// The store's pure decisions (agent/checkpoint/store_policy.h) and the token bucket.
#include "agent/checkpoint/store_policy.h"

#include <catch2/catch.hpp>

#include <limits>

#include "agent/checkpoint/token_bucket.h"

namespace peregrine::checkpoint {
namespace {

RankFiles Rank(uint32_t rank, std::map<uint64_t, uint64_t> finished, bool free_buffer = false) {
  RankFiles f;
  f.global_rank = rank;
  f.finished = std::move(finished);
  f.has_free_buffer = free_buffer;
  return f;
}

std::set<std::pair<uint32_t, uint64_t>> Pruned(const std::vector<PrunedShard>& pruned) {
  std::set<std::pair<uint32_t, uint64_t>> out;
  for (const PrunedShard& p : pruned) out.insert({p.global_rank, p.step});
  return out;
}

TEST_CASE("stored steps are those every local rank finished", "[unit]") {
  CHECK(StoredSteps({}).empty());
  CHECK(StoredSteps({Rank(0, {{10, 1}, {20, 1}, {30, 1}}), Rank(1, {{10, 1}, {30, 1}})}) ==
        std::vector<uint64_t>{10, 30});
  CHECK(StoredSteps({Rank(0, {{10, 1}}), Rank(1, {})}).empty());
}

TEST_CASE("pruning keeps the newest two stored steps, the committed and backed-up ones, and saves in progress",
          "[unit]") {
  // Stored: 10 20 30 40; rank 0 is ahead with 50 and 60 and 70.
  std::vector<RankFiles> ranks = {Rank(0, {{10, 5}, {20, 5}, {30, 5}, {40, 5}, {50, 5}, {60, 5}, {70, 5}}),
                                  Rank(1, {{10, 5}, {20, 5}, {30, 5}, {40, 5}})};
  SECTION("committed 10, backed up 20") {
    CHECK(Pruned(DecidePrune(ranks, 10, 20)) == std::set<std::pair<uint32_t, uint64_t>>{{0, 50}});
  }
  SECTION("nothing committed or backed up") {
    CHECK(Pruned(DecidePrune(ranks, 0, 0)) ==
          std::set<std::pair<uint32_t, uint64_t>>{{0, 10}, {0, 20}, {0, 50}, {1, 10}, {1, 20}});
  }
}

TEST_CASE("one pruned shard per rank is recycled as its free buffer, the largest", "[unit]") {
  std::vector<RankFiles> ranks = {Rank(0, {{10, 100}, {20, 300}, {30, 200}, {40, 1}, {50, 1}}),
                                  Rank(1, {{10, 100}, {20, 300}, {30, 200}, {40, 1}, {50, 1}}, /*free_buffer=*/true)};
  std::vector<PrunedShard> pruned = DecidePrune(ranks, 0, 0);
  REQUIRE(pruned.size() == 6);
  for (const PrunedShard& p : pruned) {
    CAPTURE(p.global_rank, p.step);
    CHECK(p.recycle == (p.global_rank == 0 && p.step == 20));
  }
}

TEST_CASE("the budget is the smallest limit that is set", "[unit]") {
  CHECK(MemoryBudget({}) == std::numeric_limits<uint64_t>::max());
  CHECK(MemoryBudget({1000, 0, 0, 0}) == 1000);
  CHECK(MemoryBudget({1000, 600, 0, 800}) == 600);
  CHECK(MemoryBudget({1000, 0, 500, 800}) == 500);
  CHECK(MemoryBudget({0, 0, 0, 70}) == 70);
}

TEST_CASE("the allowance shares the budget less held backups by two versions per rank", "[unit]") {
  struct Case {
    uint64_t budget, held;
    uint32_t ranks;
    uint64_t last;
    uint64_t allowance;
    bool short_;
  };
  const Case cases[] = {
      {1000, 0, 2, 0, 250, false},    // before any save
      {1000, 200, 2, 200, 200, false},  // two 200-byte versions of two ranks fit in 800
      {1000, 200, 2, 201, 400, true},   // they do not: one version each
      {100, 300, 2, 10, 0, true},       // held backups take everything
      {1000, 0, 0, 0, 0, false},        // no ranks
  };
  for (const Case& c : cases) {
    CAPTURE(c.budget, c.held, c.ranks, c.last);
    Allowance a = DecideAllowance(c.budget, c.ranks, c.held, c.last);
    CHECK(a.per_rank_bytes == c.allowance);
    CHECK(a.memory_short == c.short_);
  }
}

TEST_CASE("the next backup is the newest stored step unless it is backed up", "[unit]") {
  CHECK(!NextBackupStep({}, {}));
  CHECK(NextBackupStep({10, 20}, {}) == 20u);
  CHECK(NextBackupStep({10, 20}, {10}) == 20u);
  CHECK(!NextBackupStep({10, 20}, {20}));
}

TEST_CASE("held backups: two complete steps per slot in hold_for, newer partial ones kept", "[unit]") {
  HeldIndex held;
  held[1][10] = {0, 1};
  held[1][20] = {0, 1};
  held[1][30] = {0};      // partial, newest: still arriving
  held[1][25] = {0, 1};
  held[2][10] = {2, 3};  // slot 2 is no longer ours
  const std::vector<HeldKey> drop = HeldToDrop(held, {1}, 2, /*committed_step=*/0);
  CHECK(drop == std::vector<HeldKey>{{1, 10}, {2, 10}});
  CHECK(CompleteHeld(held, 2) == std::vector<HeldKey>{{1, 10}, {1, 20}, {1, 25}, {2, 10}});
  // The job's committed step is kept even when newer complete steps arrived (another slot's
  // backups lag, so the job has not committed them); not for a slot no longer ours.
  CHECK(HeldToDrop(held, {1}, 2, /*committed_step=*/10) == std::vector<HeldKey>{{2, 10}});
}

TEST_CASE("retry delays double from 100 ms up to 10 s", "[unit]") {
  CHECK(RetryDelay(0) == absl::Milliseconds(100));
  CHECK(RetryDelay(1) == absl::Milliseconds(200));
  CHECK(RetryDelay(3) == absl::Milliseconds(800));
  CHECK(RetryDelay(7) == absl::Seconds(10));
  CHECK(RetryDelay(1000) == absl::Seconds(10));
}

TEST_CASE("the token bucket lets a burst through, then the rate", "[unit]") {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  TokenBucket bucket(1000, 500, t0);
  CHECK(bucket.Reserve(500, t0) == t0);                              // the burst
  CHECK(bucket.Reserve(250, t0) == t0 + absl::Milliseconds(250));    // waits for the refill
  CHECK(bucket.Reserve(250, t0) == t0 + absl::Milliseconds(500));    // queues behind it
  // Idle time refills up to the burst, not beyond.
  const absl::Time later = t0 + absl::Seconds(100);
  CHECK(bucket.Reserve(500, later) == later);
  CHECK(bucket.Reserve(1, later) > later);
  // Over any window the bytes granted by time t stay within burst + rate * (t - start).
  TokenBucket b2(1 << 20, 1 << 20, t0);
  uint64_t granted = 0;
  absl::Time now = t0;
  for (int i = 0; i < 50; ++i) {
    const absl::Time at = b2.Reserve(1 << 20, now);
    granted += 1 << 20;
    CHECK(static_cast<double>(granted) <= (1 << 20) + absl::ToDoubleSeconds(at - t0) * (1 << 20) + 1);
    now = at;
  }
  CHECK(TokenBucket(0, 0, t0).Reserve(1ull << 40, t0) == t0);  // unlimited
}

}  // namespace
}  // namespace peregrine::checkpoint
