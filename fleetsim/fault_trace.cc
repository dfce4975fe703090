// Fault trace parsing. Lines are split on '\n' (a trailing '\r' is dropped), fields on ','
// and trimmed of spaces and tabs. Numbers must match a plain decimal grammar
// ([+]digits[.digits][e[+-]digits], or .digits) before they are converted, so "inf", "nan",
// hex floats and trailing junk are refused with the field named. Quoted fields in error
// messages are cut to 40 bytes and their non-printable bytes escaped, so hostile input
// cannot flood or garble a log.
#include "fleetsim/fault_trace.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace peregrine::fleetsim {
namespace {

constexpr double kMaxSeconds = 100 * 365.25 * 86400;  // 100 years
constexpr double kMaxSeverity = 1000;
constexpr size_t kMaxErrors = 20;

absl::string_view Trim(absl::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Quote(absl::string_view s) {
  std::string out = "\"";
  const size_t n = std::min<size_t>(s.size(), 40);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (s.size() > n) out += "...";
  out += "\"";
  return out;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Plain decimal: [+-]? (digits [. digits?] | . digits) ([eE] [+-]? digits)?
bool IsDecimal(absl::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t int_digits = 0;
  while (i < s.size() && IsDigit(s[i])) ++i, ++int_digits;
  size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDigit(s[i])) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && IsDigit(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

// A number field, or the reason it is not one.
absl::StatusOr<double> ParseNumber(absl::string_view name, absl::string_view field) {
  if (field.empty()) return absl::InvalidArgumentError(absl::StrCat("missing ", name));
  double value = 0;
  if (!IsDecimal(field) || !absl::SimpleAtod(field, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", Quote(field), " is not a decimal number"));
  }
  return value;
}

std::optional<FaultKind> ParseKind(absl::string_view s) {
  if (s == "gpu") return FaultKind::kGpu;
  if (s == "memory") return FaultKind::kMemory;
  if (s == "nic") return FaultKind::kNic;
  if (s == "host") return FaultKind::kHost;
  if (s == "software") return FaultKind::kSoftware;
  if (s == "slow" || s == "slow-compute") return FaultKind::kSlowCompute;
  if (s == "slow-link") return FaultKind::kSlowLink;
  return std::nullopt;
}

// Index k written as digits only (no sign, at most 9 digits).
std::optional<int> ParseIndex(absl::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : s) {
    if (!IsDigit(c)) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

class NodeMap {
 public:
  static absl::StatusOr<NodeMap> Make(int machines, const FaultTraceOptions& options) {
    if (machines < 0) {
      return absl::InvalidArgumentError(absl::StrCat("fault trace: machines = ", machines,
                                                     " is negative"));
    }
    NodeMap map;
    map.machines_ = machines;
    if (options.node_names.empty()) return map;
    if (options.node_names.size() != static_cast<size_t>(machines)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fault trace: ", options.node_names.size(), " node names for ", machines,
          " machines (want one name a machine)"));
    }
    for (size_t i = 0; i < options.node_names.size(); ++i) {
      const std::string& name = options.node_names[i];
      if (name.empty() || Trim(name).size() != name.size() ||
          name.find(',') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "fault trace: node name ", i, " ", Quote(name),
            " is empty or holds a comma or surrounding spaces"));
      }
      if (!map.names_.emplace(name, static_cast<int>(i)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("fault trace: node name ", Quote(name), " is given twice"));
      }
    }
    return map;
  }

  absl::StatusOr<int> Find(absl::string_view node) const {
    if (node.empty()) return absl::InvalidArgumentError("missing node");
    if (!names_.empty()) {
      const auto it = names_.find(std::string(node));
      if (it != names_.end()) return it->second;
      return absl::InvalidArgumentError(
          absl::StrCat("unknown node ", Quote(node), " (not one of the job's ", machines_,
                       " machine names)"));
    }
    absl::string_view digits = node;
    if (!digits.empty() && digits.front() == 'm') digits.remove_prefix(1);
    const std::optional<int> index = ParseIndex(digits);
    if (index.has_value() && *index < machines_) return *index;
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown node ", Quote(node), " (want 0..", machines_ - 1, " or m0..m", machines_ - 1,
        ")"));
  }

 private:
  int machines_ = 0;
  std::unordered_map<std::string, int> names_;
};

// One data line (already trimmed, not blank, not a comment).
absl::StatusOr<FaultEvent> ParseLine(absl::string_view line, const NodeMap& nodes) {
  std::vector<absl::string_view> fields;
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    fields.push_back(Trim(line.substr(start, comma == absl::string_view::npos
                                                 ? absl::string_view::npos
                                                 : comma - start)));
    if (comma == absl::string_view::npos) break;
    start = comma + 1;
    if (fields.size() > 5) break;
  }
  if (fields.size() > 5) {
    return absl::InvalidArgumentError(
        "too many fields (want node,start_s,end_s,kind[,severity])");
  }
  if (fields.size() < 4) {
    static constexpr const char* kNames[] = {"node", "start_s", "end_s", "kind"};
    return absl::InvalidArgumentError(absl::StrCat(
        "missing field ", kNames[fields.size()], " (want node,start_s,end_s,kind[,severity])"));
  }
  absl::StatusOr<int> machine = nodes.Find(fields[0]);
  if (!machine.ok()) return machine.status();
  absl::StatusOr<double> start_s = ParseNumber("start_s", fields[1]);
  if (!start_s.ok()) return start_s.status();
  absl::StatusOr<double> end_s = ParseNumber("end_s", fields[2]);
  if (!end_s.ok()) return end_s.status();
  if (fields[3].empty()) return absl::InvalidArgumentError("missing kind");
  const std::optional<FaultKind> kind = ParseKind(fields[3]);
  if (!kind.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown kind ", Quote(fields[3]),
        " (want gpu, memory, nic, host, software, slow or slow-link)"));
  }
  if (*start_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative start_s ", *start_s));
  }
  if (*end_s < *start_s) {
    return absl::InvalidArgumentError(
        absl::StrCat("end_s ", *end_s, " is before start_s ", *start_s, " (negative duration)"));
  }
  if (*end_s > kMaxSeconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("end_s ", *end_s, " is beyond 100 years"));
  }
  FaultEvent event;
  event.machine = *machine;
  event.start_ns = static_cast<int64_t>(std::llround(*start_s * 1e9));
  event.end_ns = static_cast<int64_t>(std::llround(*end_s * 1e9));
  event.kind = *kind;
  const bool has_severity = fields.size() == 5 && !fields[4].empty();
  if (IsFailSlow(*kind)) {
    if (!has_severity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "missing severity (required for ", std::string(FaultKindName(*kind)), ": step-time growth > 0)"));
    }
    absl::StatusOr<double> severity = ParseNumber("severity", fields[4]);
    if (!severity.ok()) return severity.status();
    if (*severity <= 0 || *severity > kMaxSeverity) {
      return absl::InvalidArgumentError(absl::StrCat(
          "severity ", *severity, " is out of range (want > 0 and <= ", kMaxSeverity, ")"));
    }
    if (event.end_ns <= event.start_ns) {
      return absl::InvalidArgumentError(
          absl::StrCat("empty ", std::string(FaultKindName(*kind)), " episode (end_s == start_s)"));
    }
    event.severity = *severity;
  } else if (has_severity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "severity given for fail-stop kind ", std::string(FaultKindName(*kind)),
        " (only slow and slow-link take one)"));
  }
  return event;
}

