#include "agent/inspection/host_inspection.h"

#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "tests/agent/inspection/test_util.h"

namespace peregrine {
namespace {

using testing::Fixture;
using testing::TempDir;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

TEST_CASE("host: mountinfo parsing on real-format lines and garbage", "[unit]") {
  absl::StatusOr<std::vector<MountEntry>> mounts = ParseMountInfo(Fixture("mountinfo.txt"));
  REQUIRE(mounts.ok());
  REQUIRE(mounts->size() == 5);
  CHECK((*mounts)[1].mount_point == "/");
  CHECK((*mounts)[1].source == "/dev/nvme0n1p2");
  CHECK((*mounts)[2].fs_type == "xfs");
  CHECK((*mounts)[3].mount_point == "/mnt/data set");
  CHECK((*mounts)[3].read_only);
  CHECK(!(*mounts)[2].read_only);
  CHECK(MountFor(*mounts, "/mnt/ckpt/step_100")->source == "/dev/nvme1n1");
  CHECK(MountFor(*mounts, "/mnt/ckptx")->source == "/dev/nvme0n1p2");
  CHECK(MountFor(*mounts, "/dev/shm")->fs_type == "tmpfs");

  absl::Status s = ParseMountInfo("22 27 0:21 / /proc rw,relatime - proc proc rw\ngarbage line\n").status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("line 2") != std::string::npos);
  CHECK(!ParseMountInfo("1 2 3 4 5 6 7 8 9 10\n").ok());  // no " - " separator

  // The real mountinfo of this process parses.
  absl::StatusOr<std::vector<MountEntry>> real = ParseMountInfo(
      [] {
        std::ifstream in("/proc/self/mountinfo");
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
      }());
  REQUIRE(real.ok());
  CHECK(MountFor(*real, "/") != nullptr);
}

TEST_CASE("host: volume space, missing volumes, nothing configured", "[integration]") {
  TempDir dir;
  HostInspectionOptions options;
  options.volumes = {dir.path(), dir.path() + "/missing"};
  HostInspection inspection(options);
  std::vector<InspectionResult> rs = inspection.Run(kNow);
  REQUIRE(rs.size() == 2);
  CHECK(rs[0].kind == "host");
  CHECK(rs[0].component == dir.path());
  CHECK(rs[0].details.count("free_percent") == 1);
  CHECK(rs[0].details.count("device") == 1);
  CHECK(rs[0].status != InspectionOutcome::kError);
  CHECK(rs[1].status == InspectionOutcome::kError);
  CHECK(rs[1].summary.find("missing") != std::string::npos);

  // Thresholds above 100% free make any real volume look full: FAULT, not machine.
  options.volumes = {dir.path()};
  options.thresholds.free_fault_fraction = 1.01;
  HostInspection full(options);
  rs = full.Run(kNow);
  CHECK(rs[0].status == InspectionOutcome::kFault);
  CHECK(!rs[0].machine_attributed);
  options.thresholds.free_fault_fraction = 0;
  options.thresholds.free_warn_fraction = 1.01;
  HostInspection low(options);
  CHECK(low.Run(kNow)[0].status == InspectionOutcome::kWarning);

  HostInspection none(HostInspectionOptions{});
  rs = none.Run(kNow);
  REQUIRE(rs.size() == 1);
  CHECK(rs[0].status == InspectionOutcome::kNotPresent);
}

}  // namespace
}  // namespace peregrine
