#include "agent/inspection_runner.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/inspection/gpu_inspection.h"
#include "agent/inspection/host_inspection.h"
#include "agent/inspection/kernel_log.h"
#include "agent/inspection/network_inspection.h"

namespace peregrine {
namespace {

v1::InspectionStatus ToWireStatus(InspectionOutcome s) {
  switch (s) {
    case InspectionOutcome::kOk: return v1::INSPECTION_STATUS_OK;
    case InspectionOutcome::kNotPresent: return v1::INSPECTION_STATUS_NOT_PRESENT;
    case InspectionOutcome::kWarning: return v1::INSPECTION_STATUS_WARNING;
    case InspectionOutcome::kFault: return v1::INSPECTION_STATUS_FAULT;
    case InspectionOutcome::kError: return v1::INSPECTION_STATUS_ERROR;
    case InspectionOutcome::kCannotSee: return v1::INSPECTION_STATUS_CANNOT_SEE;
  }
  return v1::INSPECTION_STATUS_UNSPECIFIED;
}

absl::Status WriteIfMissing(const std::filesystem::path& path, const std::string& text) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return absl::OkStatus();
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareStandInMachine(const std::string& dir) {
  const std::filesystem::path root(dir);
  const std::filesystem::path nic = root / "sys" / "class" / "net" / "sim0";
  std::error_code ec;
  std::filesystem::create_directories(nic / "device", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", (nic / "device").string(), ": ", ec.message()));
  if (auto s = WriteIfMissing(root / "kmsg", ""); !s.ok()) return s;
  if (auto s = WriteIfMissing(nic / "operstate", "up\n"); !s.ok()) return s;
  if (auto s = WriteIfMissing(nic / "carrier", "1\n"); !s.ok()) return s;
  if (auto s = WriteIfMissing(nic / "carrier_changes", "0\n"); !s.ok()) return s;
  return WriteIfMissing(nic / "carrier_down_count", "0\n");
}

v1::InspectionResult ToWire(const InspectionResult& r) {
  v1::InspectionResult w;
  w.set_kind(r.kind);
  w.set_status(ToWireStatus(r.status));
  w.set_summary(r.summary);
  for (const auto& [k, v] : r.details) (*w.mutable_details())[k] = v;
  w.set_observed_at(r.observed_at == absl::InfinitePast() ? 0 : absl::ToUnixNanos(r.observed_at));
  w.set_component(r.component);
  w.set_machine_attributed(r.machine_attributed);
  return w;
}

InspectionRunner::InspectionRunner(InspectionRunnerOptions options) {
  HostInspectionOptions host;
  host.volumes = options.volumes;
  inspector_.Add(std::make_unique<HostInspection>(host), InspectionSchedule{options.host_interval, 1});
  if (options.host_checks_on_node) return;  // the node inspector runs the others

  GpuInspectionOptions gpu;
  gpu.expected_gpus = options.expected_gpus;
  inspector_.Add(std::make_unique<GpuInspection>(gpu), InspectionSchedule{options.gpu_interval, 1});

  KernelLogOptions kmsg;
  kmsg.kmsg_path = options.kmsg_path;
  if (!options.use_dmesg_fallback) kmsg.dmesg.clear();
  kmsg.ignore_before_us = options.kernel_log_since_us;
  inspector_.Add(std::make_unique<KernelLogInspection>(kmsg), InspectionSchedule{options.kernel_log_interval, 1});

  NetworkInspectionOptions net;
  net.sysfs_root = options.sysfs_root;
  net.thresholds.flap_window = options.flap_window;
  net.thresholds.flaps_warn = 1;  // every flap episode is one alarm; the controller counts them
  inspector_.Add(std::make_unique<NetworkInspection>(net), InspectionSchedule{options.network_interval, 1});
}

InspectionRunner::Outcome InspectionRunner::Poll(absl::Time now) {
  Outcome out;
  if (inspector_.NextDue() > now) return out;
  InspectorPoll poll = inspector_.Poll(now);
  out.ran = !poll.results.empty();
  for (const InspectionResult& a : poll.alarms) out.alarms.push_back(ToWire(a));
  return out;
}

std::vector<v1::InspectionResult> InspectionRunner::Latest() const {
  std::vector<v1::InspectionResult> out;
  for (const InspectionResult& r : inspector_.Latest()) out.push_back(ToWire(r));
  return out;
}

}  // namespace peregrine
