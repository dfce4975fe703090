#include "agent/inspection/network_inspection.h"

#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/inspection/sysfs_read.h"

namespace peregrine {

using inspection_internal::ListDirectory;
using inspection_internal::PathExists;
using inspection_internal::ReadSmallFile;

void CounterTracker::Observe(absl::Time now, uint64_t value) {
  if (!history_.empty() && value < history_.back().second) history_.clear();  // reset
  history_.emplace_back(now, value);
  while (history_.size() > 2 && now - history_.front().first > retention_) history_.pop_front();
}

uint64_t CounterTracker::IncreaseWithin(absl::Duration window) const {
  if (history_.size() < 2) return 0;
  const absl::Time latest = history_.back().first;
  // The oldest sample inside the window is the baseline.
  for (const auto& [t, v] : history_) {
    if (latest - t <= window) return history_.back().second - v;
  }
  return 0;
}

std::optional<double> CounterTracker::RatePerSecond() const {
  if (history_.size() < 2) return std::nullopt;
  const auto& [t1, v1] = history_[history_.size() - 2];
  const auto& [t2, v2] = history_.back();
  const double seconds = absl::ToDoubleSeconds(t2 - t1);
  if (seconds <= 0) return std::nullopt;
  return static_cast<double>(v2 - v1) / seconds;
}

absl::StatusOr<std::pair<int, std::string>> ParseIbPortState(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  const size_t colon = s.find(':');
  int code = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(s.substr(0, colon), &code)) {
    return absl::InvalidArgumentError(
        absl::StrCat("IB port state \"", s.substr(0, 60), "\" is not \"<code>: <NAME>\""));
  }
  return std::make_pair(code, std::string(absl::StripAsciiWhitespace(s.substr(colon + 1))));
}

absl::StatusOr<uint64_t> ParseSysfsCounter(absl::string_view text, absl::string_view path) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": \"",
                                                   absl::StripAsciiWhitespace(text).substr(0, 40),
                                                   "\" is not a counter"));
  }
  return v;
}

CounterTracker& NetworkInspection::Tracker(const std::string& key) {
  auto it = trackers_.find(key);
  if (it == trackers_.end()) {
    it = trackers_.emplace(key, CounterTracker(options_.thresholds.flap_window * 2)).first;
  }
  return it->second;
}

namespace {

struct Findings {
  std::vector<std::string> faults, warnings, errors;
};

// Status precedence FAULT > WARNING > ERROR > OK; the summary keeps every finding.
void Finish(InspectionResult& r, const Findings& f) {
  std::vector<std::string> all = f.faults;
  all.insert(all.end(), f.warnings.begin(), f.warnings.end());
  all.insert(all.end(), f.errors.begin(), f.errors.end());
  if (!f.faults.empty()) {
    r.status = InspectionOutcome::kFault;
    r.summary = absl::StrJoin(all, "; ");
  } else if (!f.warnings.empty()) {
    r.status = InspectionOutcome::kWarning;
    r.summary = absl::StrJoin(all, "; ");
  } else if (!f.errors.empty()) {
    r.status = InspectionOutcome::kError;
    r.summary = absl::StrJoin(f.errors, "; ");
  } else {
    r.status = InspectionOutcome::kOk;
    r.summary = "healthy";
  }
}

}  // namespace

