// Node conditions from the inspections' results on real-format fixtures (the kernel log,
// sysfs trees, nvidia-smi and dcgmi output of tests/agent/inspection/testdata), and their
// merge into a Node's status.conditions.
#include "node_inspector/node_conditions.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/inspection/gpu_inspection.h"
#include "agent/inspection/kernel_log.h"
#include "agent/inspection/network_inspection.h"
#include "controller/kube/node_findings.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using nlohmann::json;
using testing::TempDir;

const absl::Time kNow = absl::FromUnixSeconds(1700000000);

std::string Fixture(const std::string& name) { return testing::SourcePath("tests/agent/inspection/testdata/" + name); }

const NodeConditionReport* Find(const std::vector<NodeConditionReport>& reports, const std::string& type) {
  for (const NodeConditionReport& r : reports) {
    if (r.type == type) return &r;
  }
  return nullptr;
}

std::vector<InspectionResult> Concat(std::vector<InspectionResult> a, const std::vector<InspectionResult>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_CASE("node conditions: real kernel log, dcgmi and nvidia-smi fixtures give the four conditions", "[unit]") {
  TempDir dir;
  KernelLogOptions kmsg;
  kmsg.kmsg_path = Fixture("kmsg_xid.txt");  // Xid 79 (machine-fatal) and a block I/O error
  kmsg.dmesg = "";
  kmsg.nvidia_smi = "";  // on the node every GPU's Xid counts
  KernelLogInspection kernel(kmsg);
  // sysfs as a pod without the host's /sys sees it: lo and a veth.
  dir.Write("sys/class/net/lo/operstate", "unknown\n");
  dir.Write("sys/class/net/eth0/operstate", "up\n");
  NetworkInspectionOptions net;
  net.sysfs_root = dir.path() + "/sys";
  NetworkInspection network(net);
  const std::string smi = dir.Write("nvidia-smi", "#!/bin/sh\ncat '" + Fixture("nvidia_smi_h200_real.csv") + "'\n", true);
  const std::string dcgmi = dir.Write("dcgmi", "#!/bin/sh\ncat '" + Fixture("dcgmi_health_healthy.txt") + "'\n", true);
  GpuInspectionOptions gpu_options;
  gpu_options.nvml_library = "";
  gpu_options.nvidia_smi = smi;
  gpu_options.dcgmi = dcgmi;
  GpuInspection gpu(gpu_options);

  const std::vector<InspectionResult> results =
      Concat(Concat(kernel.Run(kNow), network.Run(kNow)), gpu.Run(kNow));
  const std::vector<NodeConditionReport> reports = ConditionsFromResults(results);
  REQUIRE(reports.size() == 4);
  CHECK(reports[0].type == kConditionKernelXid);  // kNodeConditionTypes order
  const NodeConditionReport* xid = Find(reports, kConditionKernelXid);
  CHECK(xid->status == "True");
  CHECK(xid->reason == kReasonMachineFault);
  CHECK(xid->message.find("Xid 79") != std::string::npos);
  const NodeConditionReport* disk = Find(reports, kConditionDisk);
  CHECK(disk->status == "True");
  CHECK(disk->reason == kReasonMachineFault);
  CHECK(disk->message.find("/dev/") != std::string::npos);
  const NodeConditionReport* nic = Find(reports, kConditionNic);
  CHECK(nic->status == "Unknown");
  CHECK(nic->reason == kReasonCannotSee);
  const NodeConditionReport* g = Find(reports, kConditionGpu);
  CHECK(g->status == "False");
  CHECK(g->reason == kReasonNoProblem);
}

TEST_CASE("node conditions: the worst result decides, CANNOT_SEE outranks health, unrelated kinds are ignored", "[unit]") {
  auto result = [](const char* kind, const char* component, InspectionOutcome status, bool machine = false) {
    InspectionResult r;
    r.kind = kind;
    r.component = component;
    r.status = status;
    r.summary = std::string(component) + " summary";
    r.machine_attributed = machine;
    return r;
  };
  std::vector<NodeConditionReport> reports = ConditionsFromResults(
      {result("gpu", "gpu0", InspectionOutcome::kOk), result("gpu", "dcgm", InspectionOutcome::kCannotSee),
       result("network", "ens1", InspectionOutcome::kWarning), result("rdma", "mlx5_0/1", InspectionOutcome::kFault),
       result("host", "/data", InspectionOutcome::kFault), result("xid", "kernel-log", InspectionOutcome::kError)});
  REQUIRE(reports.size() == 3);  // the /data volume is no node condition
  CHECK(Find(reports, kConditionGpu)->status == "Unknown");
  CHECK(Find(reports, kConditionGpu)->message == "dcgm: dcgm summary");
  CHECK(Find(reports, kConditionNic)->reason == kReasonFault);  // not the machine's
  CHECK(Find(reports, kConditionNic)->message == "mlx5_0/1: mlx5_0/1 summary");
  CHECK(Find(reports, kConditionKernelXid)->reason == kReasonInspectionError);
  CHECK(Find(reports, kConditionDisk) == nullptr);
  reports = ConditionsFromResults({result("gpu", "gpus", InspectionOutcome::kNotPresent)});
  CHECK(reports[0].reason == kReasonNotPresent);
  CHECK(reports[0].status == "False");
  // A long message is cut.
  InspectionResult longer = result("gpu", "gpu0", InspectionOutcome::kWarning);
  longer.summary = std::string(5000, 'x');
  CHECK(ConditionsFromResults({longer})[0].message.size() == kMaxConditionMessage);
}

TEST_CASE("node conditions: merge keeps other conditions, moves lastTransitionTime only on a change", "[unit]") {
  const json ready = {{"type", "Ready"}, {"status", "True"}, {"reason", "KubeletReady"},
                      {"lastHeartbeatTime", "2023-11-14T22:00:00Z"}, {"lastTransitionTime", "2023-11-01T00:00:00Z"}};
  const std::vector<NodeConditionReport> fault = {{kConditionKernelXid, "True", kReasonMachineFault, "Xid 79"}};
  MergedConditions first = MergeConditions(json::array({ready}), fault, kNow, absl::Minutes(5));
  CHECK(first.changed);
  REQUIRE(first.conditions.size() == 2);
  CHECK(first.conditions[0] == ready);
  CHECK(first.conditions[1]["lastTransitionTime"] == "2023-11-14T22:13:20Z");

  // The same report a minute later: nothing to write.
  MergedConditions again = MergeConditions(first.conditions, fault, kNow + absl::Minutes(1), absl::Minutes(5));
  CHECK_FALSE(again.changed);
  // Past the heartbeat: written, the transition time kept.
  MergedConditions beat = MergeConditions(first.conditions, fault, kNow + absl::Minutes(6), absl::Minutes(5));
  CHECK(beat.changed);
  CHECK(beat.conditions[1]["lastTransitionTime"] == "2023-11-14T22:13:20Z");
  CHECK(beat.conditions[1]["lastHeartbeatTime"] == "2023-11-14T22:19:20Z");
  // Cleared: a transition.
  MergedConditions cleared = MergeConditions(
      beat.conditions, {{kConditionKernelXid, "False", kReasonNoProblem, "kernel-log: no Xid"}}, kNow + absl::Minutes(7),
      absl::Minutes(5));
  CHECK(cleared.changed);
  CHECK(cleared.conditions[1]["status"] == "False");
  CHECK(cleared.conditions[1]["lastTransitionTime"] == "2023-11-14T22:20:20Z");
  // A Node without conditions, or with garbage there.
  CHECK(MergeConditions(nullptr, fault, kNow, absl::Minutes(5)).conditions.size() == 1);
  CHECK(MergeConditions(json("x"), fault, kNow, absl::Minutes(5)).conditions.size() == 1);
}

TEST_CASE("node conditions: a GPU node whose GPUs the inspector cannot see is CANNOT_SEE, not NotPresent", "[unit]") {
  const std::vector<NodeConditionReport> reports = {
      {kConditionGpu, "False", kReasonNotPresent, "gpus: no NVML, no nvidia-smi"},
      {kConditionNic, "False", kReasonNoProblem, "ens1f0: up"}};
  const json gpu_node = {{"status", {{"allocatable", {{"nvidia.com/gpu", "8"}, {"cpu", "96"}}}}}};
  std::vector<NodeConditionReport> checked = CheckGpuVisibility(reports, gpu_node);
  CHECK(checked[0].status == "Unknown");
  CHECK(checked[0].reason == kReasonCannotSee);
  CHECK(checked[0].message.find("8 allocatable nvidia.com/gpu") != std::string::npos);
  CHECK(checked[1] == reports[1]);
  // A node without GPUs, or a garbled allocatable: as reported.
  CHECK(CheckGpuVisibility(reports, json{{"status", {{"allocatable", {{"cpu", "96"}}}}}}) == reports);
  CHECK(CheckGpuVisibility(reports, json{{"status", {{"allocatable", {{"nvidia.com/gpu", "lots"}}}}}}) == reports);
  CHECK(CheckGpuVisibility(reports, json("x")) == reports);
  // GPUs seen: unchanged.
  const std::vector<NodeConditionReport> seen = {{kConditionGpu, "False", kReasonNoProblem, "gpu0: ok"}};
  CHECK(CheckGpuVisibility(seen, gpu_node) == seen);
}

}  // namespace
}  // namespace peregrine
