// Controller-side API of the stand-in cluster's fault table (layout: fault_table.h).
//
// The local-mode controller, peregrinectl and tests call these to inject and clear faults
// while training processes run; readers (the stand-in libnccl and sim-trainer) see each
// change on their next call. Every function opens the file, takes flock(LOCK_EX) for the
// change, bumps the generation seqlock around it and unmaps again, so concurrent writers in
// different processes are serialised. Thread-safe (no shared state in the process).
//
// Errors: kInvalidArgument for bad arguments (negative machine id, slowdown < 1, jitter
// outside [0, 1), negative delay or bandwidth), kNotFound when the table file is missing,
// kDataLoss when it is not a valid table of this build's version (fault_table.h; the
// message names both versions), kResourceExhausted when a table of entries is full,
// kInternal for system-call failures (the message names the path and errno text).
#ifndef PEREGRINE_SIM_FAULT_FAULT_CONTROL_H_
#define PEREGRINE_SIM_FAULT_FAULT_CONTROL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sim/fault/fault_table.h"

namespace peregrine::sim {

// Creates an empty table at `path` (atomically via a temporary file and rename). When a
// valid table already exists there it is cleared in place instead, so processes that
// already mapped it keep following it.
absl::Status CreateFaultTable(const std::string& path);

// Sets the fault of GPU (machine_id, local_rank); local_rank -1 addresses the whole
// machine (a separate entry from the per-GPU ones). A healthy RankFault{} removes the
// entry.
absl::Status SetRankFault(const std::string& path, int machine_id, int local_rank,
                          const RankFault& fault);

// Sets the fault on the link src_machine -> dst_machine, and on dst -> src as well when
// both_directions. One end may be -1: every machine other than the other end (e.g.
// (m, -1) with both_directions is machine m's NIC, both ways). A healthy LinkFault{}
// removes the entry (or entries). kInvalidArgument when an end is < -1 or both are -1.
absl::Status SetLinkFault(const std::string& path, int src_machine, int dst_machine,
                          const LinkFault& fault, bool both_directions = false);

// Removes every fault.
absl::Status ClearFaults(const std::string& path);

// Removes the faults of one machine only: local_rank >= 0 removes that GPU's own entry;
// local_rank -1 removes every GPU entry of the machine (its machine-wide one included) and
// every link entry with the machine at either end. kInvalidArgument for machine_id < 0 or
// local_rank < -1.
absl::Status ClearMachineFaults(const std::string& path, int machine_id, int local_rank);

// A consistent copy of the table.
absl::StatusOr<FaultTableSnapshot> ReadFaults(const std::string& path);

}  // namespace peregrine::sim

#endif  // PEREGRINE_SIM_FAULT_FAULT_CONTROL_H_
