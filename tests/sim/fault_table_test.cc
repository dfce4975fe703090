// The fault table: controller API round trips, reader change tracking, bad files.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include <catch2/catch.hpp>

#include "sim/fault/fault_control.h"
#include "sim/fault/fault_table.h"
#include "tests/sim/sim_test_util.h"

namespace peregrine::sim {
namespace {

using peregrine::testing::FreshFaultTable;
using peregrine::testing::TempDir;

// The table's entries now; REQUIREs that it reads.
absl::StatusOr<FaultTableSnapshot> Read(const std::string& path) {
  absl::StatusOr<FaultTableSnapshot> snap = ReadFaults(path);
  INFO(snap.status().ToString());
  REQUIRE(snap.ok());
  return snap;
}

TEST_CASE("fault table: set and read and merge and clear", "[unit]") {
  const FreshFaultTable table;
  const std::string& path = table.path;
  auto empty = Read(path);
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

  auto snap = Read(path);
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
  snap = Read(path);
  CHECK(snap->ranks.size() == 1);
  CHECK(snap->RankFaultFor(3, 0).compute_slowdown == 1.0);
  CHECK(snap->LinkFaultFor(0, 1) == delay);
  CHECK_FALSE(snap->LinkFaultFor(1, 0).Any());

  REQUIRE(ClearFaults(path).ok());
  snap = Read(path);
  CHECK(snap->ranks.empty());
  CHECK(snap->links.empty());
}

TEST_CASE("fault table: intra_corrupt and link corrupt round-trip, a link end of -1 is every other machine", "[unit]") {
  const FreshFaultTable table;
  const std::string& path = table.path;
  RankFault nvlink;
  nvlink.intra_corrupt = true;
  CHECK(nvlink.Any());
  REQUIRE(SetRankFault(path, 2, -1, nvlink).ok());
  LinkFault nic;
  nic.corrupt = true;
  CHECK(nic.Any());
  REQUIRE(SetLinkFault(path, 5, -1, nic, /*both_directions=*/true).ok());  // machine 5's NIC, both ways
  LinkFault cap;
  cap.bandwidth_bytes_per_s = 4e6;
  cap.delay_us = 10;
  REQUIRE(SetLinkFault(path, 5, 6, cap).ok());
  LinkFault wide_cap;
  wide_cap.bandwidth_bytes_per_s = 8e6;
  wide_cap.delay_us = 30;
  REQUIRE(SetLinkFault(path, -1, 6, wide_cap).ok());
  auto snap = Read(path);
  const RankFault got = snap->RankFaultFor(2, 1);
  CHECK(got.intra_corrupt);
  CHECK_FALSE(got.corrupt);
  CHECK_FALSE(got.nan);
  CHECK_FALSE(snap->RankFaultFor(3, 1).intra_corrupt);
  CHECK(snap->links.size() == 4);
  // Machine 5 <-> any other machine: corrupt; the exact 5 -> 6 entry and the (-1, 6)
  // entry merge in (largest delay, smallest cap).
  CHECK(snap->LinkFaultFor(5, 0).corrupt);
  CHECK(snap->LinkFaultFor(0, 5).corrupt);
  const LinkFault five_six = snap->LinkFaultFor(5, 6);
  CHECK(five_six.corrupt);
  CHECK(five_six.bandwidth_bytes_per_s == 4e6);
  CHECK(five_six.delay_us == 30);
  CHECK(snap->LinkFaultFor(1, 6) == wide_cap);
  CHECK_FALSE(snap->LinkFaultFor(6, 1).Any());
  CHECK_FALSE(snap->LinkFaultFor(5, 5).Any());  // a wildcard never means the machine itself
  CHECK_FALSE(snap->LinkFaultFor(0, 1).Any());
  CHECK_FALSE(snap->LinkFaultFor(-1, 5).Any());  // unknown identity never matches
  // Bad ends are rejected; removing the NIC fault removes both directions.
  CHECK(SetLinkFault(path, -1, -1, nic).code() == absl::StatusCode::kInvalidArgument);
  CHECK(SetLinkFault(path, -2, 1, nic).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(SetLinkFault(path, 5, -1, LinkFault{}, /*both_directions=*/true).ok());
  snap = Read(path);
  CHECK_FALSE(snap->LinkFaultFor(5, 0).Any());
  CHECK_FALSE(snap->LinkFaultFor(0, 5).Any());
  CHECK(snap->LinkFaultFor(5, 6).bandwidth_bytes_per_s == 4e6);
}

TEST_CASE("fault table: ClearMachineFaults removes one GPU's or one machine's faults only", "[unit]") {
  const FreshFaultTable table;
  const std::string& path = table.path;
  RankFault crash;
  crash.crash = true;
  RankFault nvlink;
  nvlink.intra_corrupt = true;
  LinkFault nic;
  nic.corrupt = true;
  REQUIRE(SetRankFault(path, 1, -1, nvlink).ok());
  REQUIRE(SetRankFault(path, 2, 0, crash).ok());
  REQUIRE(SetRankFault(path, 2, 1, crash).ok());
  REQUIRE(SetLinkFault(path, 2, -1, nic, /*both_directions=*/true).ok());
  REQUIRE(SetLinkFault(path, 0, 1, nic).ok());
  REQUIRE(ClearMachineFaults(path, 2, 0).ok());  // GPU 0 of machine 2 only
  auto snap = Read(path);
  CHECK_FALSE(snap->RankFaultFor(2, 0).crash);
  CHECK(snap->RankFaultFor(2, 1).crash);
  CHECK(snap->LinkFaultFor(2, 0).corrupt);
  REQUIRE(ClearMachineFaults(path, 2, -1).ok());  // the rest of machine 2, links included
  snap = Read(path);
  CHECK_FALSE(snap->RankFaultFor(2, 1).Any());
  CHECK_FALSE(snap->LinkFaultFor(2, 0).Any());
  CHECK_FALSE(snap->LinkFaultFor(3, 2).Any());
  CHECK(snap->RankFaultFor(1, 0).intra_corrupt);  // other machines keep theirs
  CHECK(snap->LinkFaultFor(0, 1).corrupt);
  CHECK(ClearMachineFaults(path, -1, 0).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("fault table: CorruptPayload flips one bit per 4 bytes and is its own inverse", "[unit]") {
  std::vector<float> v = {1.0f, 1000.0f, -3.5f, 65521.0f, 0.25f};
  const std::vector<float> original = v;
  CorruptPayload(v.data(), v.size() * sizeof(float));
  for (size_t i = 0; i < v.size(); ++i) {
    CHECK(v[i] != original[i]);
    CHECK(std::isfinite(v[i]));
    CHECK(std::abs(v[i] - original[i]) <= std::abs(original[i]) * 1e-6f);
  }
  CorruptPayload(v.data(), v.size() * sizeof(float));
  CHECK(v == original);
  unsigned char odd[3] = {0x10, 0x20, 0x30};
  CorruptPayload(odd, 3);
  CHECK(odd[0] == 0x11);
  CHECK(odd[1] == 0x20);
  CHECK(odd[2] == 0x30);
}

TEST_CASE("fault table: grad_corrupt round-trips on its own bit and merges per GPU", "[unit]") {
  const FreshFaultTable table;
  const std::string& path = table.path;
  RankFault sdc;
  sdc.grad_corrupt = true;
  CHECK(sdc.Any());
  REQUIRE(SetRankFault(path, 2, -1, sdc).ok());
  auto snap = Read(path);
  const RankFault got = snap->RankFaultFor(2, 1);
  CHECK(got.grad_corrupt);
  CHECK_FALSE(got.corrupt);
  CHECK_FALSE(got.nan);
  CHECK_FALSE(got.crash);
  CHECK_FALSE(snap->RankFaultFor(1, 1).grad_corrupt);
}

TEST_CASE("fault table: a reader follows changes and a re-created table", "[unit]") {
  TempDir dir;
  const std::string path = dir.Path("faults");
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
  const std::string path = dir.Path("faults");
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

  const std::string garbage = dir.Path("garbage");
  {
    std::ofstream out(garbage);
    for (int i = 0; i < 2000; ++i) out << "not a fault table ";
  }
  CHECK(ReadFaults(garbage).status().code() == absl::StatusCode::kDataLoss);
  CHECK(SetRankFault(garbage, 0, 0, fast).code() != absl::StatusCode::kOk);
  FaultTableReader reader(garbage);
  CHECK(reader.Poll().ranks.empty());
  CHECK_FALSE(reader.error().empty());
  const std::string tiny = dir.Path("tiny");
  { std::ofstream out(tiny); out << "PRG"; }
  CHECK(ReadFaults(tiny).status().code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("fault table: jitter is stored, merged and validated", "[unit]") {
  const FreshFaultTable table;
  const std::string& path = table.path;
  RankFault machine_wide;
  machine_wide.jitter_fraction = 0.05;
  RankFault gpu;
  gpu.jitter_fraction = 0.2;
  gpu.compute_slowdown = 1.5;
  REQUIRE(SetRankFault(path, 2, -1, machine_wide).ok());
  REQUIRE(SetRankFault(path, 2, 1, gpu).ok());
  auto snap = Read(path);
  CHECK(snap->RankFaultFor(2, 0).jitter_fraction == 0.05);
  CHECK(snap->RankFaultFor(2, 0).Any());
  CHECK(snap->RankFaultFor(2, 1).jitter_fraction == 0.2);  // the largest applies
  CHECK(snap->RankFaultFor(2, 1).compute_slowdown == 1.5);
  CHECK(snap->RankFaultFor(3, 0).jitter_fraction == 0.0);
  for (double bad : {-0.1, 1.0, 2.0}) {
    RankFault f;
    f.jitter_fraction = bad;
    const absl::Status s = SetRankFault(path, 0, 0, f);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("jitter_fraction"));
  }
}

TEST_CASE("fault table: JitterFactor is uniform within 1 +- j, per seed and draw", "[unit]") {
  CHECK(JitterFactor(0.0, 3, 7) == 1.0);
  CHECK(JitterFactor(-1.0, 3, 7) == 1.0);
  double lo = 2, hi = 0, sum = 0;
  int below = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double f = JitterFactor(0.05, 5, static_cast<uint64_t>(i));
    REQUIRE(f >= 0.95);
    REQUIRE(f <= 1.05);
    lo = std::min(lo, f);
    hi = std::max(hi, f);
    sum += f;
    below += f < 0.975 ? 1 : 0;  // the lowest quarter of the range
  }
  CHECK(lo < 0.951);
  CHECK(hi > 1.049);
  CHECK(sum / n == Approx(1.0).margin(0.002));
  CHECK(below == Approx(n / 4).epsilon(0.05));
  // Reproducible, and independent across seeds (ranks).
  CHECK(JitterFactor(0.05, 5, 42) == JitterFactor(0.05, 5, 42));
  int same = 0;
  for (uint64_t draw = 0; draw < 100; ++draw) same += JitterFactor(0.05, 1, draw) == JitterFactor(0.05, 2, draw);
  CHECK(same == 0);
}

TEST_CASE("fault table: a table of another version is rejected, naming both versions", "[unit]") {
  const FreshFaultTable table;
  const std::string& path = table.path;
  {
    // Rewrite the header as an older build wrote it (version 1).
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    FaultTableHeader h{};
    f.read(reinterpret_cast<char*>(&h), sizeof(h));
    REQUIRE(h.version == kFaultTableVersion);
    h.version = 1;
    f.seekp(0);
    f.write(reinterpret_cast<const char*>(&h), sizeof(h));
  }
  const absl::StatusOr<FaultTableSnapshot> read = ReadFaults(path);
  CHECK(read.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(read.status().message()), Catch::Contains("version 1") && Catch::Contains("version 3"));
  CHECK(SetRankFault(path, 0, 0, RankFault{}).code() == absl::StatusCode::kDataLoss);
  FaultTableReader reader(path);
  CHECK(reader.Poll().ranks.empty());
  CHECK_THAT(reader.error(), Catch::Contains("version 1"));
  // Creating the table again replaces the old one with a current one.
  REQUIRE(CreateFaultTable(path).ok());
  CHECK(ReadFaults(path).ok());
}

TEST_CASE("fault table: capacity is enforced", "[unit]") {
  const FreshFaultTable table;
  const std::string& path = table.path;
  RankFault hang;
  hang.hang = true;
  for (uint32_t m = 0; m < kRankFaultCapacity; ++m) {
    REQUIRE(SetRankFault(path, static_cast<int>(m), 0, hang).ok());
  }
  CHECK(SetRankFault(path, 100000, 0, hang).code() == absl::StatusCode::kResourceExhausted);
  auto snap = Read(path);
  CHECK(snap->ranks.size() == kRankFaultCapacity);
}

}  // namespace
}  // namespace peregrine::sim
