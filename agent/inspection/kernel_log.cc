#include "agent/inspection/kernel_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

// Formats read and Xid classes.
//
// Formats:
//   /dev/kmsg record (Documentation/ABI/testing/dev-kmsg):
//     "<prio>,<seq>,<usec>,<flags>[,...];<message>", continuation lines start with ' '.
//   dmesg default line: "[  123.456789] <message>".
//   Xid (NVIDIA driver): "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has
//     fallen off the bus." (pid=/name= are absent on older drivers).
//   Block errors: "I/O error, dev sdb, sector 2048 op 0x1:(WRITE) ...", "Buffer I/O error on
//     dev nvme0n1p1, logical block 0, ...", "EXT4-fs error (device sda1): ...".
// Xid classes, after the resolution buckets of NVIDIA's Xid catalogue
// (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html):
//   machine-fatal (reset the GPU or reboot; the machine is evicted): 46 GPU stopped
//     processing, 48 double-bit ECC, 62 micro-controller halt, 64 row-remap / page
//     retirement failure, 74 NVLink, 79 fallen off the bus, 95 uncontained ECC, 119/120
//     GSP, 140 unrecovered ECC, and 154 when the recovery action it names is a reset, a
//     reboot or a drain;
//   application errors (the job's code; restart the application): 13, 31, 43, 45;
//   recoverable, everything else, notably 63 (a row remapping recorded, applied at the
//     next GPU reset), 92 (high single-bit ECC rate, corrected) and 94 (contained ECC
//     error: the process that touched the memory is killed, the page offlined, the GPU
//     stays usable), and 154 with recovery action None.

namespace peregrine {

absl::StatusOr<KmsgRecord> ParseKmsgRecord(absl::string_view line) {
  line = absl::StripSuffix(line, "\n");
  const size_t semi = line.find(';');
  if (semi == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("kmsg record without ';' separator: \"", line.substr(0, 80), "\""));
  }
  std::vector<absl::string_view> fields = absl::StrSplit(line.substr(0, semi), ',');
  if (fields.size() < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kmsg record prefix needs priority,sequence,timestamp,flags: \"", line.substr(0, 80), "\""));
  }
  KmsgRecord r;
  int prio = 0;
  if (!absl::SimpleAtoi(fields[0], &prio) || prio < 0) {
    return absl::InvalidArgumentError(absl::StrCat("kmsg priority \"", fields[0], "\" is not a number"));
  }
  r.level = prio & 7;
  r.facility = prio >> 3;
  if (!absl::SimpleAtoi(fields[1], &r.sequence)) {
    return absl::InvalidArgumentError(absl::StrCat("kmsg sequence \"", fields[1], "\" is not a number"));
  }
  if (!absl::SimpleAtoi(fields[2], &r.timestamp_us) || r.timestamp_us < 0) {
    return absl::InvalidArgumentError(absl::StrCat("kmsg timestamp \"", fields[2], "\" is not a number"));
  }
  r.message = std::string(line.substr(semi + 1));
  return r;
}

absl::StatusOr<KmsgRecord> ParseDmesgLine(absl::string_view line) {
  absl::string_view s = absl::StripTrailingAsciiWhitespace(line);
  if (!absl::ConsumePrefix(&s, "[")) {
    return absl::InvalidArgumentError(absl::StrCat("dmesg line without '[time]': \"", line.substr(0, 80), "\""));
  }
  const size_t close = s.find(']');
  double seconds = 0;
  // Microseconds must fit an int64_t: a larger (or NaN) time is malformed, not cast.
  constexpr double kMaxSeconds = 9.2e12;
  if (close == absl::string_view::npos ||
      !absl::SimpleAtod(absl::StripAsciiWhitespace(s.substr(0, close)), &seconds) ||
      !(seconds >= 0 && seconds <= kMaxSeconds)) {
    return absl::InvalidArgumentError(absl::StrCat("dmesg timestamp malformed: \"", line.substr(0, 80), "\""));
  }
  KmsgRecord r;
  r.timestamp_us = static_cast<int64_t>(seconds * 1e6 + 0.5);
  r.message = std::string(absl::StripLeadingAsciiWhitespace(s.substr(close + 1)));
  return r;
}