InspectionResult NetworkInspection::InspectNic(const std::string& name, absl::Time now) {
  const NetworkThresholds& t = options_.thresholds;
  const std::string dir = absl::StrCat(options_.sysfs_root, "/class/net/", name);
  InspectionResult r;
  r.kind = "network";
  r.component = name;
  r.observed_at = now;
  Findings f;
  absl::StatusOr<std::string> oper = ReadSmallFile(dir + "/operstate");
  if (!oper.ok()) {
    f.errors.push_back(std::string(oper.status().message()));
  } else {
    const std::string state(absl::StripAsciiWhitespace(*oper));
    r.details["operstate"] = state;
    if (state != "up" && state != "unknown") f.faults.push_back(absl::StrCat("link ", state));
  }
  auto counter = [&](const std::string& file) -> std::optional<uint64_t> {
    const std::string path = absl::StrCat(dir, "/", file);
    absl::StatusOr<std::string> text = ReadSmallFile(path);
    if (!text.ok()) {
      // carrier files read EINVAL while the link is down; statistics may be missing.
      if (text.status().code() != absl::StatusCode::kNotFound &&
          text.status().code() != absl::StatusCode::kUnavailable) {
        f.errors.push_back(std::string(text.status().message()));
      }
      return std::nullopt;
    }
    absl::StatusOr<uint64_t> v = ParseSysfsCounter(*text, path);
    if (!v.ok()) {
      f.errors.push_back(std::string(v.status().message()));
      return std::nullopt;
    }
    CounterTracker& tracker = Tracker(absl::StrCat(name, "/", file));
    tracker.Observe(now, *v);
    r.details[file.substr(file.rfind('/') + 1)] = absl::StrCat(*v);
    return *v;
  };
  // Flaps: carrier_down_count where the kernel has it (>= 5.x), else carrier_changes / 2.
  std::optional<uint64_t> downs = counter("carrier_down_count");
  uint64_t flaps = 0;
  if (downs) {
    flaps = Tracker(name + "/carrier_down_count").IncreaseWithin(t.flap_window);
  } else if (counter("carrier_changes")) {
    flaps = Tracker(name + "/carrier_changes").IncreaseWithin(t.flap_window) / 2;
  }
  r.details["flaps_in_window"] = absl::StrCat(flaps);
  if (flaps >= static_cast<uint64_t>(t.flaps_warn)) {
    f.warnings.push_back(absl::StrFormat("%d link flaps within %s", flaps,
                                         absl::FormatDuration(t.flap_window)));
  }
  for (const char* c : {"statistics/rx_errors", "statistics/tx_errors", "statistics/rx_crc_errors"}) {
    if (!counter(c)) continue;
    std::optional<double> rate = Tracker(absl::StrCat(name, "/", c)).RatePerSecond();
    if (rate && *rate >= t.errors_per_second_warn) {
      f.warnings.push_back(absl::StrFormat("%s %.1f/s", c + 11, *rate));
    }
  }
  for (const char* c : {"statistics/rx_dropped", "statistics/tx_dropped"}) {
    if (!counter(c)) continue;
    std::optional<double> rate = Tracker(absl::StrCat(name, "/", c)).RatePerSecond();
    if (rate && *rate >= t.drops_per_second_warn) {
      f.warnings.push_back(absl::StrFormat("%s %.1f/s", c + 11, *rate));
    }
  }
  Finish(r, f);
  return r;
}

InspectionResult NetworkInspection::InspectIbPort(const std::string& device,
                                                  const std::string& port, absl::Time now) {
  const NetworkThresholds& t = options_.thresholds;
  const std::string dir =
      absl::StrCat(options_.sysfs_root, "/class/infiniband/", device, "/ports/", port);
  const std::string key = absl::StrCat(device, "/", port);
  InspectionResult r;
  r.kind = "rdma";
  r.component = key;
  r.observed_at = now;
  Findings f;
  for (const auto& [file, want_code, want_name] :
       {std::make_tuple("state", 4, "ACTIVE"), std::make_tuple("phys_state", 5, "LinkUp")}) {
    absl::StatusOr<std::string> text = ReadSmallFile(absl::StrCat(dir, "/", file));
    if (!text.ok()) {
      f.errors.push_back(std::string(text.status().message()));
      continue;
    }
    absl::StatusOr<std::pair<int, std::string>> st = ParseIbPortState(*text);
    if (!st.ok()) {
      f.errors.push_back(absl::StrCat(dir, "/", file, ": ", st.status().message()));
      continue;
    }
    r.details[file] = st->second;
    if (st->first != want_code) {
      f.faults.push_back(absl::StrFormat("port %s %s (want %s)", file, st->second, want_name));
    }
  }
  if (absl::StatusOr<std::string> ll = ReadSmallFile(dir + "/link_layer"); ll.ok()) {
    r.details["link_layer"] = std::string(absl::StripAsciiWhitespace(*ll));
  }
  auto counter = [&](const std::string& name) -> bool {
    const std::string path = absl::StrCat(dir, "/counters/", name);
    absl::StatusOr<std::string> text = ReadSmallFile(path);
    if (!text.ok()) return false;
    absl::StatusOr<uint64_t> v = ParseSysfsCounter(*text, path);
    if (!v.ok()) {
      f.errors.push_back(std::string(v.status().message()));
      return false;
    }
    Tracker(absl::StrCat(key, "/", name)).Observe(now, *v);
    r.details[name] = absl::StrCat(*v);
    return true;
  };
  if (counter("link_downed")) {
    const uint64_t flaps = Tracker(key + "/link_downed").IncreaseWithin(t.flap_window);
    r.details["flaps_in_window"] = absl::StrCat(flaps);
    if (flaps >= static_cast<uint64_t>(t.flaps_warn)) {
      f.warnings.push_back(absl::StrFormat("%d link-down events within %s", flaps,
                                           absl::FormatDuration(t.flap_window)));
    }
  }
  for (const char* c : {"symbol_error", "port_rcv_errors", "link_error_recovery",
                        "local_link_integrity_errors", "port_rcv_remote_physical_errors"}) {
    if (!counter(c)) continue;
    std::optional<double> rate = Tracker(absl::StrCat(key, "/", c)).RatePerSecond();
    if (rate && *rate >= t.errors_per_second_warn) {
      f.warnings.push_back(absl::StrFormat("%s %.1f/s", c, *rate));
    }
  }
  if (counter("port_xmit_discards")) {
    std::optional<double> rate = Tracker(key + "/port_xmit_discards").RatePerSecond();
    if (rate && *rate >= t.drops_per_second_warn) {
      f.warnings.push_back(absl::StrFormat("port_xmit_discards %.1f/s", *rate));
    }
  }
  Finish(r, f);
  return r;
}

