// Kernel-log inspection: NVIDIA Xid events and block-device I/O errors from /dev/kmsg
// (falling back to `dmesg` when /dev/kmsg cannot be opened).
//
// ParseKmsgRecord / ParseDmesgLine parse one /dev/kmsg record
// ("<prio>,<seq>,<usec>,<flags>[,...];<message>") or dmesg line ("[  123.456789] <message>")
// and fail with kInvalidArgument otherwise; ParseXid and ParseBlockIoError recognise the
// NVRM Xid and block I/O error messages. ClassifyXid sorts Xids into machine-fatal (the
// machine is evicted), application and recoverable. The message formats and the Xid
// classes are described in kernel_log.cc.
//
// Parsers are pure; KernelLogInspection keeps the reader position and the machine-fatal
// events (which stay reported until the agent restarts). Thread-compatible.
#ifndef PEREGRINE_AGENT_INSPECTION_KERNEL_LOG_H_
#define PEREGRINE_AGENT_INSPECTION_KERNEL_LOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/inspection/command_runner.h"
#include "agent/inspection/gpu_inspection.h"
#include "agent/inspection/inspection.h"

namespace peregrine {

struct KmsgRecord {
  int facility = 0;
  int level = 0;  // syslog level 0 (emerg) .. 7 (debug)
  uint64_t sequence = 0;
  int64_t timestamp_us = 0;  // since boot
  std::string message;
};

// One /dev/kmsg record (the first line of a read; continuation lines are not passed).
// Fails with kInvalidArgument naming the bad field.
absl::StatusOr<KmsgRecord> ParseKmsgRecord(absl::string_view line);

// One `dmesg` line "[ seconds] message". Fails with kInvalidArgument.
absl::StatusOr<KmsgRecord> ParseDmesgLine(absl::string_view line);

enum class XidClass { kMachineFatal, kRecoverable, kApplication };
const char* XidClassName(XidClass c);  // "machine_fatal", "recoverable", "application"
XidClass ClassifyXid(int xid);
// Short catalogue text, e.g. "GPU has fallen off the bus"; "" when unknown.
const char* XidDescription(int xid);

struct XidEvent {
  std::string pci;  // "PCI:0000:3b:00" as logged; "" when the line names no device
  int xid = 0;
  std::optional<int> pid;
  std::string process_name;
  std::string detail;  // the rest of the message
};

// The class of one event: ClassifyXid, except Xid 154 whose class is the recovery
// action in its text.
XidClass ClassifyXidEvent(const XidEvent& event);

// nullopt when the message is not an Xid line; kInvalidArgument when it starts like one
// ("NVRM: Xid (") but is malformed. A parenthesised part that is not a PCI bus id
// (NormalizePciBusId) leaves `pci` empty: the event names no device.
absl::StatusOr<std::optional<XidEvent>> ParseXid(absl::string_view message);

// The block device named by an I/O-error message ("sdb", "nvme0n1p1"), or nullopt.
std::optional<std::string> ParseBlockIoError(absl::string_view message);

struct KernelLogOptions {
  std::string kmsg_path = "/dev/kmsg";  // a regular file is read as appended lines
  std::string dmesg = "dmesg";          // fallback command; empty disables it
  absl::Duration command_timeout = absl::Seconds(10);
  size_t max_records_per_run = 100000;  // bounds one run's work
  // Records the kernel logged before this time (its clock: CLOCK_MONOTONIC microseconds,
  // as /dev/kmsg and dmesg stamp them) are skipped: an Xid from before this agent started
  // (an earlier job's, a GPU reset since recovered) does not count against the machine.
  // -1: every record counts.
  int64_t ignore_before_us = -1;
  // This pod's GPUs (normalised bus ids, NormalizePciBusId): only their Xids count; an
  // Xid of another GPU of the node (another pod's) is skipped. Unset: learned once from
  // `nvidia_smi --query-gpu=pci.bus_id --format=csv,noheader` (in a pod, nvidia-smi sees
  // the GPUs the device plugin gave it); when that fails, or `nvidia_smi` is empty, the
  // GPUs are unknown and every Xid counts (the results say so). An Xid line that names
  // no device always counts (conservative), with a detail saying so.
  std::optional<std::vector<std::string>> gpu_bus_ids;
  std::string nvidia_smi = "nvidia-smi";
};

class KernelLogInspection : public Inspection {
 public:
  explicit KernelLogInspection(KernelLogOptions options,
                               CommandRunner runner = DefaultCommandRunner());
  ~KernelLogInspection() override;
  std::string kind() const override { return "xid"; }
  // Results: one "xid" result per GPU of this pod that logged an Xid (FAULT +
  // machine_attributed while a machine-fatal Xid has been seen, WARNING for others in this
  // run), one "host" result per block device with I/O errors (FAULT, machine), or a single
  // OK "kernel-log" result (its details count the other GPUs' Xids skipped). When the log
  // cannot be opened (EPERM without CAP_SYSLOG, no /dev/kmsg in the container) and the
  // dmesg fallback fails or is disabled, one CANNOT_SEE "kernel-log" result whose summary
  // and details["reason"] say why; a read or parse failure after opening is ERROR.
  std::vector<InspectionResult> Run(absl::Time now) override;

 private:
  KernelLogOptions options_;
  CommandRunner runner_;
  int fd_ = -1;
  bool is_char_device_ = false;
  bool use_dmesg_ = false;
  std::string open_error_;
  std::string partial_line_;
  int64_t last_dmesg_us_ = -1;
  uint64_t lost_records_ = 0;
  std::map<std::string, XidEvent> fatal_;   // by PCI id, sticky
  std::map<std::string, int> io_errors_;    // by device, sticky counts
  // This pod's GPUs once known (options or nvidia-smi); why not when unknown.
  std::optional<std::vector<std::string>> own_gpus_;
  bool own_gpus_tried_ = false;
  std::string own_gpus_error_;
  uint64_t other_gpu_xids_ = 0;  // Xids of GPUs not this pod's, skipped (cumulative)
  // Whether an Xid of `pci` (as logged) counts against this machine, and the detail to
  // attach when it counts without being known to be this pod's ("" when it is).
  bool CountsAgainstMachine(const std::string& pci, std::string* note);
  void LearnOwnGpus();
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_KERNEL_LOG_H_