// Reads the trace; with `strict`, stops at the first bad line and returns its error.
absl::StatusOr<FaultTraceRead> Read(std::string_view text, int machines,
                                    const FaultTraceOptions& options, bool strict) {
  absl::StatusOr<NodeMap> nodes = NodeMap::Make(machines, options);
  if (!nodes.ok()) return nodes.status();
  FaultTraceRead read;
  bool seen_data = false;
  int64_t line_number = 0;
  size_t pos = 0;
  const absl::string_view all(text.data(), text.size());
  while (pos < all.size()) {
    const size_t newline = all.find('\n', pos);
    absl::string_view line =
        all.substr(pos, newline == absl::string_view::npos ? absl::string_view::npos
                                                           : newline - pos);
    pos = newline == absl::string_view::npos ? all.size() : newline + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number == 1 && line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // BOM
    line = Trim(line);
    if (line.empty() || line.front() == '#') continue;
    if (!seen_data) {
      seen_data = true;
      const absl::string_view first = Trim(line.substr(0, line.find(',')));
      if (absl::AsciiStrToLower(first) == "node") continue;  // header
    }
    absl::StatusOr<FaultEvent> event = ParseLine(line, *nodes);
    if (event.ok()) {
      read.faults.push_back(*event);
      ++read.fault_lines;
      continue;
    }
    if (strict) {
      return absl::InvalidArgumentError(
          absl::StrCat("fault trace line ", line_number, ": ", event.status().message()));
    }
    ++read.skipped_lines;
    if (read.errors.size() < kMaxErrors) {
      read.errors.push_back(absl::StrCat("line ", line_number, ": ", event.status().message()));
    }
  }
  SortFaults(read.faults);
  return read;
}

}  // namespace

absl::StatusOr<FaultTraceRead> ReadFaultTrace(std::string_view text, int machines,
                                              const FaultTraceOptions& options) {
  return Read(text, machines, options, /*strict=*/false);
}

absl::StatusOr<std::vector<FaultEvent>> ParseFaultTrace(std::string_view text, int machines,
                                                        const FaultTraceOptions& options) {
  absl::StatusOr<FaultTraceRead> read = Read(text, machines, options, /*strict=*/true);
  if (!read.ok()) return read.status();
  return std::move(read->faults);
}

}  // namespace peregrine::fleetsim