const char* XidClassName(XidClass c) {
  switch (c) {
    case XidClass::kMachineFatal: return "machine_fatal";
    case XidClass::kRecoverable: return "recoverable";
    case XidClass::kApplication: return "application";
  }
  return "unknown";
}

XidClass ClassifyXid(int xid) {
  switch (xid) {
    // The catalogue's immediate action is a GPU reset or a node reboot (or the GPU is gone):
    // the machine cannot run the job until repaired.
    case 46: case 48: case 62: case 64: case 74: case 79: case 95: case 119: case 120: case 140:
      return XidClass::kMachineFatal;
    case 13: case 31: case 43: case 45:
      return XidClass::kApplication;
    // 63 (row remapping recorded: applied at the next reset), 92 (high single-bit ECC
    // rate, corrected), 94 (contained ECC error: only the process that touched the memory
    // is killed, the page is offlined, the GPU stays usable), and the rest.
    default:
      return XidClass::kRecoverable;
  }
}

XidClass ClassifyXidEvent(const XidEvent& event) {
  if (event.xid == 154) {  // "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    const size_t to = event.detail.rfind(" to ");
    const absl::string_view action = to == std::string::npos ? absl::string_view(event.detail)
                                                             : absl::string_view(event.detail).substr(to);
    if (absl::StrContains(action, "Reset Required") || absl::StrContains(action, "Reboot Required") ||
        absl::StrContains(action, "Drain")) {
      return XidClass::kMachineFatal;
    }
    return XidClass::kRecoverable;
  }
  return ClassifyXid(event.xid);
}

const char* XidDescription(int xid) {
  switch (xid) {
    case 13: return "graphics engine exception";
    case 31: return "GPU memory page fault";
    case 43: return "GPU stopped processing (channel reset)";
    case 46: return "GPU stopped processing";
    case 45: return "preemptive cleanup after a previous error";
    case 48: return "double-bit ECC error";
    case 62: return "internal micro-controller halt";
    case 63: return "ECC page retirement or row remapping recorded";
    case 64: return "ECC page retirement or row remapping failure";
    case 74: return "NVLink error";
    case 79: return "GPU has fallen off the bus";
    case 92: return "high single-bit ECC error rate";
    case 94: return "contained ECC error";
    case 95: return "uncontained ECC error";
    case 119: return "GSP RPC timeout";
    case 120: return "GSP error";
    case 140: return "unrecovered ECC error";
    case 154: return "GPU recovery action changed";
    default: return "";
  }
}

absl::StatusOr<std::optional<XidEvent>> ParseXid(absl::string_view message) {
  const size_t start = message.find("NVRM: Xid (");
  if (start == absl::string_view::npos) return std::optional<XidEvent>();
  absl::string_view s = message.substr(start + 11);
  const size_t close = s.find("): ");
  if (close == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("Xid line without \"(<pci>): \": \"", message.substr(0, 120), "\""));
  }
  XidEvent e;
  // "PCI:0000:3b:00" (older drivers print "0000:3b:00"); anything else names no device.
  if (NormalizePciBusId(s.substr(0, close))) e.pci = std::string(s.substr(0, close));
  s.remove_prefix(close + 3);
  const size_t comma = s.find(',');
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(s.substr(0, comma)), &e.xid) || e.xid <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Xid number malformed: \"", message.substr(0, 120), "\""));
  }
  s = comma == absl::string_view::npos ? absl::string_view() : s.substr(comma + 1);
  // Optional "pid=1234," and "name=python3," before the detail.
  while (true) {
    absl::string_view t = absl::StripLeadingAsciiWhitespace(s);
    const size_t next = t.find(',');
    absl::string_view field = t.substr(0, next);
    if (absl::ConsumePrefix(&field, "pid=")) {
      int pid = 0;
      if (absl::SimpleAtoi(field, &pid)) e.pid = pid;  // "pid='<unknown>'" stays empty
    } else if (absl::ConsumePrefix(&field, "name=")) {
      e.process_name = std::string(field);
    } else {
      s = t;
      break;
    }
    s = next == absl::string_view::npos ? absl::string_view() : t.substr(next + 1);
  }
  e.detail = std::string(absl::StripAsciiWhitespace(s));
  return std::optional<XidEvent>(std::move(e));
}

