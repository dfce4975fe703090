// Host inspection: space and writability of the job's volumes (checkpoint directory,
// dataset cache, /dev/shm). Each volume is statvfs()'ed; its mount (device, filesystem,
// options) comes from /proc/self/mountinfo. Block I/O errors are reported by the kernel-
// log inspection (kind "host", component "/dev/<device>"), which reads the kernel log
// once for both; this inspection names each volume's device so the two can be joined.
//
// ParseMountInfo is pure; HostInspection is thread-compatible.
#ifndef PEREGRINE_AGENT_INSPECTION_HOST_INSPECTION_H_
#define PEREGRINE_AGENT_INSPECTION_HOST_INSPECTION_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/inspection/inspection.h"

namespace peregrine {

struct MountEntry {
  std::string mount_point;  // octal escapes (\040) decoded
  std::string fs_type;
  std::string source;  // "/dev/nvme0n1p1", "tmpfs", "overlay"
  bool read_only = false;
};

// /proc/<pid>/mountinfo (proc(5)): "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 -
// ext3 /dev/root rw,errors=continue". Fails with kInvalidArgument naming the line.
absl::StatusOr<std::vector<MountEntry>> ParseMountInfo(absl::string_view text);

// The mount holding `path` (longest mount-point prefix), or nullptr.
const MountEntry* MountFor(const std::vector<MountEntry>& mounts, absl::string_view path);

struct HostThresholds {
  double free_warn_fraction = 0.10;   // below: WARNING
  double free_fault_fraction = 0.02;  // below: FAULT (not machine-attributed: the job's data)
};

struct HostInspectionOptions {
  std::vector<std::string> volumes;  // paths the job writes (checkpoints, logs)
  std::string mountinfo_path = "/proc/self/mountinfo";
  HostThresholds thresholds;
};

class HostInspection : public Inspection {
 public:
  explicit HostInspection(HostInspectionOptions options) : options_(std::move(options)) {}
  std::string kind() const override { return "host"; }
  // One "host" result per volume: ERROR when the path is missing, FAULT (machine) when
  // its filesystem is mounted read-only, FAULT/WARNING when space is low. With no volumes
  // configured, one NOT_PRESENT result.
  std::vector<InspectionResult> Run(absl::Time now) override;

 private:
  HostInspectionOptions options_;
};

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_INSPECTION_HOST_INSPECTION_H_
