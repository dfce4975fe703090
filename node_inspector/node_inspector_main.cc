// peregrine-node-inspector: the node DaemonSet's inspections (kernel log: Xids and block
// I/O errors; NICs and RDMA ports; GPUs through NVML / nvidia-smi and DCGM health), run
// every --interval on the node and reported as Node conditions (node_conditions.h,
// node_reporter.h; the channel in controller/kube/node_findings.h).
//
//   --node NAME             [NODE_NAME]   required: this Node (the downward API's spec.nodeName)
//   --kubeconfig PATH       [KUBECONFIG]  default: in-cluster service account
//   --kmsg-path PATH        default /dev/kmsg
//   --dmesg PATH            default dmesg (fallback when kmsg cannot be opened; "" none)
//   --sysfs-root DIR        default /sys (the chart mounts the host's at /host/sys)
//   --nvml-library NAME     default libnvidia-ml.so.1 ("" none)
//   --nvidia-smi PATH       default nvidia-smi ("" none)
//   --dcgmi PATH            default dcgmi ("" none)
//   --interval SECONDS      default 30: how often the inspections run
//   --kernel-log-lookback SECONDS  default 600: records logged this long before start
//                           count; -1: every record since boot
//   --heartbeat SECONDS     default 300: unchanged conditions are rewritten this often
//   --once                  one round, then exit (0 when the conditions were written)
// Exits 2 on a bad flag, 1 when the API server cannot be reached at start; otherwise it
// runs until SIGTERM/SIGINT, logging failed reports to stderr and retrying next round.
#include <signal.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/inspection/gpu_inspection.h"
#include "agent/inspection/inspector.h"
#include "agent/inspection/kernel_log.h"
#include "agent/inspection/network_inspection.h"
#include "controller/kube/config.h"
#include "controller/kube/rest_client.h"
#include "node_inspector/node_conditions.h"
#include "node_inspector/node_reporter.h"