std::optional<std::string> ParseBlockIoError(absl::string_view message) {
  for (absl::string_view key : {"I/O error, dev ", "I/O error on dev ", "EXT4-fs error (device ",
                                "XFS (", "critical medium error, dev "}) {
    const size_t pos = message.find(key);
    if (pos == absl::string_view::npos) continue;
    if (key == "XFS (" && !absl::StrContains(message, "error")) continue;
    absl::string_view dev = message.substr(pos + key.size());
    dev = dev.substr(0, dev.find_first_of(",): "));
    if (!dev.empty()) return std::string(dev);
  }
  return std::nullopt;
}

// ------------------------------------------------------------------------- inspection

KernelLogInspection::KernelLogInspection(KernelLogOptions options, CommandRunner runner)
    : options_(std::move(options)), runner_(std::move(runner)) {}

// An Xid counts when it names one of this pod's GPUs. It also counts, conservatively,
// when the line names no device or this pod's GPUs are unknown (no nvidia-smi): the note
// says why, and ends up in the result's summary.
bool KernelLogInspection::CountsAgainstMachine(const std::string& pci, std::string* note) {
  const std::optional<std::string> id = NormalizePciBusId(pci);
  if (!id) {
    *note = "the Xid line names no GPU: counted against this machine";
    return true;
  }
  LearnOwnGpus();
  if (!own_gpus_) {
    *note = absl::StrCat("this pod's GPUs are unknown (", own_gpus_error_, "): counted against this machine");
    return true;
  }
  return std::find(own_gpus_->begin(), own_gpus_->end(), *id) != own_gpus_->end();
}

void KernelLogInspection::LearnOwnGpus() {
  if (own_gpus_tried_) return;
  own_gpus_tried_ = true;
  if (options_.gpu_bus_ids) {
    std::vector<std::string> ids;
    for (const std::string& raw : *options_.gpu_bus_ids) {
      if (std::optional<std::string> id = NormalizePciBusId(raw)) ids.push_back(*id);
    }
    own_gpus_ = std::move(ids);
    return;
  }
  if (options_.nvidia_smi.empty()) {
    own_gpus_error_ = "no nvidia-smi configured";
    return;
  }
  absl::StatusOr<CommandResult> out =
      runner_({options_.nvidia_smi, "--query-gpu=pci.bus_id", "--format=csv,noheader"}, options_.command_timeout);
  if (!out.ok()) {
    own_gpus_error_ = absl::StrCat("nvidia-smi: ", out.status().message());
    return;
  }
  if (out->exit_code != 0) {
    own_gpus_error_ = absl::StrCat("nvidia-smi exited ", out->exit_code, ": ",
                                   absl::StripAsciiWhitespace(out->stderr_text.substr(0, 200)));
    return;
  }
  absl::StatusOr<std::vector<std::string>> ids = ParseGpuBusIds(out->stdout_text);
  if (!ids.ok()) {
    own_gpus_error_ = std::string(ids.status().message());
    return;
  }
  if (ids->empty()) {
    own_gpus_error_ = "nvidia-smi lists no GPU";
    return;
  }
  own_gpus_ = *std::move(ids);
}

KernelLogInspection::~KernelLogInspection() {
  if (fd_ >= 0) close(fd_);
}

namespace {
struct ReadOutcome {
  std::vector<KmsgRecord> records;
  std::string first_error;
  int bad = 0;
};
}  // namespace

