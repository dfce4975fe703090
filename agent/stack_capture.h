// Stack capture of the training process tree, for hang diagnosis.
//
// WithDescendants expands the training processes to every descendant (found
// from the ppid field of /proc/*/stat): the launcher, every rank and their
// data-loader and checkpoint children. A descendant of a rank gets that rank
// (its stacks belong to the rank's state); a descendant of a root that is no
// rank (a per-machine launcher, global_rank -1) gets the RANK of its
// environment (/proc/PID/environ), else -1.
// CaptureStacks runs one tool per process, by argv (no shell) with a timeout,
// up to max_parallel processes at a time (results in the order of `targets`):
//   py-spy dump --pid PID [--native]  when py-spy is on PATH and the process is Python;
//   eu-stack -p PID                   when eu-stack exists (preferred native tool);
//   gdb -batch -ex "thread apply all bt" -p PID  otherwise.
// A tool is looked for on PATH (the training image's own), then in
// StackCaptureOptions::tool_dir (the agent bundle's bin/, which carries eu-stack and
// gdb: docker/Dockerfile).
// When a tool fails (cannot start, non-zero exit with no output, timeout) the
// next one in that order is tried; the result keeps the last tool's text and
// the failures. A process's text is at most max_raw_bytes (kMaxStackBytesPerProcess):
// longer text is cut and ends in "... truncated N bytes", so a capture reply stays
// bounded (the reply as a whole: kMaxStackReplyBytes, proto_translation.h). Parsing the text is the caller's (the agent parses it into
// frames for its CaptureStacks result; diagnosis/stack_parse.h).
//
// Thread safety: the functions are thread-safe and block (seconds); call them
// off the control loop. Ownership: plain values.
#ifndef PEREGRINE_AGENT_STACK_CAPTURE_H_
#define PEREGRINE_AGENT_STACK_CAPTURE_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/clock.h"

namespace peregrine {

struct StackTarget {
  pid_t pid = 0;
  int global_rank = -1;
};

struct CapturedStack {
  pid_t pid = 0;
  int global_rank = -1;
  std::string command;  // /proc/PID/cmdline, space-joined, bounded
  std::string tool;     // "py-spy", "eu-stack", "gdb", or "" when none could run
  std::string raw;      // the tool's output, at most max_raw_bytes
  bool ok = false;      // a tool produced a stack
};

// The most text one process's capture keeps.
inline constexpr size_t kMaxStackBytesPerProcess = 256 * 1024;

struct StackCaptureOptions {
  absl::Duration timeout_per_process = absl::Seconds(20);
  size_t max_raw_bytes = 64 * 1024;  // at most kMaxStackBytesPerProcess
  bool include_native = false;
  int max_parallel = 8;  // processes captured at the same time
  std::string tool_dir;  // also look for py-spy, eu-stack and gdb here, after PATH ("" none)
  Clock* clock = RealClock();  // the tools' timeouts (must outlive the call)
};

// `roots` plus all their live descendants, roots first, no duplicates.
std::vector<StackTarget> WithDescendants(const std::vector<StackTarget>& roots);

// `text` when it has at most `max_bytes`; else its first bytes and "\n... truncated N
// bytes" (N: the bytes cut), together at most max(max_bytes, 64) bytes, never cutting a
// UTF-8 character. `at_least` writes "at least N" (the text was already cut before).
std::string TruncateStackText(std::string text, size_t max_bytes, bool at_least = false);

std::vector<CapturedStack> CaptureStacks(const std::vector<StackTarget>& targets,
                                         const StackCaptureOptions& options);

}  // namespace peregrine

#endif  // PEREGRINE_AGENT_STACK_CAPTURE_H_
