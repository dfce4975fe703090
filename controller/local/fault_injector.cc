#include "controller/local/fault_injector.h"

#include <time.h>

#include <algorithm>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/fault/fault_control.h"

// What each fault kind does. Request grammar (proto/api/fault_request.h, the JSON body of
// POST /api/v1/jobs/{ns}/{name}/faults):
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

namespace peregrine {
namespace {

absl::StatusOr<std::string> MachineOf(const JobStatus& status, int slot, const std::string& machine,
                                      const char* slot_field) {
  if (!machine.empty()) return machine;
  if (slot < 0 || slot >= static_cast<int>(status.slots.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d is not a machine slot of the job (0..%d)", slot_field,
                                                      slot, static_cast<int>(status.slots.size()) - 1));
  }
  if (status.slots[slot].machine_id.empty()) {
    return absl::NotFoundError(absl::StrFormat("slot %d has no machine yet", slot));
  }
  return status.slots[slot].machine_id;
}

absl::StatusOr<int> NumericMachine(const std::string& machine) {
  int id = 0;
  if (!absl::SimpleAtoi(machine, &id) || id < 0) {
    return absl::InvalidArgumentError(absl::StrCat("machine: '", machine, "' is not a local machine id"));
  }
  return id;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError(absl::StrCat("cannot rename ", tmp));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ReadCounter(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (!(in >> v)) return absl::NotFoundError(absl::StrCat(path, ": no counter (is the stand-in machine running?)"));
  return v;
}

// Appends one /dev/kmsg-format record ("<prio>,<seq>,<usec>,-;message") to a stand-in log.
absl::Status AppendKmsg(const std::string& path, int level, const std::string& message) {
  uint64_t seq = 0;
  {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": no stand-in kernel log (is the machine running?)"));
    std::string line;
    while (std::getline(in, line)) ++seq;
  }
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t usec = static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
  std::ofstream out(path, std::ios::app);
  out << absl::StrFormat("%d,%d,%d,-;%s\n", level, seq, usec, message);
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> FaultInjector::Inject(const FaultRequest& r, const JobStatus& status) {
  if (r.kind == "clear" && r.slot < 0 && r.machine.empty()) {
    if (auto s = sim::ClearFaults(fault_table_path_); !s.ok()) return s;
    return std::string("cleared every GPU and link fault");
  }
  auto machine = MachineOf(status, r.slot, r.machine, "slot");
  if (!machine.ok()) return machine.status();
  if (r.kind == "kill") {
    if (auto s = cluster_->KillMachine(*machine); !s.ok()) return s;
    return absl::StrCat("killed machine ", *machine, " (every process of its pod)");
  }
  if (r.kind == "xid" || r.kind == "nic-flap") {
    if (sim_machine_root_.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(r.kind, ": this cluster has no stand-in machine files"));
    }
    const std::string dir = absl::StrCat(sim_machine_root_, "/", *machine);
    if (r.kind == "xid") {
      const int gpu = std::max(r.local_rank, 0);
      const std::string pci = absl::StrFormat("PCI:0000:%02x:00", 0x1b + 0x10 * gpu);
      const std::string what = r.xid == 79 ? "GPU has fallen off the bus." : "Injected by peregrine.";
      const std::string message = absl::StrFormat("NVRM: Xid (%s): %d, pid=%d, name=sim-trainer, %s", pci, r.xid,
                                                  4242 + gpu, what);
      if (auto s = AppendKmsg(dir + "/kmsg", 4, message); !s.ok()) return s;
      return absl::StrCat("machine ", *machine, " kernel log: ", message);
    }
    const std::string nic = dir + "/sys/class/net/sim0";
    auto changes = ReadCounter(nic + "/carrier_changes");
    if (!changes.ok()) return changes.status();
    auto downs = ReadCounter(nic + "/carrier_down_count");
    if (!downs.ok()) return downs.status();
    if (auto s = WriteFileAtomically(nic + "/carrier_changes", absl::StrCat(*changes + 2, "\n")); !s.ok()) return s;
    if (auto s = WriteFileAtomically(nic + "/carrier_down_count", absl::StrCat(*downs + 1, "\n")); !s.ok()) return s;
    return absl::StrFormat("machine %s NIC sim0 flapped (carrier down and up; %d flaps so far)", *machine, *downs + 1);
  }
  auto id = NumericMachine(*machine);
  if (!id.ok()) return id.status();
  const std::string target = r.local_rank < 0 ? absl::StrCat("machine ", *machine)
                                              : absl::StrCat("GPU ", r.local_rank, " of machine ", *machine);
  if (r.kind == "clear") {
    if (auto s = sim::ClearMachineFaults(fault_table_path_, *id, r.local_rank); !s.ok()) return s;
    return absl::StrCat("cleared the faults of ", target, r.local_rank < 0 ? " (its GPUs and links)" : "");
  }
  if (r.kind == "link" || r.kind == "link-corrupt") {
    // No peer: the links between the machine and every other machine (its NIC).
    std::string peer = "every other machine";
    int peer_id = -1;
    if (r.peer_slot >= 0 || !r.peer_machine.empty()) {
      auto named = MachineOf(status, r.peer_slot, r.peer_machine, "peerSlot");
      if (!named.ok()) return named.status();
      auto named_id = NumericMachine(*named);
      if (!named_id.ok()) return named_id.status();
      if (*named_id == *id) return absl::InvalidArgumentError("peerSlot or peerMachine: a link needs two machines");
      peer = absl::StrCat("machine ", *named);
      peer_id = *named_id;
    }
    sim::LinkFault f;
    f.delay_us = r.delay_us;
    f.bandwidth_bytes_per_s = r.bandwidth_bytes_per_second;
    f.corrupt = r.kind == "link-corrupt";
    if (auto s = sim::SetLinkFault(fault_table_path_, *id, peer_id, f, /*both_directions=*/true); !s.ok()) return s;
    return absl::StrFormat("link between machine %s and %s:%s +%d us per message, cap %.0f B/s", *machine, peer,
                           f.corrupt ? " payload corrupted," : "", r.delay_us, r.bandwidth_bytes_per_second);
  }
  sim::RankFault f;
  if (r.kind == "crash") f.crash = true;
  if (r.kind == "hang") f.hang = true;
  if (r.kind == "nan") f.nan = true;
  if (r.kind == "corrupt") f.corrupt = true;
  if (r.kind == "sdc") f.grad_corrupt = true;
  if (r.kind == "nvlink") f.intra_corrupt = true;
  if (r.kind == "slow") f.compute_slowdown = r.factor;
  if (r.kind == "jitter") f.jitter_fraction = r.fraction;
  if (auto s = sim::SetRankFault(fault_table_path_, *id, r.local_rank, f); !s.ok()) return s;
  if (r.kind == "slow") return absl::StrFormat("%s computes %.2fx slower", target, r.factor);
  if (r.kind == "nvlink") {
    return absl::StrCat(target, ": nvlink (payloads sent to GPUs of the same machine arrive corrupted)");
  }
  if (r.kind == "jitter") {
    return absl::StrFormat("%s: compute time jitters by up to +-%.1f%% per iteration", target, r.fraction * 100);
  }
  return absl::StrCat(target, ": ", r.kind);
}

}  // namespace peregrine
