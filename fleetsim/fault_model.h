// Faults of a simulated job: what happens to which machine and when, drawn from a model
// of published failure rates or read from a trace file.
//
// A FaultEvent is one machine's trouble over [start_ns, end_ns) of simulated time (time 0
// is the job's start). For a fail-stop kind (gpu, memory, nic, host, software) the machine
// stops at start_ns and is repaired (usable again) at end_ns; for a fail-slow kind the
// machine runs slower by `severity` (the fraction its step time grows: 0.3 = 30% slower)
// over the whole interval. Machines are numbered 0..machines-1.
//
// FaultModel holds the published failure rates (docs/simulation.md gives each default and
// its source). GenerateFaults is deterministic for a seed. ParseFaultTrace
// (fleetsim/fault_trace.h) refuses bad input with the line number and the reason. Pure: no
// clocks, no I/O. Thread-compatible.
#ifndef PEREGRINE_FLEETSIM_FAULT_MODEL_H_
#define PEREGRINE_FLEETSIM_FAULT_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace peregrine::fleetsim {

enum class FaultKind {
  kGpu,          // fail-stop: GPU lost or Xid that needs a reset, uncorrectable ECC
  kMemory,       // fail-stop: host memory
  kNic,          // fail-stop: NIC or link down
  kHost,         // fail-stop: kernel, power, disk, node lost
  kSoftware,     // fail-stop: the training process crashes; the machine is healthy
  kSlowCompute,  // fail-slow: a GPU computes slower (thermal, clocks, PCIe)
  kSlowLink,     // fail-slow: a link or NIC transfers slower (congestion, degraded link)
};

bool IsFailSlow(FaultKind kind);
std::string_view FaultKindName(FaultKind kind);  // "gpu", ..., "slow", "slow-link"

struct FaultEvent {
  int machine = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  FaultKind kind = FaultKind::kGpu;
  double severity = 0;  // fail-slow only: fractional step-time growth (> 0)
};

// Published operating point the default fail-stop rates are derived from: the Llama 3 405B
// pre-training snapshot (Dubey et al., "The Llama 3 Herd of Models", 2024, section 3.3.4,
// Table 5): 419 unexpected interruptions in 54 days on 16,384 H100 GPUs.
inline constexpr double kLlama3GpuDays = 54.0 * 16384.0;

// A fail-slow process of one machine: episodes arrive as a Poisson process; durations and
// severities are log-normal, clipped to [min, max]. Defaults are set per kind in FaultModel.
struct FailSlowModel {
  double episodes_per_machine_day = 0;
  double duration_mean_s = 600;    // mean of the (unclipped) log-normal duration
  double duration_sigma = 1.0;     // log-normal shape of the duration
  double duration_min_s = 30;
  double duration_max_s = 36000;
  double severity_median = 0.2;    // fractional step-time growth (0.2 = 20% slower)
  double severity_sigma = 0.5;     // log-normal shape of the severity
  double severity_max = 4.0;       // clip (4.0 = five times slower)
};

// Every field: default, source and derivation in docs/simulation.md ("Faults").
struct FaultModel {
  // Fail-stop rates per GPU-day of up time, fleet averages (grey machines included).
  // Llama 3 Table 5 root causes grouped by class, divided by 54 days x 16,384 GPUs.
  double gpu_per_gpu_day = 268.0 / kLlama3GpuDays;      // GPU, HBM3, SRAM, SDC, ...
  double memory_per_gpu_day = 2.0 / kLlama3GpuDays;     // system (host) memory
  double nic_per_gpu_day = 42.0 / kLlama3GpuDays;       // NIC 7 + network switch/cable 35
  double host_per_gpu_day = 44.0 / kLlama3GpuDays;      // host maintenance, SSD, PSU, CPU...
  double software_per_gpu_day = 63.0 / kLlama3GpuDays;  // software bug, NCCL watchdog, dep.

