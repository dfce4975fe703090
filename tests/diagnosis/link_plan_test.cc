#include "diagnosis/link_plan.h"

#include <catch2/catch.hpp>
#include <string>

namespace peregrine {
namespace {

std::string ErrorOf(const std::string& text, int ranks) {
  absl::StatusOr<ValidationRounds> plan = ParseLinkRoundsPlan(text, ranks);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

TEST_CASE("link-round plans round-trip through their text form", "[unit]") {
  const ValidationRounds plan = {{{0, 1}, {2, 3}}, {}, {{1, 2}, {3, 0}}};
  const std::string text = FormatLinkRoundsPlan(plan);
  CHECK(text == "r0:0>1,2>3;r1:;r2:1>2,3>0");
  absl::StatusOr<ValidationRounds> parsed = ParseLinkRoundsPlan(text, 4);
  REQUIRE(parsed.ok());
  CHECK(*parsed == plan);
  CHECK(FormatLinkRoundsPlan(*parsed) == text);
}

TEST_CASE("a ring's validation rounds survive the text form", "[unit]") {
  for (int n : {2, 3, 8, 9}) {
    absl::StatusOr<ValidationRounds> ring = RingValidationRounds(n);
    REQUIRE(ring.ok());
    absl::StatusOr<ValidationRounds> parsed = ParseLinkRoundsPlan(FormatLinkRoundsPlan(*ring), n);
    REQUIRE(parsed.ok());
    CHECK(*parsed == *ring);
  }
}

TEST_CASE("a rank used twice in one round is an error naming the rank and the round", "[unit]") {
  CHECK(ErrorOf("r0:0>1,2>3;r1:1>2,2>0", 4) == "rank 2 used twice in round r1 (transfer \"2>0\")");
  CHECK(ErrorOf("r0:0>1,3>1", 4) == "rank 1 used twice in round r0 (transfer \"3>1\")");
  // The same rank in different rounds is fine.
  CHECK(ParseLinkRoundsPlan("r0:0>1;r1:1>0", 2).ok());
}

TEST_CASE("malformed link-round plans are refused with what is wrong", "[unit]") {
  CHECK(ErrorOf("", 4) == "empty plan");
  CHECK(ErrorOf("r1:0>1", 4) == "round 0 must start with \"r0:\", got \"r1:0>1\"");
  CHECK(ErrorOf("r0:0>1;0>1", 4) == "round 1 must start with \"r1:\", got \"0>1\"");
  CHECK(ErrorOf("r0:0>4", 4) == "bad transfer \"0>4\" in r0 (expected SENDER>RECEIVER, distinct ranks below 4)");
  CHECK(ErrorOf("r0:0>0", 4).find("bad transfer \"0>0\"") == 0);
  CHECK(ErrorOf("r0:0-1", 4).find("bad transfer \"0-1\"") == 0);
  CHECK(ErrorOf("r0:-1>2", 4).find("bad transfer \"-1>2\"") == 0);
  CHECK(ErrorOf("r0:0>1,", 4).find("bad transfer \"\"") == 0);
  CHECK(ErrorOf("r0:0>1;", 4) == "round 1 must start with \"r1:\", got \"\"");
  // Garbage of every kind: refused, never a crash.
  for (const char* garbage : {";", ":", "r0", "r0:>", "r0:1>", "r0:>1", "r0:a>b", "r0:1>2>3", "r0:99999999999>1",
                              "\xff\xfe", "r0:0>1;;r2:", "r00:0>1", " r0:0>1"}) {
    INFO(garbage);
    CHECK_FALSE(ParseLinkRoundsPlan(garbage, 4).ok());
  }
  CHECK(ParseLinkRoundsPlan("r0:", 1).ok());
}

}  // namespace
}  // namespace peregrine