std::vector<InspectionResult> KernelLogInspection::Run(absl::Time now) {
  ReadOutcome in;
  auto add_error = [&in](const absl::Status& s) {
    ++in.bad;
    if (in.first_error.empty()) in.first_error = std::string(s.message());
  };
  if (fd_ < 0 && !use_dmesg_) {
    fd_ = open(options_.kmsg_path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) {
      open_error_ = absl::StrCat(options_.kmsg_path, ": ", std::strerror(errno));
      use_dmesg_ = !options_.dmesg.empty();
    } else {
      struct stat st;
      is_char_device_ = fstat(fd_, &st) == 0 && S_ISCHR(st.st_mode);
    }
  }
  std::string read_error;
  // Set when the kernel log cannot be opened at all and the dmesg fallback cannot read it
  // either (a pod without CAP_SYSLOG, or with no /dev/kmsg): the inspection cannot see.
  std::string cannot_see;
  if (fd_ >= 0 && is_char_device_) {
    // One record per read(); EAGAIN: caught up; EPIPE: records were overwritten.
    char buf[16384];
    while (in.records.size() < options_.max_records_per_run) {
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EPIPE) {
          ++lost_records_;
          continue;
        }
        if (errno != EAGAIN) read_error = absl::StrCat(options_.kmsg_path, ": ", std::strerror(errno));
        break;
      }
      if (n == 0) break;
      absl::string_view record(buf, static_cast<size_t>(n));
      absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(record.substr(0, record.find('\n')));
      if (r.ok()) {
        in.records.push_back(*std::move(r));
      } else {
        add_error(r.status());
      }
    }
  } else if (fd_ >= 0) {
    // A regular file holding kmsg-format lines (tests, or a saved log): read what was
    // appended since the last run.
    char buf[16384];
    while (true) {
      const ssize_t n = read(fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        read_error = absl::StrCat(options_.kmsg_path, ": ", std::strerror(errno));
        break;
      }
      if (n == 0) break;
      partial_line_.append(buf, static_cast<size_t>(n));
    }
    size_t start = 0, nl;
    while ((nl = partial_line_.find('\n', start)) != std::string::npos) {
      absl::string_view line(partial_line_.data() + start, nl - start);
      start = nl + 1;
      if (line.empty() || line.front() == ' ') continue;  // continuation (dictionary) line
      absl::StatusOr<KmsgRecord> r = ParseKmsgRecord(line);
      if (r.ok()) {
        in.records.push_back(*std::move(r));
      } else {
        add_error(r.status());
      }
    }
    partial_line_.erase(0, start);
  } else if (use_dmesg_) {
    absl::StatusOr<CommandResult> out = runner_({options_.dmesg}, options_.command_timeout);
    if (!out.ok() || out->exit_code != 0) {
      cannot_see = absl::StrCat(open_error_, "; dmesg: ",
                                out.ok() ? absl::StrCat("exit ", out->exit_code, " ",
                                                        absl::StripAsciiWhitespace(out->stderr_text))
                                         : std::string(out.status().message()));
    } else {
      int64_t newest = last_dmesg_us_;
      for (absl::string_view line : absl::StrSplit(out->stdout_text, '\n', absl::SkipEmpty())) {
        absl::StatusOr<KmsgRecord> r = ParseDmesgLine(line);
        if (!r.ok()) {
          if (line.front() != ' ') add_error(r.status());
          continue;
        }
        if (r->timestamp_us <= last_dmesg_us_) continue;
        newest = std::max(newest, r->timestamp_us);
        in.records.push_back(*std::move(r));
      }
      last_dmesg_us_ = newest;
    }
  } else {
    cannot_see = open_error_;
  }

  std::map<std::string, std::vector<XidEvent>> this_run;  // non-fatal, by PCI id
  for (const KmsgRecord& r : in.records) {
    if (r.timestamp_us < options_.ignore_before_us) continue;  // logged before this agent
    absl::StatusOr<std::optional<XidEvent>> xid = ParseXid(r.message);
    if (!xid.ok()) {
      add_error(xid.status());
    } else if (xid->has_value()) {
      XidEvent& e = **xid;
      std::string note;
      if (!CountsAgainstMachine(e.pci, &note)) {
        ++other_gpu_xids_;
        continue;
      }
      if (e.pci.empty()) e.pci = "unknown-gpu";
      if (!note.empty()) e.detail = absl::StrCat(e.detail, e.detail.empty() ? "" : " ", "[", note, "]");
      if (ClassifyXidEvent(e) == XidClass::kMachineFatal) {
        fatal_[e.pci] = e;
      } else {
        auto& events = this_run[e.pci];
        if (events.size() < 16) events.push_back(std::move(e));
      }
    }
    if (std::optional<std::string> dev = ParseBlockIoError(r.message)) ++io_errors_[*dev];
  }

  std::vector<InspectionResult> results;
  auto base = [&](const char* kind, std::string component) {
    InspectionResult res;
    res.kind = kind;
    res.component = std::move(component);
    res.observed_at = now;
    return res;
  };
  for (const auto& [pci, e] : fatal_) {
    InspectionResult res = base("xid", pci);
    res.status = InspectionOutcome::kFault;
    res.machine_attributed = true;
    res.summary = absl::StrFormat("Xid %d (%s, machine-fatal): %s", e.xid, XidDescription(e.xid),
                                  e.detail);
    res.details["xid"] = absl::StrCat(e.xid);
    res.details["class"] = XidClassName(XidClass::kMachineFatal);
    if (e.pid) res.details["pid"] = absl::StrCat(*e.pid);
    if (!e.process_name.empty()) res.details["process"] = e.process_name;
    results.push_back(std::move(res));
  }
  for (const auto& [pci, events] : this_run) {
    if (fatal_.count(pci) > 0) continue;
    InspectionResult res = base("xid", pci);
    res.status = InspectionOutcome::kWarning;
    std::vector<std::string> parts;
    bool application = true;
    for (const XidEvent& e : events) {
      const XidClass c = ClassifyXidEvent(e);
      application &= c == XidClass::kApplication;
      parts.push_back(absl::StrFormat("Xid %d (%s)", e.xid, XidClassName(c)));
    }
    res.summary = absl::StrJoin(parts, ", ");
    res.details["xid"] = absl::StrCat(events.back().xid);
    res.details["class"] = application ? XidClassName(XidClass::kApplication)
                                       : XidClassName(XidClass::kRecoverable);
    if (events.back().pid) res.details["pid"] = absl::StrCat(*events.back().pid);
    results.push_back(std::move(res));
  }
  for (const auto& [dev, count] : io_errors_) {
    InspectionResult res = base("host", absl::StrCat("/dev/", dev));
    res.status = InspectionOutcome::kFault;
    res.machine_attributed = true;
    res.summary = absl::StrFormat("%d block I/O error(s) on /dev/%s in the kernel log", count, dev);
    res.details["io_errors"] = absl::StrCat(count);
    results.push_back(std::move(res));
  }
  if (!cannot_see.empty()) {
    InspectionResult res = base("xid", "kernel-log");
    res.status = InspectionOutcome::kCannotSee;
    res.summary = absl::StrCat(
        "cannot see the kernel log from here (Xids and block I/O errors are not checked): ", cannot_see);
    res.details["reason"] = cannot_see;
    results.push_back(std::move(res));
  } else if (!read_error.empty()) {
    InspectionResult res = base("xid", "kernel-log");
    res.status = InspectionOutcome::kError;
    res.summary = absl::StrCat("cannot read the kernel log: ", read_error);
    results.push_back(std::move(res));
  } else if (in.bad > 0) {
    InspectionResult res = base("xid", "kernel-log");
    res.status = InspectionOutcome::kError;
    res.summary = absl::StrFormat("%d unparseable kernel-log record(s); first: %s", in.bad,
                                  in.first_error);
    results.push_back(std::move(res));
  } else if (results.empty()) {
    InspectionResult res = base("xid", "kernel-log");
    res.status = InspectionOutcome::kOk;
    res.summary = "no Xid or block I/O error";
    res.details["records_read"] = absl::StrCat(in.records.size());
    if (other_gpu_xids_ > 0) res.details["other_gpu_xids_skipped"] = absl::StrCat(other_gpu_xids_);
    if (lost_records_ > 0) res.details["records_lost"] = absl::StrCat(lost_records_);
    results.push_back(std::move(res));
  }
  return results;
}

}  // namespace peregrine