namespace peregrine {
namespace {

constexpr const char* kValueFlags[] = {"node",       "kubeconfig", "kmsg-path", "dmesg",
                                       "sysfs-root", "nvml-library", "nvidia-smi", "dcgmi",
                                       "interval",   "kernel-log-lookback", "heartbeat"};

int Usage(const std::string& error) {
  std::fprintf(stderr, "peregrine-node-inspector: %s\n", error.c_str());
  return 2;
}

bool IsValueFlag(const std::string& name) {
  for (const char* f : kValueFlags) {
    if (name == f) return true;
  }
  return false;
}

int Main(int argc, char** argv) {
  std::map<std::string, std::string> values = {
      {"kmsg-path", "/dev/kmsg"}, {"dmesg", "dmesg"}, {"sysfs-root", "/sys"},
      {"nvml-library", "libnvidia-ml.so.1"}, {"nvidia-smi", "nvidia-smi"}, {"dcgmi", "dcgmi"},
      {"interval", "30"}, {"kernel-log-lookback", "600"}, {"heartbeat", "300"}};
  if (const char* n = std::getenv("NODE_NAME"); n != nullptr) values["node"] = n;
  if (const char* k = std::getenv("KUBECONFIG"); k != nullptr && *k != '\0') values["kubeconfig"] = k;
  bool once = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!absl::StartsWith(arg, "--")) return Usage(absl::StrCat("unexpected argument \"", arg, "\""));
    arg = arg.substr(2);
    if (arg == "once") {
      once = true;
      continue;
    }
    std::string name = arg, value;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (IsValueFlag(name)) {
      if (i + 1 >= argc) return Usage(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    if (!IsValueFlag(name)) return Usage(absl::StrCat("unknown flag --", name));
    values[name] = value;
  }
  if (values["node"].empty()) return Usage("--node (or NODE_NAME) is required");
  auto seconds = [&](const char* flag, int min, int64_t* out) {
    if (!absl::SimpleAtoi(values[flag], out) || *out < min || *out > 86400 * 7) {
      Usage(absl::StrCat("--", flag, ": expected whole seconds in [", min, ", 604800], got \"", values[flag], "\""));
      return false;
    }
    return true;
  };
  int64_t interval_s = 0, lookback_s = 0, heartbeat_s = 0;
  if (!seconds("interval", 1, &interval_s) || !seconds("kernel-log-lookback", -1, &lookback_s) ||
      !seconds("heartbeat", 1, &heartbeat_s)) {
    return 2;
  }

  absl::StatusOr<kube::Config> config =
      values["kubeconfig"].empty()
          ? kube::LoadInClusterConfig(kube::kServiceAccountDir,
                                      std::getenv("KUBERNETES_SERVICE_HOST") ? std::getenv("KUBERNETES_SERVICE_HOST") : "",
                                      std::getenv("KUBERNETES_SERVICE_PORT") ? std::getenv("KUBERNETES_SERVICE_PORT") : "")
          : kube::LoadKubeconfigFile(values["kubeconfig"]);
  if (!config.ok()) {
    std::fprintf(stderr, "peregrine-node-inspector: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  kube::RestClientOptions client_options;
  client_options.user_agent = "peregrine-node-inspector";
  absl::StatusOr<std::unique_ptr<kube::RestClient>> client = kube::RestClient::Create(*config, client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "peregrine-node-inspector: %s\n", std::string(client.status().message()).c_str());
    return 1;
  }

  const absl::Duration interval = absl::Seconds(interval_s);
  Inspector inspector;
  KernelLogOptions kmsg;
  kmsg.kmsg_path = values["kmsg-path"];
  kmsg.dmesg = values["dmesg"];
  kmsg.nvidia_smi = values["nvidia-smi"];
  timespec mono{};
  clock_gettime(CLOCK_MONOTONIC, &mono);
  const int64_t mono_us = static_cast<int64_t>(mono.tv_sec) * 1000000 + mono.tv_nsec / 1000;
  kmsg.ignore_before_us = lookback_s < 0 ? -1 : mono_us - lookback_s * 1000000;
  inspector.Add(std::make_unique<KernelLogInspection>(kmsg), InspectionSchedule{interval, 1});
  NetworkInspectionOptions net;
  net.sysfs_root = values["sysfs-root"];
  inspector.Add(std::make_unique<NetworkInspection>(net), InspectionSchedule{interval, 1});
  GpuInspectionOptions gpu;
  gpu.nvml_library = values["nvml-library"];
  gpu.nvidia_smi = values["nvidia-smi"];
  gpu.dcgmi = values["dcgmi"];
  inspector.Add(std::make_unique<GpuInspection>(gpu), InspectionSchedule{interval, 1});

  NodeReporterOptions reporter_options;
  reporter_options.node = values["node"];
  reporter_options.heartbeat = absl::Seconds(heartbeat_s);
  NodeReporter reporter(client->get(), reporter_options);

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  // The three inspections share one schedule, so every round runs them all: the round's
  // results are the node's whole picture (a component that no longer reports, such as a
  // recoverable Xid of an earlier round, is gone from it; the kernel-log inspection keeps
  // machine-fatal Xids itself).
  std::vector<InspectionResult> latest;
  while (true) {
    const absl::Time now = absl::Now();
    InspectorPoll poll = inspector.Poll(now);
    if (!poll.results.empty()) latest = std::move(poll.results);
    const std::vector<NodeConditionReport> reports = ConditionsFromResults(latest);
    const absl::Status reported = reporter.Report(reports, now);
    if (!reported.ok()) {
      std::fprintf(stderr, "peregrine-node-inspector: reporting to node %s: %s\n", values["node"].c_str(),
                   reported.ToString().c_str());
    }
    if (once) return reported.ok() ? 0 : 1;
    const absl::Duration wait = std::max(absl::ZeroDuration(), inspector.NextDue() - absl::Now());
    const timespec ts = absl::ToTimespec(wait);
    if (sigtimedwait(&stop, nullptr, &ts) > 0) return 0;  // SIGTERM / SIGINT: done
  }
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) { return peregrine::Main(argc, argv); }
