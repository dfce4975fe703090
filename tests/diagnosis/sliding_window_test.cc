#include "diagnosis/sliding_window.h"

#include <catch2/catch.hpp>
#include <vector>

namespace peregrine {
namespace {

TEST_CASE("Sliding window flags samples more than 10% above the window median", "[unit]") {
  std::vector<double> x(200, 100.0);
  for (int i = 120; i < 160; ++i) x[static_cast<size_t>(i)] = 125.0;
  auto detector = SlidingWindowDetector::Create();
  REQUIRE(detector.ok());
  std::vector<SlidingWindowEvent> events;
  for (double v : x) {
    auto e = detector->Update(v);
    if (e.has_value()) events.push_back(*e);
  }
  REQUIRE(events.size() == 2);
  CHECK(events[0].start);
  CHECK(events[0].index == 120);
  CHECK(events[0].median == Approx(100.0));
  CHECK_FALSE(events[1].start);
  CHECK(events[1].index == 160);
}

TEST_CASE("Sliding window table: what counts as anomalous", "[unit]") {
  struct Case {
    double value;
    int min_consecutive;
    bool flagged;
  };
  for (const Case c : {Case{109.0, 1, false}, Case{111.0, 1, true}, Case{80.0, 1, false},
                       Case{150.0, 2, false}}) {
    SlidingWindowOptions options;
    options.min_consecutive = c.min_consecutive;
    std::vector<double> x(50, 100.0);
    x[30] = c.value;  // a single sample
    auto starts = DetectSlidingWindow(x, options);
    REQUIRE(starts.ok());
    CHECK(starts->size() == (c.flagged ? 1u : 0u));
  }
}

TEST_CASE("Sliding window validates options", "[unit]") {
  SlidingWindowOptions bad;
  bad.window = 0;
  CHECK(SlidingWindowDetector::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
  bad = {};
  bad.threshold = 0.0;
  CHECK(SlidingWindowDetector::Create(bad).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine
