// InspectionRunner: the agent's real-time machine inspections (agent/inspection): GPU,
// kernel log (Xid, block I/O), network (NIC, RDMA) and host volumes, each at its own
// interval, turned into the wire form the agent puts in Heartbeat.inspections (latest
// result per component) and Event.inspection_alarm (threshold crossings).
//
// Where the inspections look is configurable so faults can be injected without a real
// kernel or NIC: `kmsg_path` (default /dev/kmsg) and `sysfs_root` (default /sys). On a
// machine without GPUs the GPU and RDMA results are NOT_PRESENT, never a fault.
//
// Stand-in machines (local mode): PrepareStandInMachine creates, under one directory,
//   <dir>/kmsg                                  an empty kmsg-format log ("<prio>,<seq>,<usec>,-;msg")
//   <dir>/sys/class/net/sim0/{operstate,carrier,carrier_changes,carrier_down_count}
//   <dir>/sys/class/net/sim0/device             (a directory: sim0 is a "physical" NIC)
// which the controller's FaultInjector appends to (xid) and rewrites (nic-flap).
//
// Flaps: each NIC flap (carrier going down and up) is one WARNING for `flap_window`, so
// every separate flap episode raises its own alarm; counting alarms over minutes is the
// controller's job (spec.faultTolerance.networkAlarmWindowSeconds), not the agent's.
//
// Not thread-safe: the agent's control loop owns it. Poll takes the time from the caller.
#ifndef PEREGRINE_AGENT_INSPECTION_RUNNER_H_
#define PEREGRINE_AGENT_INSPECTION_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/inspection/inspection_result.h"
#include "agent/inspection/inspector.h"
#include "peregrine/v1/agent.pb.h"

namespace peregrine {

struct InspectionRunnerOptions {
  std::string kmsg_path = "/dev/kmsg";
  std::string sysfs_root = "/sys";
  std::vector<std::string> volumes;  // host volumes to watch (log dir, checkpoints)
  int expected_gpus = 0;             // > 0: fewer visible GPUs is a machine fault
  bool use_dmesg_fallback = true;    // read `dmesg` when kmsg_path cannot be opened
  int64_t kernel_log_since_us = -1;  // KernelLogOptions::ignore_before_us (the agent's start)
  absl::Duration gpu_interval = absl::Seconds(10);
  absl::Duration kernel_log_interval = absl::Seconds(1);
  absl::Duration network_interval = absl::Seconds(1);
  absl::Duration host_interval = absl::Seconds(30);
  absl::Duration flap_window = absl::Seconds(3);
  // The node inspector DaemonSet covers this node's kernel log, NICs/RDMA and GPUs/DCGM:
  // only the host (volume) inspection runs here.
  bool host_checks_on_node = false;
};

// Creates the stand-in machine's files under `dir` (idempotent: existing files are kept).
// kInternal naming the path when a file cannot be written.
absl::Status PrepareStandInMachine(const std::string& dir);

// Plain -> wire.
v1::InspectionResult ToWire(const InspectionResult& result);

class InspectionRunner {
 public:
  explicit InspectionRunner(InspectionRunnerOptions options);

  struct Outcome {
    bool ran = false;                            // at least one inspection ran
    std::vector<v1::InspectionResult> alarms;    // new alarms in this poll
  };
  // Runs the inspections due at `now`.
  Outcome Poll(absl::Time now);
  // The latest result of every component, for the heartbeat.
  std::vector<v1::InspectionResult> Latest() const;
  absl::Time NextDue() const { return inspector_.NextDue(); }

 private:
  Inspector inspector_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_RUNNER_H_
