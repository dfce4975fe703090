// GPU inspection: availability, temperature, SM/memory clocks and throttle reasons, power,
// utilisation, ECC errors and row remapping, per GPU.
//
// Sources, in order: NVML loaded at run time (dlopen "libnvidia-ml.so.1"; no NVIDIA
// header or library is needed to build), else `nvidia-smi --query-gpu=<kNvidiaSmiQuery>
// --format=csv,noheader,nounits`; plus `dcgmi health -c` when dcgmi is installed. With
// neither NVML nor nvidia-smi (a machine without GPUs) the inspection reports NOT_PRESENT,
// never a fault, unless GPUs are expected (expected_gpus > 0). When dcgmi is installed but
// DCGM's host engine is unreachable (a pod that cannot reach the node's nv-hostengine)
// the "dcgm" result is CANNOT_SEE, neither a pass nor a fault.
//
// Parsing (ParseNvidiaSmiCsv, ParseDcgmHealth) and judging (EvaluateGpus) are pure and
// separately tested; GpuInspection only gathers and calls them. GpuInspection is
// thread-compatible (one control loop calls Run).
#ifndef PEREGRINE_AGENT_INSPECTION_GPU_INSPECTION_H_
#define PEREGRINE_AGENT_INSPECTION_GPU_INSPECTION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/inspection/command_runner.h"
#include "agent/inspection/inspection.h"
#include "agent/inspection/inspection_result.h"