  // Grey ("lemon") machines: this fraction of machines fails at `grey_multiplier` times
  // the rate of the others, for fail-stops and compute fail-slows (link fail-slows come
  // from congestion, not from the machine, and are not concentrated). The class rates
  // above stay the fleet average: healthy machines get rate / (1 - f + f * m), so taking
  // the grey machines out multiplies the MTTF by 1 - f + f * m. The multiplier is set so
  // that factor is GUARD's (MLSys 2026, Table 1): average MTTF 6.6 h with burn-in tests
  // only, 16.7 h once grey nodes are found and removed. The fraction is assumed.
  double grey_fraction = 0.05;
  double grey_multiplier = 1 + (16.7 / 6.6 - 1) / 0.05;

  // Fail-slow episodes (Falcon / GREYHOUND characterization, section 3, Table 1).
  FailSlowModel slow_compute{.episodes_per_machine_day = 0.18,
                             .duration_mean_s = 600,
                             .duration_sigma = 1.0,
                             .duration_min_s = 30,
                             .duration_max_s = 36000,
                             .severity_median = 0.2,
                             .severity_sigma = 0.5,
                             .severity_max = 4.0};
  FailSlowModel slow_link{.episodes_per_machine_day = 0.47,
                          .duration_mean_s = 1440,
                          .duration_sigma = 1.0,
                          .duration_min_s = 30,
                          .duration_max_s = 36000,
                          .severity_median = 0.4,
                          .severity_sigma = 0.8,
                          .severity_max = 9.0};

  // Mean repair time per fail-stop class: the machine is usable again this long after the
  // fault (exponentially distributed). Software faults leave the machine healthy (0).
  double gpu_repair_mean_s = 3 * 86400.0;
  double memory_repair_mean_s = 86400.0;
  double nic_repair_mean_s = 6 * 3600.0;
  double host_repair_mean_s = 86400.0;
  double software_repair_mean_s = 0;
};

// OK, or kInvalidArgument naming the first field out of range (negative or non-finite
// rates and times, grey_fraction outside [0, 1], grey_multiplier < 1, severity <= 0,
// duration_min_s > duration_max_s, ...).
absl::Status ValidateFaultModel(const FaultModel& model);

// OK, or kInvalidArgument naming the argument: machines >= 0, gpus_per_machine >= 1,
// days in [0, 36500], and the model valid.
absl::Status ValidateFaultScope(const FaultModel& model, int machines, int gpus_per_machine,
                                double days);

// Sum of the five fail-stop rates per GPU-day.
double FailStopRatePerGpuDay(const FaultModel& model);

// The machines (sorted) that GenerateFaults treats as grey for this seed:
// round(grey_fraction * machines) of them, chosen by a seeded shuffle.
std::vector<int> GreyMachines(const FaultModel& model, int machines, uint64_t seed);

// Sorts faults the way GenerateFaults and ParseFaultTrace return them: by start_ns, then
// machine, then kind, then end_ns.
void SortFaults(std::vector<FaultEvent>& faults);

// Faults of `machines` machines over `days` days, sorted by start_ns, then machine, then
// kind. Deterministic for (model, machines, gpus_per_machine, days, seed) on every
// platform with a correctly rounded libm (glibc, macOS): mt19937_64 and our own
// distribution code. Per machine: one Poisson process over all fail-stop classes (rate per
// GPU x gpus_per_machine, x the grey factor), the class drawn in proportion to its rate;
// a failure that would start during a repair is dropped (the next one is drawn from the
// repair's end). Fail-slow episodes of one kind never overlap on a machine; one that
// starts while the machine is down is dropped, one that runs into a fail-stop is cut at
// its start. Events may end after `days` (a repair in progress). Invalid input (see
// ValidateFaultScope) yields an empty vector: validate first.
std::vector<FaultEvent> GenerateFaults(const FaultModel& model, int machines,
                                       int gpus_per_machine, double days, uint64_t seed);

}  // namespace peregrine::fleetsim

#endif  // PEREGRINE_FLEETSIM_FAULT_MODEL_H_
