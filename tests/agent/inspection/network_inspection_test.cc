#include "agent/inspection/network_inspection.h"

#include <catch2/catch.hpp>

#include "tests/agent/inspection/test_util.h"

namespace peregrine {
namespace {

using testing::Find;
using testing::TempDir;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

// A fake sysfs tree in the kernel's layout (Documentation/ABI/testing/sysfs-class-net,
// sysfs-class-infiniband): one NIC and one mlx5 port.
struct FakeSysfs {
  TempDir dir;
  FakeSysfs() {
    dir.MakeDir("class/net/ens1f0/device");
    dir.MakeDir("class/net/lo");  // virtual: no device link, not inspected
    dir.Write("class/net/lo/operstate", "unknown\n");
    SetNic("up", 2, 0, 0);
    dir.Write("class/infiniband/mlx5_0/ports/1/link_layer", "InfiniBand\n");
    SetIb("4: ACTIVE", "5: LinkUp", 0, 0, 0);
  }
  void SetNic(const std::string& operstate, uint64_t carrier_changes, uint64_t rx_errors,
              uint64_t rx_dropped) {
    dir.Write("class/net/ens1f0/operstate", operstate + "\n");
    dir.Write("class/net/ens1f0/carrier_changes", std::to_string(carrier_changes) + "\n");
    dir.Write("class/net/ens1f0/statistics/rx_errors", std::to_string(rx_errors) + "\n");
    dir.Write("class/net/ens1f0/statistics/tx_errors", "0\n");
    dir.Write("class/net/ens1f0/statistics/rx_dropped", std::to_string(rx_dropped) + "\n");
    dir.Write("class/net/ens1f0/statistics/tx_dropped", "0\n");
  }
  void SetIb(const std::string& state, const std::string& phys, uint64_t link_downed,
             uint64_t symbol_error, uint64_t xmit_discards) {
    const std::string p = "class/infiniband/mlx5_0/ports/1/";
    dir.Write(p + "state", state + "\n");
    dir.Write(p + "phys_state", phys + "\n");
    dir.Write(p + "counters/link_downed", std::to_string(link_downed) + "\n");
    dir.Write(p + "counters/symbol_error", std::to_string(symbol_error) + "\n");
    dir.Write(p + "counters/port_rcv_errors", "0\n");
    dir.Write(p + "counters/port_xmit_discards", std::to_string(xmit_discards) + "\n");
  }
};

TEST_CASE("network: CounterTracker rates, windows and resets", "[unit]") {
  CounterTracker t(absl::Minutes(10));
  CHECK(!t.RatePerSecond().has_value());
  CHECK(t.IncreaseWithin(absl::Minutes(5)) == 0);
  t.Observe(kT0, 100);
  t.Observe(kT0 + absl::Seconds(10), 150);
  CHECK(*t.RatePerSecond() == Approx(5.0));
  t.Observe(kT0 + absl::Minutes(4), 160);
  t.Observe(kT0 + absl::Minutes(8), 200);
  // Window of 5 minutes before the latest sample (8 min): baseline is the 4-min sample.
  CHECK(t.IncreaseWithin(absl::Minutes(5)) == 40);
  CHECK(t.IncreaseWithin(absl::Minutes(10)) == 100);
  // A counter going backwards is a reset: history restarts.
  t.Observe(kT0 + absl::Minutes(9), 3);
  CHECK(t.IncreaseWithin(absl::Minutes(10)) == 0);
  CHECK(!t.RatePerSecond().has_value());
  // Retention bounds memory.
  CounterTracker bounded(absl::Minutes(1));
  for (int i = 0; i < 1000; ++i) bounded.Observe(kT0 + absl::Seconds(i), i);
  CHECK(bounded.samples() <= 62);
}

TEST_CASE("network: sysfs value parsers on real formats and garbage", "[unit]") {
  auto st = ParseIbPortState("4: ACTIVE\n");
  REQUIRE(st.ok());
  CHECK(st->first == 4);
  CHECK(st->second == "ACTIVE");
  CHECK(ParseIbPortState("5: LinkUp").value().second == "LinkUp");
  CHECK(!ParseIbPortState("ACTIVE").ok());
  CHECK(!ParseIbPortState("").ok());
  CHECK(ParseSysfsCounter("18446744073709551615\n", "x").value() == 18446744073709551615ull);
  absl::Status s = ParseSysfsCounter("-1\n", "/sys/class/net/eth0/carrier_changes").status();
  CHECK(s.message().find("/sys/class/net/eth0/carrier_changes") != std::string::npos);
  CHECK(!ParseSysfsCounter("\xff\xfe", "x").ok());
}

TEST_CASE("network: healthy, flapping, erroring and down links in a fake sysfs", "[integration]") {
  FakeSysfs sys;
  NetworkInspectionOptions options;
  options.sysfs_root = sys.dir.path();
  NetworkInspection inspection(options);

  std::vector<InspectionResult> rs = inspection.Run(kT0);
  REQUIRE(rs.size() == 2);  // ens1f0 and mlx5_0/1; lo is virtual
  CHECK(Find(rs, "ens1f0")->status == InspectionOutcome::kOk);
  CHECK(Find(rs, "mlx5_0/1")->status == InspectionOutcome::kOk);
  CHECK(Find(rs, "mlx5_0/1")->details.at("state") == "ACTIVE");

  // Two flaps (4 carrier changes) within a minute: WARNING, not machine-attributed.
  sys.SetNic("up", 6, 0, 0);
  rs = inspection.Run(kT0 + absl::Seconds(60));
  const InspectionResult* nic = Find(rs, "ens1f0");
  CHECK(nic->status == InspectionOutcome::kWarning);
  CHECK(!nic->machine_attributed);
  CHECK(nic->details.at("flaps_in_window") == "2");

  // Errors at 10/s and drops at 500/s.
  sys.SetNic("up", 6, 600, 30000);
  rs = inspection.Run(kT0 + absl::Seconds(120));
  nic = Find(rs, "ens1f0");
  CHECK(nic->status == InspectionOutcome::kWarning);
  CHECK(nic->summary.find("rx_errors 10.0/s") != std::string::npos);
  CHECK(nic->summary.find("rx_dropped 500.0/s") != std::string::npos);

  // Much later: the flaps left the window, counters stable -> healthy again.
  rs = inspection.Run(kT0 + absl::Minutes(20));
  CHECK(Find(rs, "ens1f0")->status == InspectionOutcome::kOk);

  // Link down: FAULT. IB port down and flapping: FAULT.
  sys.SetNic("down", 7, 600, 30000);
  sys.SetIb("1: DOWN", "3: Disabled", 3, 0, 0);
  rs = inspection.Run(kT0 + absl::Minutes(21));
  CHECK(Find(rs, "ens1f0")->status == InspectionOutcome::kFault);
  CHECK(Find(rs, "ens1f0")->summary.find("link down") != std::string::npos);
  const InspectionResult* ib = Find(rs, "mlx5_0/1");
  CHECK(ib->status == InspectionOutcome::kFault);
  CHECK(ib->summary.find("state DOWN") != std::string::npos);
  CHECK(ib->summary.find("3 link-down events") != std::string::npos);
  CHECK(!ib->machine_attributed);

  // IB symbol errors at 2/s.
  sys.SetIb("4: ACTIVE", "5: LinkUp", 3, 120, 0);
  rs = inspection.Run(kT0 + absl::Minutes(22));
  ib = Find(rs, "mlx5_0/1");
  CHECK(ib->status == InspectionOutcome::kWarning);
  CHECK(ib->summary.find("symbol_error 2.0/s") != std::string::npos);

  // Garbage in a counter file: an inspection ERROR for that port, not a fault (once the
  // flaps have left the window, so that nothing worse hides it).
  sys.SetIb("4: ACTIVE", "5: LinkUp", 3, 120, 0);
  sys.dir.Write("class/infiniband/mlx5_0/ports/1/counters/symbol_error", "garbage\n");
  rs = inspection.Run(kT0 + absl::Minutes(40));
  ib = Find(rs, "mlx5_0/1");
  CHECK(ib->status == InspectionOutcome::kError);
  CHECK(ib->summary.find("symbol_error") != std::string::npos);
  sys.dir.Write("class/infiniband/mlx5_0/ports/1/state", "ACTIVE?\n");
  sys.dir.Write("class/infiniband/mlx5_0/ports/1/counters/symbol_error", "120\n");
  rs = inspection.Run(kT0 + absl::Minutes(41));
  CHECK(Find(rs, "mlx5_0/1")->status == InspectionOutcome::kError);
}

TEST_CASE("network: without RDMA hardware the RDMA inspection is NOT_PRESENT", "[integration]") {
  // The real sysfs of this machine: NICs but no /sys/class/infiniband.
  NetworkInspection real(NetworkInspectionOptions{});
  std::vector<InspectionResult> rs = real.Run(kT0);
  const InspectionResult* rdma = Find(rs, "rdma");
  if (rdma == nullptr) {
    WARN("this machine has RDMA ports; skipping the NOT_PRESENT check");
  } else {
    CHECK(rdma->status == InspectionOutcome::kNotPresent);
    CHECK(!rdma->machine_attributed);
  }
  for (const auto& r : rs) {
    INFO(r.DebugString());
    CHECK(r.status != InspectionOutcome::kError);
  }
  // An empty sysfs: nothing present at all, and no fault.
  TempDir empty;
  NetworkInspectionOptions options;
  options.sysfs_root = empty.path();
  NetworkInspection none(options);
  rs = none.Run(kT0);
  REQUIRE(rs.size() == 2);
  CHECK(Find(rs, "nic")->status == InspectionOutcome::kNotPresent);
  CHECK(Find(rs, "rdma")->status == InspectionOutcome::kNotPresent);
}

TEST_CASE("network: a pod's own network namespace (only lo and a veth) is CANNOT_SEE, not a pass", "[integration]") {
  // sysfs as a pod without hostNetwork sees it: lo and eth0, the pod's veth end, neither
  // with a device link.
  TempDir sys;
  for (const char* n : {"lo", "eth0"}) {
    sys.Write(std::string("class/net/") + n + "/operstate", "up\n");
    sys.Write(std::string("class/net/") + n + "/carrier", "1\n");
  }
  NetworkInspectionOptions options;
  options.sysfs_root = sys.path();
  NetworkInspection pod(options);
  std::vector<InspectionResult> rs = pod.Run(kT0);
  const InspectionResult* nic = Find(rs, "nic");
  REQUIRE(nic != nullptr);
  CHECK(nic->status == InspectionOutcome::kCannotSee);
  CHECK(!nic->machine_attributed);
  CHECK(nic->details.at("interfaces") == "eth0");
  CHECK(nic->summary.find("only this pod's network namespace") != std::string::npos);
  CHECK(Find(rs, "eth0") == nullptr);  // a veth is not inspected as a NIC
  // Only loopback: no network at all, NOT_PRESENT as before.
  TempDir lo_only;
  lo_only.Write("class/net/lo/operstate", "unknown\n");
  options.sysfs_root = lo_only.path();
  NetworkInspection isolated(options);
  rs = isolated.Run(kT0);
  CHECK(Find(rs, "nic")->status == InspectionOutcome::kNotPresent);
}

}  // namespace
}  // namespace peregrine
