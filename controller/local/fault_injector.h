// FaultInjector: injects faults into a running local-mode job (peregrinectl inject, the
// demo scenarios, tests). Machine faults act on processes (the pod is killed, as if the
// machine died); GPU and link faults go to the stand-in cluster's fault table
// (sim/fault/fault_control.h), which the training processes follow while they run.
//
// Request grammar (proto/api/fault_request.h, the JSON body of POST
// /api/v1/jobs/{ns}/{name}/faults):
//   kind: kill | crash | hang | slow | jitter | nan | corrupt | sdc | nvlink | link |
//         link-corrupt | xid | nic-flap | clear
//   (sdc: the GPU's training backward kernel silently scales its gradients, see
//   sim::RankFault::grad_corrupt; corrupt perturbs every NCCL payload of the GPU; nvlink:
//   a bad intra-machine transport, the payloads the GPU(s) send to GPUs of the same machine
//   arrive with flipped bits, sim::RankFault::intra_corrupt; link-corrupt: the payloads
//   crossing the link between the machine and its peer, or every other machine when no
//   peer is given (a bad NIC), arrive with flipped bits, sim::LinkFault::corrupt)
//   (clear without slot/machine removes every GPU and link fault; with one it removes that
//   machine's faults only: localRank >= 0 that GPU's own entry, -1 every GPU entry and
//   every link fault of the machine; xid and nic-flap records stay)
//   slot: the machine slot (0..machines-1) whose current machine is targeted, or
//   machine: a machine id; localRank: the GPU (-1 = the whole machine);
//   factor (slow, > 1); fraction (jitter, in (0, 1): each iteration's compute of the
//   target GPU(s) is stretched by a random factor in [1 - fraction, 1 + fraction]);
//   peerSlot / peerMachine, delayUs, bandwidthBytesPerSecond (link, link-corrupt; without a
//   peer the fault is on the links between the machine and every other machine, both ways).
//   xid (default 79): xid appends a real-format NVRM Xid record for GPU localRank (0 when
//   -1) to the stand-in machine's kernel log <simMachineRoot>/<machine>/kmsg; nic-flap bumps
//   carrier_changes (+2) and carrier_down_count (+1) of its NIC sim0 under
//   <simMachineRoot>/<machine>/sys/class/net/ (a link that went down and came back), the
//   layout agent/inspection_runner.h PrepareStandInMachine creates.
// Errors name the field (kInvalidArgument) or the missing target (kNotFound).
//
// Thread-safe.
#ifndef PEREGRINE_CONTROLLER_LOCAL_FAULT_INJECTOR_H_
#define PEREGRINE_CONTROLLER_LOCAL_FAULT_INJECTOR_H_

#include <string>

#include "absl/status/statusor.h"
#include "controller/core/job_state.h"
#include "controller/http_server.h"
#include "controller/local/local_cluster.h"
#include "proto/api/fault_request.h"

namespace peregrine {

class FaultInjector final : public FaultSink {
 public:
  FaultInjector(LocalCluster* cluster, std::string fault_table_path, std::string sim_machine_root = "")
      : cluster_(cluster),
        fault_table_path_(std::move(fault_table_path)),
        sim_machine_root_(std::move(sim_machine_root)) {}

  // Applies the request against the job's current status (slot -> machine); returns a
  // human-readable description of what was done.
  absl::StatusOr<std::string> Inject(const FaultRequest& request, const JobStatus& status) override;

 private:
  LocalCluster* cluster_;
  std::string fault_table_path_;
  std::string sim_machine_root_;  // stand-in machines' kmsg and sysfs ("" : xid/nic-flap unavailable)
};

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_LOCAL_FAULT_INJECTOR_H_
