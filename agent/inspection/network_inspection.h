// Network inspection: NIC and RDMA port state, link flaps, error and drop counters and
// their rates, from sysfs:
//   <root>/class/net/<if>/{operstate,carrier,carrier_changes,statistics/<counter>}
//   <root>/class/infiniband/<dev>/ports/<n>/{state,phys_state,link_layer,
//                                            counters/<counter>}
// (state reads "4: ACTIVE", phys_state "5: LinkUp"). Without /class/infiniband (no RDMA)
// the RDMA result is NOT_PRESENT, never a fault.
//
// Rates and flaps come from CounterTracker, a pure evaluator fed (value, now): tested
// without clocks. Network trouble is never machine-attributed here: the controller
// tolerates network alarms (acts on the 2nd within 5 minutes).
//
// Thread-compatible.
#ifndef PEREGRINE_AGENT_INSPECTION_NETWORK_INSPECTION_H_
#define PEREGRINE_AGENT_INSPECTION_NETWORK_INSPECTION_H_

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/inspection/inspection.h"

namespace peregrine {

// History of one monotonically increasing counter. A value below the previous one is a
// counter reset (driver reload): history restarts from it. Samples older than `retention`
// are dropped, so memory is bounded by the sampling rate.
class CounterTracker {
 public:
  explicit CounterTracker(absl::Duration retention = absl::Minutes(10)) : retention_(retention) {}
  void Observe(absl::Time now, uint64_t value);
  // Increase over the samples within `window` before the latest sample (0 with < 2).
  uint64_t IncreaseWithin(absl::Duration window) const;
  // Increase per second between the two latest samples; nullopt with < 2 samples.
  std::optional<double> RatePerSecond() const;
  size_t samples() const { return history_.size(); }

 private:
  absl::Duration retention_;
  std::deque<std::pair<absl::Time, uint64_t>> history_;
};

// "4: ACTIVE" -> {4, "ACTIVE"}; kInvalidArgument otherwise.
absl::StatusOr<std::pair<int, std::string>> ParseIbPortState(absl::string_view text);

// A sysfs counter file: one unsigned decimal number and a newline. kInvalidArgument
// (naming the path) otherwise.
absl::StatusOr<uint64_t> ParseSysfsCounter(absl::string_view text, absl::string_view path);

struct NetworkThresholds {
  absl::Duration flap_window = absl::Minutes(5);
  int flaps_warn = 2;                  // carrier/link-down transitions within the window
  double errors_per_second_warn = 1;   // rx/tx errors, IB symbol/receive errors
  double drops_per_second_warn = 100;  // rx/tx dropped, IB xmit discards
};

struct NetworkInspectionOptions {
  std::string sysfs_root = "/sys";
  // Interfaces to inspect; empty: every interface with a "device" link (physical NICs).
  std::vector<std::string> interfaces;
  NetworkThresholds thresholds;
};

class NetworkInspection : public Inspection {
 public:
  explicit NetworkInspection(NetworkInspectionOptions options) : options_(std::move(options)) {}
  std::string kind() const override { return "network"; }
  // One "network" result per NIC and one "rdma" result per IB port (or one NOT_PRESENT
  // "rdma" result). Without a physical NIC: one CANNOT_SEE "nic" result when the
  // namespace holds virtual interfaces other than lo (a pod's own network namespace: the
  // host's NICs are invisible), else one NOT_PRESENT "nic" result.
  std::vector<InspectionResult> Run(absl::Time now) override;

 private:
  InspectionResult InspectNic(const std::string& name, absl::Time now);
  InspectionResult InspectIbPort(const std::string& device, const std::string& port,
                                 absl::Time now);
  CounterTracker& Tracker(const std::string& key);

  NetworkInspectionOptions options_;
  std::map<std::string, CounterTracker> trackers_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_NETWORK_INSPECTION_H_