std::vector<InspectionResult> NetworkInspection::Run(absl::Time now) {
  std::vector<InspectionResult> results;
  std::vector<std::string> nics = options_.interfaces;
  // Virtual interfaces other than loopback (veth, bridges, tunnels): all a pod's own
  // network namespace holds. /sys/class/net shows the interfaces of the namespace of the
  // process that mounted sysfs, so in a pod without hostNetwork there is no physical NIC,
  // only the pod's veth end: the inspection cannot see the host's NICs there.
  std::vector<std::string> virtual_only;
  if (nics.empty()) {
    absl::StatusOr<std::vector<std::string>> all =
        ListDirectory(options_.sysfs_root + "/class/net");
    if (all.ok()) {
      for (const std::string& n : *all) {
        if (PathExists(absl::StrCat(options_.sysfs_root, "/class/net/", n, "/device"))) {
          nics.push_back(n);
        } else if (n != "lo") {
          virtual_only.push_back(n);
        }
      }
    }
  }
  for (const std::string& n : nics) results.push_back(InspectNic(n, now));
  if (nics.empty() && !virtual_only.empty()) {
    InspectionResult r;
    r.kind = "network";
    r.component = "nic";
    r.status = InspectionOutcome::kCannotSee;
    r.summary = absl::StrCat("sees only this pod's network namespace (virtual interfaces: ",
                             absl::StrJoin(virtual_only, ", "),
                             "): the host's NICs are not visible from here");
    r.details["reason"] = "pod network namespace only";
    r.details["interfaces"] = absl::StrJoin(virtual_only, ",");
    r.observed_at = now;
    results.push_back(std::move(r));
  } else if (nics.empty()) {
    InspectionResult r;
    r.kind = "network";
    r.component = "nic";
    r.status = InspectionOutcome::kNotPresent;
    r.summary = "no physical network interface";
    r.observed_at = now;
    results.push_back(std::move(r));
  }
  const std::string ib_root = options_.sysfs_root + "/class/infiniband";
  absl::StatusOr<std::vector<std::string>> devices = ListDirectory(ib_root);
  size_t ports_seen = 0;
  if (devices.ok()) {
    for (const std::string& d : *devices) {
      absl::StatusOr<std::vector<std::string>> ports =
          ListDirectory(absl::StrCat(ib_root, "/", d, "/ports"));
      if (!ports.ok()) continue;
      for (const std::string& p : *ports) {
        results.push_back(InspectIbPort(d, p, now));
        ++ports_seen;
      }
    }
  }
  if (ports_seen == 0) {
    InspectionResult r;
    r.kind = "rdma";
    r.component = "rdma";
    r.status = InspectionOutcome::kNotPresent;
    r.summary = devices.ok() ? "no RDMA port" : "no RDMA device (no /sys/class/infiniband)";
    r.observed_at = now;
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace peregrine
