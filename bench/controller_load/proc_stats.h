// What the load test reads about a process from /proc: CPU time (utime + stime of
// /proc/<pid>/stat) and memory (VmRSS and VmHWM of /proc/<pid>/status).
//
// Plain functions over the files' text (ParseProcStatCpu, ParseProcStatusMemory) so the
// parsing is tested on real-format samples, plus readers of a live pid. Thread-safe
// (no state). Errors: kNotFound when the process is gone, kInvalidArgument naming what
// is missing or malformed in the text.
#ifndef PEREGRINE_BENCH_CONTROLLER_LOAD_PROC_STATS_H_
#define PEREGRINE_BENCH_CONTROLLER_LOAD_PROC_STATS_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace peregrine::loadtest {

// utime + stime of a /proc/<pid>/stat line, in clock ticks.
absl::StatusOr<uint64_t> ParseProcStatCpu(absl::string_view stat);

struct ProcMemory {
  uint64_t rss_kib = 0;   // VmRSS: resident now
  uint64_t peak_kib = 0;  // VmHWM: the most resident so far
};
absl::StatusOr<ProcMemory> ParseProcStatusMemory(absl::string_view status);

// The process's CPU time so far (user + system).
absl::StatusOr<absl::Duration> ProcessCpuTime(pid_t pid);
absl::StatusOr<ProcMemory> ProcessMemory(pid_t pid);

// CPU used between two readings as a share of one core (1.0 = one core busy).
double CoreShare(absl::Duration cpu_before, absl::Duration cpu_after, absl::Duration wall);

}  // namespace peregrine::loadtest

#endif  // PEREGRINE_BENCH_CONTROLLER_LOAD_PROC_STATS_H_
