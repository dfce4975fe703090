// IterationTracker's detection schedule: failed detections back off exponentially (an
// aperiodic stream costs a bounded number of detections), and the wait returns to
// retry_interval when new signatures arrive, so a pattern that starts later is still found.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "diagnosis/iteration_period.h"

namespace peregrine {
namespace {

NcclCallRecord RetryCall(NcclOp op, uint64_t comm, uint64_t count, int64_t t) {
  NcclCallRecord r;
  r.op = op;
  r.comm_id = comm;
  r.count = count;
  r.datatype = 7;
  r.enter_ns = t;
  return r;
}

TEST_CASE("IterationTracker backs off on aperiodic streams and resets on new signatures",
          "[unit]") {
  struct Case {
    const char* name;
    int aperiodic_calls;
    // The pattern that follows reuses the aperiodic stream's signatures (no reset) or
    // uses new communicators (reset to retry_interval).
    bool new_signatures;
    // Upper bound on detection attempts during the aperiodic part.
    uint64_t max_attempts;
    // Upper bound on pattern calls before the period is established.
    int max_calls_to_detect;
  };
  // Attempts during n aperiodic calls fed in batches of 64: at 64 (the first), then after
  // 128, 256, 512, 1024 and every 2048 calls; the old fixed schedule made n / 128.
  // Detecting a 14-call pattern after a long aperiodic prefix needs a detection suffix
  // (a quarter of the 4,096-call window) made almost only of the pattern, about 1,000
  // calls; with new signatures the wait restarts at 128 and doubles, so the attempt that
  // sees it comes at most ~2x later; with old signatures it may wait a full 2,048 calls.
  const std::vector<Case> cases = {
      {"short aperiodic prefix, new signatures", 3000, true, 6, 2100},
      {"long aperiodic prefix, new signatures", 40000, true, 5 + 40000 / 2048 + 1, 2100},
      {"long aperiodic prefix, same signatures", 40000, false, 5 + 40000 / 2048 + 1,
       1100 + 2048 + 64},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    std::mt19937 rng(17);
    // The 14-call pattern: 5 layers of TP pairs, PP send/recv, DP RS/AG.
    std::vector<NcclCallRecord> pattern;
    const uint64_t comm = c.new_signatures ? 100 : 1;
    for (int l = 0; l < 5; ++l) {
      pattern.push_back(RetryCall(NcclOp::kAllReduce, comm + 1, 4096, 0));
      pattern.push_back(RetryCall(NcclOp::kAllReduce, comm + 1, 4096, 0));
    }
    pattern.push_back(RetryCall(NcclOp::kSend, comm + 2, 1 << 20, 0));
    pattern.push_back(RetryCall(NcclOp::kRecv, comm + 2, 1 << 20, 0));
    pattern.push_back(RetryCall(NcclOp::kReduceScatter, comm + 3, 1 << 24, 0));
    pattern.push_back(RetryCall(NcclOp::kAllGather, comm + 3, 1 << 24, 0));
    std::vector<NcclCallRecord> calls;
    int64_t t = 0;
    // Aperiodic: the pattern's distinct signatures of communicators 1..3 in random order.
    const std::vector<NcclCallRecord> alphabet = {
        RetryCall(NcclOp::kAllReduce, 2, 4096, 0), RetryCall(NcclOp::kSend, 3, 1 << 20, 0),
        RetryCall(NcclOp::kRecv, 3, 1 << 20, 0), RetryCall(NcclOp::kReduceScatter, 4, 1 << 24, 0),
        RetryCall(NcclOp::kAllGather, 4, 1 << 24, 0)};
    for (int i = 0; i < c.aperiodic_calls; ++i) {
      NcclCallRecord r = alphabet[rng() % alphabet.size()];
      r.enter_ns = t;
      t += 10'000;
      calls.push_back(r);
    }
    const size_t pattern_start = calls.size();
    for (int k = 0; k < 600; ++k) {
      for (NcclCallRecord r : pattern) {
        r.enter_ns = t;
        t += 10'000;
        calls.push_back(r);
      }
    }
    auto tracker = IterationTracker::Create({});
    REQUIRE(tracker.ok());
    size_t detected_at = 0;
    for (size_t i = 0; i < calls.size(); i += 64) {
      const size_t n = std::min<size_t>(64, calls.size() - i);
      tracker->Add(absl::MakeConstSpan(calls).subspan(i, n));
      if (i + n == pattern_start) {
        CHECK(tracker->period() == 0);
        CHECK(tracker->stats().detection_attempts <= c.max_attempts);
        // The schedule did back off: well under one attempt per 128 calls.
        if (c.aperiodic_calls >= 10000) {
          CHECK(tracker->stats().detection_attempts * 128 * 4 <
                static_cast<uint64_t>(c.aperiodic_calls));
        }
      }
      if (detected_at == 0 && tracker->period() > 0) detected_at = i + n;
    }
    REQUIRE(detected_at > pattern_start);
    CHECK(static_cast<int>(detected_at - pattern_start) <= c.max_calls_to_detect);
    CHECK(tracker->period() == static_cast<int>(pattern.size()));
  }
}

TEST_CASE("IterationTracker validates max_retry_interval", "[unit]") {
  IterationTrackerOptions bad;
  bad.max_retry_interval = 0;
  CHECK(IterationTracker::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  IterationTrackerOptions fixed;  // a cap below retry_interval means a fixed schedule
  fixed.retry_interval = 256;
  fixed.max_retry_interval = 1;
  CHECK(IterationTracker::Create(fixed).ok());
}

}  // namespace
}  // namespace peregrine
