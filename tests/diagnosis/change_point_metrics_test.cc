#include "diagnosis/change_point_metrics.h"

#include <catch2/catch.hpp>
#include <vector>

namespace peregrine {
namespace {

// Expected values are worked out by hand from the definitions in change_point_metrics.cc
// (the derivation is in each comment).

TEST_CASE("CountTruePositives matches each prediction at most once, closest first", "[unit]") {
  // truth 1 <- 3 (|2|), 10 <- 8 (|2|), 20 <- 20; 23: 20 is taken, nothing else within 5.
  CHECK(CountTruePositives({1, 10, 20, 23}, {3, 8, 20}, 5) == 3);
  // truth 1 takes 1 (not 3): 10 <- 8, 20 <- 20, 23 has none left.
  CHECK(CountTruePositives({1, 10, 20, 23}, {1, 3, 8, 20}, 5) == 3);
  CHECK(CountTruePositives({}, {1, 2, 3}, 5) == 0);
  CHECK(CountTruePositives({1, 2, 3}, {}, 5) == 0);
  // The margin is inclusive: |10 - 15| = 5 matches, |10 - 16| = 6 does not.
  CHECK(CountTruePositives({10}, {15}, 5) == 1);
  CHECK(CountTruePositives({10}, {16}, 5) == 0);
  // Ties go to the smaller prediction, leaving the larger one for the next truth.
  CHECK(CountTruePositives({10, 14}, {8, 12}, 2) == 2);
}

TEST_CASE("CleanChangePoints drops the first and last index and duplicates", "[unit]") {
  CHECK(CleanChangePoints({0, 5, 5, 3, 9, 12}, 10) == std::vector<int64_t>{3, 5});
  CHECK(CleanChangePoints({}, 10).empty());
}

TEST_CASE("ChangePointFMeasure follows the benchmark's definition", "[unit]") {
  // Annotators {10,20}, {11,20}, {10}, {0,5}; prediction {10,20}. With 0 added everywhere,
  // X = {0,10,20} and T* = {0,5,10,11,20}; in increasing order 0<-0, 5<-10 (5 away),
  // 10: none free within 5, 11: none, 20<-20: 3 of |X| = 3, P = 1. Recall: {0,10,20} 3/3,
  // {0,11,20} 3/3, {0,10} 2/2, {0,5} 2/2 -> R = 1, F1 = 1.
  absl::StatusOr<ChangePointF1> f = ChangePointFMeasure({{10, 20}, {11, 20}, {10}, {0, 5}}, {10, 20}, 50);
  REQUIRE(f.ok());
  CHECK(f->precision == Approx(1.0));
  CHECK(f->recall == Approx(1.0));
  CHECK(f->f1 == Approx(1.0));
  // Annotators {}, {10}, {50}; prediction {10}: X = {0,10}; T* = {0,10,50} -> 2 of 2, P = 1;
  // recall (1/1 + 2/2 + 1/2) / 3 = 5/6; F1 = 2 * 5/6 / (1 + 5/6) = 10/11.
  f = ChangePointFMeasure({{}, {10}, {50}}, {10}, 100);
  REQUIRE(f.ok());
  CHECK(f->precision == Approx(1.0));
  CHECK(f->recall == Approx(5.0 / 6.0));
  CHECK(f->f1 == Approx(10.0 / 11.0));
  // The zero predictor: X = {0}, P = 1, R = (1 + 1/2 + 1/2) / 3 = 2/3, F1 = 0.8.
  f = ChangePointFMeasure({{}, {10}, {50}}, {}, 100);
  REQUIRE(f.ok());
  CHECK(f->f1 == Approx(0.8));
  // A false alarm: X = {0,30}, T = {0}: P = 1/2, R = 1, F1 = 2/3.
  f = ChangePointFMeasure({{}}, {30}, 100);
  REQUIRE(f.ok());
  CHECK(f->f1 == Approx(2.0 / 3.0));
  // The last index is cleaned away: as if nothing were predicted.
  f = ChangePointFMeasure({{}}, {99}, 100);
  REQUIRE(f.ok());
  CHECK(f->f1 == Approx(1.0));
}

TEST_CASE("ChangePointCovering follows the benchmark's definition", "[unit]") {
  // n = 45, annotators {}, {10}, {40}, prediction {} (one segment [0,45)):
  // C1 = 1; C2 = (10 * 10/45 + 35 * 35/45) / 45 = 1325/2025; C3 = (40 * 40/45 + 5 * 5/45)
  // / 45 = 1625/2025; mean = (2025 + 1325 + 1625) / 6075 = 4975/6075.
  absl::StatusOr<double> c = ChangePointCovering({{}, {10}, {40}}, {}, 45);
  REQUIRE(c.ok());
  CHECK(*c == Approx(4975.0 / 6075.0));
  // Prediction {10}: segments [0,10), [10,45).
  // C1: [0,45) best overlap 35/45 -> 35/45 = 0.7778.
  // C2: identical -> 1.
  // C3: [0,40) vs [10,45): 30/45, vs [0,10): 10/40 -> 40 * 30/45; [40,45) vs [10,45): 5/35
  //     -> (40 * 30/45 + 5 * 5/35) / 45 = (26.667 + 0.714) / 45 = 0.60847.
  c = ChangePointCovering({{}, {10}, {40}}, {10}, 45);
  REQUIRE(c.ok());
  CHECK(*c == Approx((35.0 / 45.0 + 1.0 + (40.0 * 30.0 / 45.0 + 5.0 * 5.0 / 35.0) / 45.0) / 3.0));
  // Annotators {10,20}, {10}, {0,5}; prediction {10,20}; n = 45.
  // C1 = 1. C2: [0,10) -> 1 * 10; [10,45) vs [20,45): 25/35 -> 35 * 25/35 = 25: (10 + 25)/45.
  // C3: [0,5) vs [0,10): 5/10 -> 2.5; [5,45) vs [20,45): 25/40 -> 25, vs [10,20): 10/40:
  //     (2.5 + 25) / 45. Mean = (1 + 35/45 + 27.5/45) / 3.
  c = ChangePointCovering({{10, 20}, {10}, {0, 5}}, {10, 20}, 45);
  REQUIRE(c.ok());
  CHECK(*c == Approx((1.0 + 35.0 / 45.0 + 27.5 / 45.0) / 3.0));
}

TEST_CASE("Change point metrics reject bad input naming the problem", "[unit]") {
  absl::StatusOr<ChangePointF1> f = ChangePointFMeasure({}, {}, 10);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().message() == "no annotator");
  f = ChangePointFMeasure({{12}}, {}, 10);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().message() == "annotated location 12 outside [0, 10)");
  f = ChangePointFMeasure({{}}, {-1}, 10);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().message() == "predicted location -1 outside [0, 10)");
  f = ChangePointFMeasure({{}}, {}, 10, -1);
  REQUIRE_FALSE(f.ok());
  CHECK(f.status().message() == "margin must be >= 0, got -1");
  absl::StatusOr<double> c = ChangePointCovering({{}}, {}, 0);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message() == "n_obs must be >= 1, got 0");
}

}  // namespace
}  // namespace peregrine
