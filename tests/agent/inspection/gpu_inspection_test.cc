#include "agent/inspection/gpu_inspection.h"

#include <catch2/catch.hpp>

#include "tests/agent/inspection/test_util.h"

namespace peregrine {
namespace {

using testing::Find;
using testing::Fixture;
using testing::TempDir;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

TEST_CASE("gpu: nvidia-smi CSV of an 8-GPU node", "[unit]") {
  absl::StatusOr<GpuReport> report = ParseNvidiaSmiCsv(Fixture("nvidia_smi_h100.csv"));
  REQUIRE(report.ok());
  REQUIRE(report->gpus.size() == 8);
  const GpuSample& g0 = report->gpus[0];
  CHECK(g0.index == 0);
  CHECK(g0.pci_bus_id == "00000000:18:00.0");
  CHECK(g0.temperature_c == 41);
  CHECK(g0.sm_clock_mhz == 1980);
  CHECK(g0.mem_clock_mhz == 2619);
  CHECK(g0.throttle_reasons == 0u);
  CHECK(*g0.power_w == Approx(412.37));
  CHECK(g0.utilization_gpu_pct == 97);
  CHECK(g0.remap_pending == false);
  CHECK(report->gpus[2].throttle_reasons == 0x48u);
  CHECK(report->gpus[3].remap_pending == true);
  CHECK(report->gpus[5].ecc_uncorrected_volatile == 3u);
  const GpuSample& g7 = report->gpus[7];
  CHECK(g7.temperature_c == 43);
  CHECK(!g7.sm_clock_mhz.has_value());
  CHECK(!g7.power_w.has_value());
  CHECK(!g7.remap_failure.has_value());

  const std::vector<InspectionResult> rs = EvaluateGpus(*report, 8, GpuThresholds{}, kNow);
  REQUIRE(rs.size() == 8);
  CHECK(Find(rs, "gpu0")->status == InspectionOutcome::kOk);
  CHECK(Find(rs, "gpu1")->status == InspectionOutcome::kOk);  // corrected ECC only
  const InspectionResult* hot = Find(rs, "gpu2");
  CHECK(hot->status == InspectionOutcome::kWarning);
  CHECK(!hot->machine_attributed);
  CHECK(hot->summary.find("temperature 89 C") != std::string::npos);
  CHECK(hot->summary.find("hw_slowdown|hw_thermal") != std::string::npos);
  const InspectionResult* remap = Find(rs, "gpu3");
  CHECK(remap->status == InspectionOutcome::kFault);
  CHECK(remap->machine_attributed);
  CHECK(remap->summary.find("row remapping pending") != std::string::npos);
  CHECK(Find(rs, "gpu4")->status == InspectionOutcome::kOk);  // sw power cap is normal
  CHECK(Find(rs, "gpu5")->status == InspectionOutcome::kFault);
  CHECK(Find(rs, "gpu6")->status == InspectionOutcome::kOk);  // idle
  CHECK(Find(rs, "gpu0")->details.at("power_w") == "412.37");
  CHECK(Find(rs, "gpu0")->observed_at == kNow);
}

// Captured on a real NVIDIA H200 (driver 580.159.04, idle) with the agent's exact query:
// the deprecated clocks_throttle_reasons.active name is still accepted there, idle reads
// as reason 0x1 (gpu_idle), and the remapped-rows fields print "No".
TEST_CASE("gpu: nvidia-smi CSV captured on a real H200 is parsed and judged healthy", "[unit]") {
  absl::StatusOr<GpuReport> report = ParseNvidiaSmiCsv(Fixture("nvidia_smi_h200_real.csv"));
  REQUIRE(report.ok());
  REQUIRE(report->gpus.size() == 1);
  const GpuSample& g = report->gpus[0];
  CHECK(g.index == 0);
  CHECK(g.uuid == "GPU-b672a480-1179-9640-da83-fdad741572cd");
  CHECK(g.pci_bus_id == "00000000:00:06.0");
  CHECK(g.temperature_c == 31);
  CHECK(g.sm_clock_mhz == 345);
  CHECK(g.mem_clock_mhz == 3201);
  CHECK(g.throttle_reasons == 0x1u);
  CHECK(*g.power_w == Approx(98.16));
  CHECK(g.remap_pending == false);
  CHECK(g.remap_failure == false);
  const std::vector<InspectionResult> rs = EvaluateGpus(*report, 1, GpuThresholds{}, kNow);
  REQUIRE(rs.size() == 1);
  CHECK(Find(rs, "gpu0")->status == InspectionOutcome::kOk);

  absl::StatusOr<std::vector<std::string>> ids = ParseGpuBusIds(Fixture("nvidia_smi_bus_id_h200_real.txt"));
  REQUIRE(ids.ok());
  CHECK(*ids == std::vector<std::string>{"0000:00:06"});
}

TEST_CASE("gpu: lost and missing GPUs are machine faults", "[unit]") {
  absl::StatusOr<GpuReport> report = ParseNvidiaSmiCsv(Fixture("nvidia_smi_lost.txt"));
  REQUIRE(report.ok());
  CHECK(report->gpus.size() == 1);
  REQUIRE(report->lost.size() == 1);
  CHECK(report->lost[0] == "00000000:2A:00.0");
  const std::vector<InspectionResult> rs = EvaluateGpus(*report, 2, GpuThresholds{}, kNow);
  const InspectionResult* lost = Find(rs, "00000000:2A:00.0");
  REQUIRE(lost != nullptr);
  CHECK(lost->status == InspectionOutcome::kFault);
  CHECK(lost->machine_attributed);
  const InspectionResult* count = Find(rs, "gpus");
  REQUIRE(count != nullptr);
  CHECK(count->summary == "1 of 2 expected GPUs visible");
}

TEST_CASE("gpu: garbage nvidia-smi output is rejected naming line and field", "[unit]") {
  absl::Status s = ParseNvidiaSmiCsv("0, GPU-x, 0000:18:00.0, 41\n").status();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(s.message().find("line 1") != std::string::npos);
  CHECK(s.message().find("4 fields") != std::string::npos);
  const std::string good = "0, GPU-a, 00000000:18:00.0, 41, 1980, 2619, 0x0, 412.37, 97, 41, 0, 0, No, No\n";
  s = ParseNvidiaSmiCsv(good + "1, GPU-b, 00000000:2A:00.0, hot, 1980, 2619, 0x0, 1, 1, 1, 0, 0, No, No\n")
          .status();
  CHECK(s.message().find("line 2") != std::string::npos);
  CHECK(s.message().find("temperature.gpu") != std::string::npos);
  s = ParseNvidiaSmiCsv("0, GPU-a, 00000000:18:00.0, 41, 1980, 2619, 0xZZ, 412.37, 97, 41, 0, 0, No, No\n")
          .status();
  CHECK(s.message().find("clocks_throttle_reasons.active") != std::string::npos);
  s = ParseNvidiaSmiCsv("0, GPU-a, 00000000:18:00.0, 41, 1980, 2619, 0x0, 412.37, 97, 41, 0, 0, Maybe, No\n")
          .status();
  CHECK(s.message().find("remapped_rows.pending") != std::string::npos);
  CHECK(!ParseNvidiaSmiCsv("\x01\x02\x03\xff\n").ok());
  CHECK(!ParseNvidiaSmiCsv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
             .ok());
  // Empty output is no GPU, not an error.
  absl::StatusOr<GpuReport> empty = ParseNvidiaSmiCsv("");
  REQUIRE(empty.ok());
  CHECK(empty->gpus.empty());
}

TEST_CASE("gpu: dcgmi health -c tables", "[unit]") {
  absl::StatusOr<DcgmHealth> healthy = ParseDcgmHealth(Fixture("dcgmi_health_healthy.txt"));
  REQUIRE(healthy.ok());
  CHECK(healthy->overall == "Healthy");
  CHECK(healthy->incidents.empty());
  CHECK(EvaluateDcgmHealth(*healthy, kNow).status == InspectionOutcome::kOk);

  absl::StatusOr<DcgmHealth> failure = ParseDcgmHealth(Fixture("dcgmi_health_failure.txt"));
  REQUIRE(failure.ok());
  CHECK(failure->overall == "Failure");
  REQUIRE(failure->incidents.size() == 2);
  CHECK(failure->incidents[0].gpu == "0");
  CHECK(failure->incidents[0].health == "Warning");
  CHECK(failure->incidents[0].message ==
        "PCIe system: Warning - Detected more than 8 PCIe replays per minute for GPU 0 : 13");
  CHECK(failure->incidents[1].gpu == "3");
  const InspectionResult r = EvaluateDcgmHealth(*failure, kNow);
  CHECK(r.status == InspectionOutcome::kFault);
  CHECK(r.machine_attributed);
  CHECK(r.details.at("gpu3") == "Failure");

  CHECK(!ParseDcgmHealth("Error: unable to establish a connection to the host engine\n").ok());
  absl::Status s = ParseDcgmHealth("| Overall Health | Splendid |\n").status();
  CHECK(s.message().find("line 1") != std::string::npos);
  CHECK(!ParseDcgmHealth("\xff\xfe garbage | | |").ok());
}

TEST_CASE("gpu: ThrottleReasonNames", "[unit]") {
  CHECK(ThrottleReasonNames(0) == "none");
  CHECK(ThrottleReasonNames(kThrottleHwSlowdown | kThrottleSwPowerCap) == "sw_power_cap|hw_slowdown");
  CHECK(ThrottleReasonNames(0x1000) == "0x1000");
}

TEST_CASE("gpu: on this machine (no NVML, no nvidia-smi) the inspection is NOT_PRESENT",
          "[integration]") {
  GpuInspectionOptions options;
  options.nvml_library = "libnvidia-ml.so.1";
  options.nvidia_smi = "nvidia-smi";
  GpuInspection inspection(options);
  const std::vector<InspectionResult> rs = inspection.Run(kNow);
  REQUIRE(rs.size() == 1);
  if (rs[0].status != InspectionOutcome::kNotPresent) {
    // A GPU machine: then the results are real GPUs, and none may be an inspection error.
    WARN("GPUs present: " << rs[0].DebugString());
    CHECK(rs[0].status != InspectionOutcome::kError);
    return;
  }
  CHECK(rs[0].component == "gpus");
  CHECK(!rs[0].machine_attributed);
  CHECK(rs[0].summary.find("libnvidia-ml.so.1") != std::string::npos);

  // When the job expects GPUs, their absence is a machine fault.
  options.expected_gpus = 8;
  GpuInspection expecting(options);
  const std::vector<InspectionResult> missing = expecting.Run(kNow);
  REQUIRE(missing.size() == 1);
  CHECK(missing[0].status == InspectionOutcome::kFault);
  CHECK(missing[0].machine_attributed);
}

TEST_CASE("gpu: nvidia-smi and dcgmi fallbacks run as real commands", "[integration]") {
  // Stand-in executables that print the fixtures, found through the configured paths.
  TempDir dir;
  const std::string smi = dir.Write("nvidia-smi", "#!/bin/sh\ncat '" +
                                                       testing::FixturePath("nvidia_smi_h100.csv") +
                                                       "'\n",
                                    true);
  const std::string dcgmi = dir.Write(
      "dcgmi", "#!/bin/sh\n[ \"$1 $2\" = 'health -c' ] || exit 2\ncat '" +
                   testing::FixturePath("dcgmi_health_failure.txt") + "'\n",
      true);
  GpuInspectionOptions options;
  options.nvml_library = "";  // skip NVML
  options.nvidia_smi = smi;
  options.dcgmi = dcgmi;
  options.expected_gpus = 8;
  GpuInspection inspection(options);
  const std::vector<InspectionResult> rs = inspection.Run(kNow);
  REQUIRE(rs.size() == 9);
  CHECK(Find(rs, "gpu3")->status == InspectionOutcome::kFault);
  CHECK(Find(rs, "gpu3")->details.at("source") == "nvidia-smi");
  CHECK(Find(rs, "dcgm")->status == InspectionOutcome::kFault);

  // Garbled output is an inspection ERROR, never a fault.
  const std::string bad = dir.Write("bad-smi", "#!/bin/sh\necho 'garbled, output'\n", true);
  options.nvidia_smi = bad;
  options.dcgmi = "";
  GpuInspection garbled(options);
  const std::vector<InspectionResult> g = garbled.Run(kNow);
  REQUIRE(g.size() == 1);
  CHECK(g[0].status == InspectionOutcome::kError);
  CHECK(g[0].summary.find("line 1") != std::string::npos);
}

TEST_CASE("gpu: DCGM's host engine unreachable is CANNOT_SEE, not a pass, a fault or an error", "[integration]") {
  CHECK(DcgmHostEngineUnreachable(Fixture("dcgmi_no_host_engine.txt")));
  CHECK(!DcgmHostEngineUnreachable(Fixture("dcgmi_health_healthy.txt")));
  CHECK(!DcgmHostEngineUnreachable(Fixture("dcgmi_health_failure.txt")));
  CHECK(!DcgmHostEngineUnreachable(""));
  TempDir dir;
  const std::string smi = dir.Write(
      "nvidia-smi", "#!/bin/sh\ncat '" + testing::FixturePath("nvidia_smi_h100.csv") + "'\n", true);
  // dcgmi prints its connection error and exits non-zero when nv-hostengine is not reachable.
  const std::string dcgmi = dir.Write(
      "dcgmi", "#!/bin/sh\ncat '" + testing::FixturePath("dcgmi_no_host_engine.txt") + "'\nexit 255\n", true);
  GpuInspectionOptions options;
  options.nvml_library = "";
  options.nvidia_smi = smi;
  options.dcgmi = dcgmi;
  GpuInspection inspection(options);
  const std::vector<InspectionResult> rs = inspection.Run(kNow);
  const InspectionResult* dcgm = Find(rs, "dcgm");
  REQUIRE(dcgm != nullptr);
  CHECK(dcgm->status == InspectionOutcome::kCannotSee);
  CHECK(!dcgm->machine_attributed);
  CHECK(dcgm->summary.find("host engine is unreachable") != std::string::npos);
  CHECK(dcgm->details.at("reason") == "host engine unreachable");
  // The per-GPU results from nvidia-smi are still there.
  CHECK(Find(rs, "gpu3") != nullptr);
}

TEST_CASE("gpu: NVML on a GPU machine", "[gpu]") {
  absl::StatusOr<std::unique_ptr<NvmlGpuSource>> nvml = NvmlGpuSource::Load();
  if (!nvml.ok()) {
    WARN("skipped: " << nvml.status().message());
    CHECK(nvml.status().code() != absl::StatusCode::kInternal);
    return;
  }
  absl::StatusOr<GpuReport> report = (*nvml)->Sample();
  REQUIRE(report.ok());
  REQUIRE(!report->gpus.empty());
  for (const GpuSample& g : report->gpus) {
    INFO("gpu" << g.index);
    CHECK(g.temperature_c.has_value());
    CHECK(*g.temperature_c > 0);
    CHECK(*g.temperature_c < 120);
    CHECK(g.sm_clock_mhz.has_value());
    CHECK(g.power_w.has_value());
    CHECK(g.uuid.rfind("GPU-", 0) == 0);
  }
  const std::vector<InspectionResult> rs =
      EvaluateGpus(*report, static_cast<int>(report->gpus.size()), GpuThresholds{}, kNow);
  for (const auto& r : rs) WARN(r.DebugString());
}

}  // namespace
}  // namespace peregrine
