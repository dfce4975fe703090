// FaultInjector: injects faults into a running local-mode job (peregrinectl inject, the
// demo scenarios, tests), implementing FaultSink for POST /api/v1/jobs/{ns}/{name}/faults
// (the request is proto/api/fault_request.h).
//
// Inject() targets a slot's current machine or a machine id. Machine faults act on
// processes (the pod is killed, as if the machine died); GPU and link faults go to the
// stand-in cluster's fault table (sim/fault/fault_control.h), which training processes
// follow while they run; xid and nic-flap write the stand-in machine's kernel log and
// sysfs. It returns a description of what was done, or kInvalidArgument naming the field,
// or kNotFound for a missing target. What each fault kind does is listed in
// fault_injector.cc. The injector does not own `cluster`, which must outlive it.
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