namespace peregrine {

// NVML clock-event (throttle) reason bits (nvmlClocksEventReason* / ThrottleReason*).
inline constexpr uint64_t kThrottleGpuIdle = 0x1;
inline constexpr uint64_t kThrottleApplicationsClocks = 0x2;
inline constexpr uint64_t kThrottleSwPowerCap = 0x4;
inline constexpr uint64_t kThrottleHwSlowdown = 0x8;
inline constexpr uint64_t kThrottleSyncBoost = 0x10;
inline constexpr uint64_t kThrottleSwThermal = 0x20;
inline constexpr uint64_t kThrottleHwThermal = 0x40;
inline constexpr uint64_t kThrottleHwPowerBrake = 0x80;
inline constexpr uint64_t kThrottleDisplayClocks = 0x100;

// "hw_slowdown|hw_thermal"; "none" for 0.
std::string ThrottleReasonNames(uint64_t reasons);

struct GpuSample {
  int index = 0;
  std::string uuid;
  std::string pci_bus_id;
  std::optional<int> temperature_c;
  std::optional<int> sm_clock_mhz;
  std::optional<int> mem_clock_mhz;
  std::optional<uint64_t> throttle_reasons;
  std::optional<double> power_w;
  std::optional<int> utilization_gpu_pct;
  std::optional<int> utilization_mem_pct;
  std::optional<uint64_t> ecc_uncorrected_volatile;
  std::optional<uint64_t> ecc_corrected_volatile;
  std::optional<bool> remap_pending;
  std::optional<bool> remap_failure;
};

struct GpuReport {
  std::vector<GpuSample> gpus;
  // GPUs the driver knows but cannot reach (NVML_ERROR_GPU_IS_LOST, or nvidia-smi's
  // "Unable to determine the device handle for GPU <bus id>: ..."): bus id or index.
  std::vector<std::string> lost;
  std::string source;  // "nvml" or "nvidia-smi"
};

// The fields queried from nvidia-smi, in this order.
inline constexpr char kNvidiaSmiQuery[] =
    "index,uuid,pci.bus_id,temperature.gpu,clocks.sm,clocks.mem,"
    "clocks_throttle_reasons.active,power.draw,utilization.gpu,utilization.memory,"
    "ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,"
    "remapped_rows.pending,remapped_rows.failure";

// Parses `nvidia-smi --query-gpu=<kNvidiaSmiQuery> --format=csv,noheader,nounits`.
// "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]" become empty optionals. Fails with
// kInvalidArgument naming the line and field on a wrong field count or a malformed value.
absl::StatusOr<GpuReport> ParseNvidiaSmiCsv(absl::string_view text);

// A PCI bus id in the canonical form the kernel log's Xid lines use, lower case without
// the function: "0000:3b:00" (domain:bus:device). Accepts nvidia-smi's
// "00000000:3B:00.0" (8-digit domain), the driver's "PCI:0000:3b:00" and "0000:3b:00.0";
// nullopt when `id` is not a PCI bus id.
std::optional<std::string> NormalizePciBusId(absl::string_view id);

// Parses `nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader` (one bus id per line)
// into normalised bus ids (NormalizePciBusId). Fails with kInvalidArgument naming the line
// that is not a bus id.
absl::StatusOr<std::vector<std::string>> ParseGpuBusIds(absl::string_view text);

struct DcgmIncident {
  std::string gpu;      // "0" (GPU ID), or "" for a system-wide incident
  std::string health;   // "Warning" / "Failure"
  std::string message;  // joined continuation lines
};
struct DcgmHealth {
  std::string overall;  // "Healthy", "Warning", "Failure"
  std::vector<DcgmIncident> incidents;
};

// Parses the table printed by `dcgmi health -c`. Fails with kInvalidArgument when there is
// no "Overall Health" row or a health word is unknown, naming the line.
absl::StatusOr<DcgmHealth> ParseDcgmHealth(absl::string_view text);

struct GpuThresholds {
  int temperature_warn_c = 87;
  // Throttle reasons that mean the hardware is protecting itself (not idle/app clocks).
  uint64_t warn_throttle_mask =
      kThrottleHwSlowdown | kThrottleHwThermal | kThrottleHwPowerBrake | kThrottleSwThermal;
  uint64_t ecc_uncorrected_fault = 1;  // volatile uncorrected errors at or above: fault
};

// Judges a report: one result per GPU ("gpu<index>"), one per lost GPU, and one
// "gpus" result when fewer GPUs than expected are visible. Pure.
std::vector<InspectionResult> EvaluateGpus(const GpuReport& report, int expected_gpus,
                                           const GpuThresholds& thresholds, absl::Time now);

// True when `dcgmi` output (stdout and stderr) says DCGM's host engine cannot be reached
// (no nv-hostengine on the node, or not reachable from this network namespace). Pure.
bool DcgmHostEngineUnreachable(absl::string_view output);

// Judges DCGM health: component "dcgm"; Failure -> FAULT (machine), Warning -> WARNING.
InspectionResult EvaluateDcgmHealth(const DcgmHealth& health, absl::Time now);

// Reads GPUs through NVML. Load fails with kNotFound when the library is absent and
// kUnavailable when nvmlInit fails (no driver).
class NvmlGpuSource {
 public:
  static absl::StatusOr<std::unique_ptr<NvmlGpuSource>> Load(
      const std::string& library = "libnvidia-ml.so.1");
  virtual ~NvmlGpuSource() = default;
  virtual absl::StatusOr<GpuReport> Sample() = 0;
};

struct GpuInspectionOptions {
  std::string nvml_library = "libnvidia-ml.so.1";  // empty: do not try NVML
  std::string nvidia_smi = "nvidia-smi";           // empty: do not try nvidia-smi
  std::string dcgmi = "dcgmi";                     // empty: do not try DCGM
  int expected_gpus = 0;  // > 0: fewer visible GPUs is a machine fault
  GpuThresholds thresholds;
  absl::Duration command_timeout = absl::Seconds(20);
};

class GpuInspection : public Inspection {
 public:
  GpuInspection(GpuInspectionOptions options, CommandRunner runner = DefaultCommandRunner());
  ~GpuInspection() override;
  std::string kind() const override { return "gpu"; }
  std::vector<InspectionResult> Run(absl::Time now) override;

 private:
  GpuInspectionOptions options_;
  CommandRunner runner_;
  std::unique_ptr<NvmlGpuSource> nvml_;
  bool nvml_tried_ = false;
  std::string nvml_error_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_GPU_INSPECTION_H_
