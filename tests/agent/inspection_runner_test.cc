// InspectionRunner: with the node inspector covering the node (host_checks_on_node) the
// agent runs only the volume inspection; without it, every inspection as before.
#include "agent/inspection_runner.h"

#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using testing::TempDir;

std::set<std::string> Kinds(const std::vector<v1::InspectionResult>& results) {
  std::set<std::string> kinds;
  for (const v1::InspectionResult& r : results) kinds.insert(r.kind());
  return kinds;
}

TEST_CASE("inspection runner: host_checks_on_node skips the kernel-log, network and GPU inspections", "[integration]") {
  TempDir dir;
  REQUIRE(PrepareStandInMachine(dir.path()).ok());
  // A machine-fatal Xid in the stand-in kernel log: only a runner that reads it reports it.
  dir.Write("kmsg", "3,1,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.\n");
  InspectionRunnerOptions options;
  options.kmsg_path = dir.path() + "/kmsg";
  options.sysfs_root = dir.path() + "/sys";
  options.use_dmesg_fallback = false;
  options.volumes = {dir.path()};
  const absl::Time now = absl::FromUnixSeconds(1700000000);

  InspectionRunner everything(options);
  everything.Poll(now);
  const std::set<std::string> all = Kinds(everything.Latest());
  CHECK(all.count("xid") == 1);
  CHECK(all.count("network") == 1);
  CHECK(all.count("gpu") == 1);  // NOT_PRESENT without GPUs, but reported
  CHECK(all.count("host") == 1);
  bool fatal = false;
  for (const v1::InspectionResult& r : everything.Latest()) {
    fatal |= r.kind() == "xid" && r.status() == v1::INSPECTION_STATUS_FAULT;
  }
  CHECK(fatal);

  options.host_checks_on_node = true;
  InspectionRunner pod_only(options);
  InspectionRunner::Outcome outcome = pod_only.Poll(now);
  CHECK(outcome.ran);
  CHECK(outcome.alarms.empty());  // the Xid is the node inspector's to report
  CHECK(Kinds(pod_only.Latest()) == std::set<std::string>{"host"});
}

}  // namespace
}  // namespace peregrine
