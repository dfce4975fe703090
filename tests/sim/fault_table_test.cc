// The fault table: controller API round trips, reader change tracking, bad files.
#include <fstream>

#include <catch2/catch.hpp>

#include "sim/fault/fault_control.h"
#include "sim/fault/fault_table.h"
#include "tests/sim/sim_test_util.h"

namespace peregrine::sim {
namespace {

using peregrine::testing::TempDir;

TEST_CASE("fault table: set and read and merge and clear", "[unit]") {
  TempDir dir;
  const std::string path = dir.File("faults");
  REQUIRE(CreateFaultTable(path).ok());
  auto empty = ReadFaults(path);
  REQUIRE(empty.ok());
  CHECK(empty->ranks.empty());
  CHECK(empty->links.empty());

  RankFault slow;
  slow.compute_slowdown = 2.5;
  RankFault nan;
  nan.nan = true;
  REQUIRE(SetRankFault(path, 3, -1, slow).ok());
  REQUIRE(SetRankFault(path, 3, 1, nan).ok());
  LinkFault delay;
  delay.delay_us = 500;
  delay.bandwidth_bytes_per_s = 1e6;
  REQUIRE(SetLinkFault(path, 0, 1, delay, /*both_directions=*/true).ok());

  auto snap = ReadFaults(path);
  REQUIRE(snap.ok());
  CHECK(snap->ranks.size() == 2);
  CHECK(snap->links.size() == 2);
  const RankFault gpu1 = snap->RankFaultFor(3, 1);
  CHECK(gpu1.nan);
  CHECK(gpu1.compute_slowdown == 2.5);  // the machine-wide entry applies too
  const RankFault gpu0 = snap->RankFaultFor(3, 0);
  CHECK_FALSE(gpu0.nan);
  CHECK(gpu0.compute_slowdown == 2.5);
  CHECK_FALSE(snap->RankFaultFor(4, 1).Any());
  CHECK_FALSE(snap->RankFaultFor(-1, 1).Any());  // unknown identity never matches
  CHECK(snap->LinkFaultFor(0, 1) == delay);
  CHECK(snap->LinkFaultFor(1, 0) == delay);
  CHECK_FALSE(snap->LinkFaultFor(0, 2).Any());

  // A healthy fault removes the entry; one direction only.
  REQUIRE(SetRankFault(path, 3, -1, RankFault{}).ok());
  REQUIRE(SetLinkFault(path, 1, 0, LinkFault{}).ok());
  snap = ReadFaults(path);
  REQUIRE(snap.ok());
  CHECK(snap->ranks.size() == 1);
  CHECK(snap->RankFaultFor(3, 0).compute_slowdown == 1.0);
  CHECK(snap->LinkFaultFor(0, 1) == delay);
  CHECK_FALSE(snap->LinkFaultFor(1, 0).Any());

  REQUIRE(ClearFaults(path).ok());
  snap = ReadFaults(path);
  REQUIRE(snap.ok());
  CHECK(snap->ranks.empty());
  CHECK(snap->links.empty());
}

TEST_CASE("fault table: grad_corrupt round-trips on its own bit and merges per GPU", "[unit]") {
  TempDir dir;
  const std::string path = dir.File("faults");
  REQUIRE(CreateFaultTable(path).ok());
  RankFault sdc;
  sdc.grad_corrupt = true;
  CHECK(sdc.Any());
  REQUIRE(SetRankFault(path, 2, -1, sdc).ok());
  auto snap = ReadFaults(path);
  REQUIRE(snap.ok());
  const RankFault got = snap->RankFaultFor(2, 1);
  CHECK(got.grad_corrupt);
  CHECK_FALSE(got.corrupt);
  CHECK_FALSE(got.nan);
  CHECK_FALSE(got.crash);
  CHECK_FALSE(snap->RankFaultFor(1, 1).grad_corrupt);
}

TEST_CASE("fault table: a reader follows changes and a re-created table", "[unit]") {
  TempDir dir;
  const std::string path = dir.File("faults");
  FaultTableReader early(path);  // before the file exists: no faults, no error thrown
  CHECK(early.Poll().ranks.empty());
  REQUIRE(CreateFaultTable(path).ok());
  FaultTableReader reader(path);
  const uint64_t g0 = reader.Poll().generation;
  RankFault corrupt;
  corrupt.corrupt = true;
  REQUIRE(SetRankFault(path, 0, 0, corrupt).ok());
  CHECK(reader.Poll().generation > g0);
  CHECK(reader.Poll().RankFaultFor(0, 0).corrupt);
  // Re-creating an existing table clears it in place: the mapped reader sees that.
  REQUIRE(CreateFaultTable(path).ok());
  CHECK_FALSE(reader.Poll().RankFaultFor(0, 0).Any());
  FaultTableReader none("");
  CHECK(none.Poll().ranks.empty());
}

TEST_CASE("fault table: bad arguments and bad files are errors", "[unit]") {
  TempDir dir;
  const std::string path = dir.File("faults");
  CHECK(SetRankFault(path, 0, 0, RankFault{}).code() == absl::StatusCode::kNotFound);
  CHECK(ReadFaults(path).status().code() == absl::StatusCode::kNotFound);
  REQUIRE(CreateFaultTable(path).ok());
  RankFault fast;
  fast.compute_slowdown = 0.5;
  CHECK(SetRankFault(path, 0, 0, fast).code() == absl::StatusCode::kInvalidArgument);
  CHECK(SetRankFault(path, -1, 0, RankFault{}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(SetRankFault(path, 0, -2, RankFault{}).code() == absl::StatusCode::kInvalidArgument);
  LinkFault negative;
  negative.delay_us = -1;
  CHECK(SetLinkFault(path, 0, 1, negative).code() == absl::StatusCode::kInvalidArgument);

  const std::string garbage = dir.File("garbage");
  {
    std::ofstream out(garbage);
    for (int i = 0; i < 2000; ++i) out << "not a fault table ";
  }
  CHECK(ReadFaults(garbage).status().code() == absl::StatusCode::kDataLoss);
  CHECK(SetRankFault(garbage, 0, 0, fast).code() != absl::StatusCode::kOk);
  FaultTableReader reader(garbage);
  CHECK(reader.Poll().ranks.empty());
  CHECK_FALSE(reader.error().empty());
  const std::string tiny = dir.File("tiny");
  { std::ofstream out(tiny); out << "PRG"; }
  CHECK(ReadFaults(tiny).status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("fault table: capacity is enforced", "[unit]") {
  TempDir dir;
  const std::string path = dir.File("faults");
  REQUIRE(CreateFaultTable(path).ok());
  RankFault hang;
  hang.hang = true;
  for (uint32_t m = 0; m < kRankFaultCapacity; ++m) {
    REQUIRE(SetRankFault(path, static_cast<int>(m), 0, hang).ok());
  }
  CHECK(SetRankFault(path, 100000, 0, hang).code() == absl::StatusCode::kResourceExhausted);
  auto snap = ReadFaults(path);
  REQUIRE(snap.ok());
  CHECK(snap->ranks.size() == kRankFaultCapacity);
}

}  // namespace
}  // namespace peregrine::sim
