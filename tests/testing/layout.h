// Layout: a ParallelLayout (diagnosis/parallel_layout.h) for tests, TP x PP x DP ranks on
// machines of `gpus_per_machine` GPUs; by default the demo job's (TP=2 PP=2 DP=2 on 4
// machines x 2 GPUs). An invalid shape fails the test (Catch2 REQUIRE). Header-only, so
// any suite that links peregrine::diagnosis can use it.
#ifndef PEREGRINE_TESTS_TESTING_LAYOUT_H_
#define PEREGRINE_TESTS_TESTING_LAYOUT_H_

#include <catch2/catch.hpp>

#include "diagnosis/parallel_layout.h"

namespace peregrine::testing {

inline ParallelLayout Layout(int tp = 2, int pp = 2, int dp = 2, int gpus_per_machine = 2) {
  auto layout = ParallelLayout::Create(tp, pp, dp, gpus_per_machine);
  INFO(layout.status().ToString());
  REQUIRE(layout.ok());
  return *layout;
}

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_LAYOUT_H_
