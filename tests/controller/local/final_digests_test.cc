// The ranks' final digests as local mode reads them from its rank logs: real-format lines
// of sim-trainer and examples/pytorch, garbage, and a state dir laid out as the local
// cluster lays it out (a replaced machine's logs beside its replacement's).
#include "controller/local/final_digests.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

TEST_CASE("final digests: sim-trainer's and PyTorch's final lines parse, other lines do not", "[unit]") {
  auto sim = ParseFinalLine(
      "[peregrine] final step=300 weight_digest=9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08\n");
  REQUIRE(sim.has_value());
  CHECK(sim->step == 300);
  CHECK(sim->name == "weight_digest");
  CHECK(sim->digest == "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
  auto torch = ParseFinalLine("[peregrine] final step=40 param_digest=ab12");
  REQUIRE(torch.has_value());
  CHECK(torch->name == "param_digest");

  for (const char* garbage : {"", "[peregrine] step=300 loss=0.3", "[peregrine] final", "[peregrine] final step=x weight_digest=ab",
                              "[peregrine] final step=3 weight_digest=not-hex", "[peregrine] final weight_digest=ab",
                              "[peregrine] final step=3", "[peregrine] final step=3 weight_digest", "\xff\xfe final step=1"}) {
    INFO(garbage);
    CHECK_FALSE(ParseFinalLine(garbage).has_value());
  }
}

TEST_CASE("final digests: the last final line of each rank's log, the most recently written log wins", "[unit]") {
  testing::TempDir dir("final-digests");
  dir.Write("logs/job-m0/rank-0.log", "[peregrine] step=1 loss=1\n[peregrine] final step=10 weight_digest=aa\n");
  dir.Write("logs/job-m0/rank-1.log", "[peregrine] step=1 loss=1\n[peregrine] final step=10 weight_digest=bb\n");
  // The evicted machine's log of rank 2 ended before the final line; its replacement's has it.
  dir.Write("logs/job-m1/rank-2.log", "[peregrine] step=5 loss=1\n");
  dir.Write("logs/job-s0/rank-2.log", "[peregrine] final step=10 weight_digest=cc\n");
  // A rank whose two logs both have a final line: the newer file counts.
  const std::string old_log = dir.Write("logs/job-m2/rank-3.log", "[peregrine] final step=10 weight_digest=d0\n");
  const std::string new_log = dir.Write("logs/job-s1/rank-3.log", "[peregrine] final step=10 weight_digest=d1\n");
  std::filesystem::last_write_time(old_log, std::filesystem::last_write_time(new_log) - std::chrono::seconds(5));
  dir.Write("logs/job-m0.log", "[peregrine] final step=10 weight_digest=ee\n");  // the agent's log: not a rank
  dir.Write("logs/job-m0/rank-x.log", "[peregrine] final step=10 weight_digest=ff\n");

  auto digests = ReadFinalDigests(dir.path());
  REQUIRE(digests.size() == 4);
  CHECK(digests.at(0).digest == "aa");
  CHECK(digests.at(1).digest == "bb");
  CHECK(digests.at(2).digest == "cc");
  CHECK(digests.at(3).digest == "d1");
  CHECK(FormatFinalDigests(digests) ==
        "  rank 0: step 10 weight_digest=aa\n  rank 1: step 10 weight_digest=bb\n"
        "  rank 2: step 10 weight_digest=cc\n  rank 3: step 10 weight_digest=d1\n");
  CHECK(ReadFinalDigests(dir.Path("missing")).empty());
}

}  // namespace
}  // namespace peregrine
