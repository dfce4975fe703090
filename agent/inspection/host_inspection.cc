#include "agent/inspection/host_inspection.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "agent/inspection/sysfs_read.h"

namespace peregrine {
namespace {

std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' &&
        s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      const int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      out.push_back(static_cast<char>(v));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<MountEntry>> ParseMountInfo(absl::string_view text) {
  std::vector<MountEntry> mounts;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t sep = 0;
    for (size_t i = 6; i < f.size(); ++i) {
      if (f[i] == "-") {
        sep = i;
        break;
      }
    }
    if (f.size() < 10 || sep == 0 || sep + 3 > f.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "mountinfo line %d: expected \"id parent maj:min root mountpoint options ... - fstype "
          "source superoptions\": \"%s\"",
          line_no, line.substr(0, 120)));
    }
    MountEntry m;
    m.mount_point = Unescape(f[4]);
    m.fs_type = std::string(f[sep + 1]);
    m.source = Unescape(f[sep + 2]);
    for (absl::string_view opt : absl::StrSplit(f[5], ',')) m.read_only |= opt == "ro";
    mounts.push_back(std::move(m));
  }
  return mounts;
}

const MountEntry* MountFor(const std::vector<MountEntry>& mounts, absl::string_view path) {
  const MountEntry* best = nullptr;
  for (const MountEntry& m : mounts) {
    const absl::string_view mp = m.mount_point;
    const bool covers = mp == "/" || path == mp ||
                        (absl::StartsWith(path, mp) && path.size() > mp.size() && path[mp.size()] == '/');
    // Later entries shadow earlier ones at the same mount point.
    if (covers && (best == nullptr || mp.size() >= best->mount_point.size())) best = &m;
  }
  return best;
}

std::vector<InspectionResult> HostInspection::Run(absl::Time now) {
  std::vector<InspectionResult> results;
  if (options_.volumes.empty()) {
    InspectionResult r;
    r.kind = "host";
    r.component = "volumes";
    r.status = InspectionOutcome::kNotPresent;
    r.summary = "no job volume configured";
    r.observed_at = now;
    results.push_back(std::move(r));
    return results;
  }
  std::vector<MountEntry> mounts;
  std::string mount_error;
  absl::StatusOr<std::string> text = inspection_internal::ReadSmallFile(options_.mountinfo_path);
  if (text.ok()) {
    absl::StatusOr<std::vector<MountEntry>> parsed = ParseMountInfo(*text);
    if (parsed.ok()) {
      mounts = *std::move(parsed);
    } else {
      mount_error = std::string(parsed.status().message());
    }
  } else {
    mount_error = std::string(text.status().message());
  }
  const HostThresholds& t = options_.thresholds;
  for (const std::string& volume : options_.volumes) {
    InspectionResult r;
    r.kind = "host";
    r.component = volume;
    r.observed_at = now;
    const MountEntry* mount = MountFor(mounts, volume);
    if (mount != nullptr) {
      r.details["device"] = mount->source;
      r.details["fs_type"] = mount->fs_type;
      r.details["mount_point"] = mount->mount_point;
    } else if (!mount_error.empty()) {
      r.details["mountinfo_error"] = mount_error;
    }
    struct statvfs st;
    if (statvfs(volume.c_str(), &st) != 0) {
      r.status = InspectionOutcome::kError;
      r.summary = absl::StrCat("cannot stat volume ", volume, ": ", std::strerror(errno));
      results.push_back(std::move(r));
      continue;
    }
    const double total = static_cast<double>(st.f_blocks) * st.f_frsize;
    const double avail = static_cast<double>(st.f_bavail) * st.f_frsize;
    const double free_fraction = total > 0 ? avail / total : 1.0;
    r.details["total_bytes"] = absl::StrFormat("%.0f", total);
    r.details["available_bytes"] = absl::StrFormat("%.0f", avail);
    r.details["free_percent"] = absl::StrFormat("%.1f", 100 * free_fraction);
    const bool read_only = (st.f_flag & ST_RDONLY) != 0;
    if (read_only) {
      r.status = InspectionOutcome::kFault;
      r.machine_attributed = true;
      r.summary = absl::StrCat(volume, " is mounted read-only (a filesystem error remounts "
                                       "read-only; the job cannot write checkpoints)");
    } else if (total > 0 && free_fraction < t.free_fault_fraction) {
      r.status = InspectionOutcome::kFault;
      r.summary = absl::StrFormat("%s has %.1f%% free (< %.1f%%)", volume, 100 * free_fraction,
                                  100 * t.free_fault_fraction);
    } else if (total > 0 && free_fraction < t.free_warn_fraction) {
      r.status = InspectionOutcome::kWarning;
      r.summary = absl::StrFormat("%s has %.1f%% free (< %.1f%%)", volume, 100 * free_fraction,
                                  100 * t.free_warn_fraction);
    } else {
      r.status = InspectionOutcome::kOk;
      r.summary = absl::StrFormat("%s: %.1f%% free", volume, 100 * free_fraction);
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace peregrine
