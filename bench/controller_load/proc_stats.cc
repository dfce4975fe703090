#include "bench/controller_load/proc_stats.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace peregrine::loadtest {
namespace {

absl::StatusOr<std::string> ReadProcFile(pid_t pid, const char* name) {
  const std::string path = absl::StrCat("/proc/", pid, "/", name);
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (is the process gone?)"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<uint64_t> ParseProcStatCpu(absl::string_view stat) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields are
  // counted from the last ')'. utime and stime are fields 14 and 15 (proc(5)), i.e. the
  // 12th and 13th after the state, which is the first field after ')'.
  const size_t close = stat.rfind(')');
  if (close == absl::string_view::npos) return absl::InvalidArgumentError("/proc stat: no ')' closing the command name");
  std::vector<absl::string_view> fields =
      absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
  if (fields.size() < 13) {
    return absl::InvalidArgumentError(
        absl::StrCat("/proc stat: ", fields.size(), " fields after the command name, utime and stime need 13"));
  }
  uint64_t utime = 0, stime = 0;
  if (!absl::SimpleAtoi(fields[11], &utime)) return absl::InvalidArgumentError(absl::StrCat("/proc stat: utime '", fields[11], "' is not a number"));
  if (!absl::SimpleAtoi(fields[12], &stime)) return absl::InvalidArgumentError(absl::StrCat("/proc stat: stime '", fields[12], "' is not a number"));
  return utime + stime;
}

absl::StatusOr<ProcMemory> ParseProcStatusMemory(absl::string_view status) {
  ProcMemory m;
  bool rss = false, hwm = false;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    const bool is_rss = absl::StartsWith(line, "VmRSS:"), is_hwm = absl::StartsWith(line, "VmHWM:");
    if (!is_rss && !is_hwm) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line.substr(6), ' ', absl::SkipWhitespace());
    uint64_t kib = 0;
    if (parts.size() != 2 || parts[1] != "kB" || !absl::SimpleAtoi(parts[0], &kib)) {
      return absl::InvalidArgumentError(absl::StrCat("/proc status: malformed line '", line, "'"));
    }
    (is_rss ? m.rss_kib : m.peak_kib) = kib;
    (is_rss ? rss : hwm) = true;
  }
  if (!rss || !hwm) return absl::InvalidArgumentError(absl::StrCat("/proc status: no ", rss ? "VmHWM" : "VmRSS", " line"));
  return m;
}

absl::StatusOr<absl::Duration> ProcessCpuTime(pid_t pid) {
  absl::StatusOr<std::string> text = ReadProcFile(pid, "stat");
  if (!text.ok()) return text.status();
  absl::StatusOr<uint64_t> ticks = ParseProcStatCpu(*text);
  if (!ticks.ok()) return ticks.status();
  static const long kTicksPerSecond = ::sysconf(_SC_CLK_TCK);
  return absl::Seconds(static_cast<double>(*ticks) / static_cast<double>(kTicksPerSecond));
}

absl::StatusOr<ProcMemory> ProcessMemory(pid_t pid) {
  absl::StatusOr<std::string> text = ReadProcFile(pid, "status");
  if (!text.ok()) return text.status();
  return ParseProcStatusMemory(*text);
}

double CoreShare(absl::Duration cpu_before, absl::Duration cpu_after, absl::Duration wall) {
  if (wall <= absl::ZeroDuration()) return 0;
  return absl::FDivDuration(cpu_after - cpu_before, wall);
}

}  // namespace peregrine::loadtest
