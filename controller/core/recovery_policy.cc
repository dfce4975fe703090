#include "controller/core/recovery_policy.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace peregrine {
namespace {

std::string Describe(const InspectionObservation& o) {
  return absl::StrCat(o.kind, "/", o.component, ": ", o.summary);
}

bool IsMachineFault(const InspectionObservation& o) { return o.machine_attributed && o.status == InspectionStatus::kFault; }

}  // namespace

std::optional<std::string> MachineAttributedFault(const AgentObservation& agent) {
  for (const InspectionObservation& o : agent.alarms) {
    if (IsMachineFault(o)) return Describe(o);
  }
  for (const InspectionObservation& o : agent.inspections) {
    if (IsMachineFault(o)) return Describe(o);
  }
  return std::nullopt;
}

bool IsNetworkAlarm(const InspectionObservation& alarm) {
  return (alarm.kind == "network" || alarm.kind == "rdma") && (alarm.status == InspectionStatus::kWarning || alarm.status == InspectionStatus::kFault);
}

int RecordNetworkAlarms(const std::string& machine_id, const AgentObservation& agent, size_t max_records,
                        std::vector<NetworkAlarmRecord>* history) {
  int added = 0;
  for (const InspectionObservation& a : agent.alarms) {
    if (!IsNetworkAlarm(a)) continue;
    const bool known = std::any_of(history->begin(), history->end(), [&](const NetworkAlarmRecord& r) {
      return r.machine_id == machine_id && r.at == a.at;
    });
    if (known) continue;
    history->push_back(NetworkAlarmRecord{machine_id, a.at, Describe(a)});
    ++added;
  }
  std::stable_sort(history->begin(), history->end(),
                   [](const NetworkAlarmRecord& x, const NetworkAlarmRecord& y) { return x.at < y.at; });
  if (history->size() > max_records) {
    history->erase(history->begin(), history->begin() + static_cast<long>(history->size() - max_records));
  }
  return added;
}

int NetworkAlarmsWithin(const std::vector<NetworkAlarmRecord>& history, const std::string& machine_id, int64_t now,
                        int64_t window_ns) {
  int n = 0;
  for (const NetworkAlarmRecord& r : history) {
    if (r.machine_id == machine_id && r.at > now - window_ns) ++n;
  }
  return n;
}

namespace {

// Deterministic errors of the user's code (IndentationError and TabError are
// SyntaxErrors, UnboundLocalError a NameError).
constexpr absl::string_view kUserCodeErrors[] = {
    "TypeError",   "IndexError",       "AttributeError", "ImportError", "ModuleNotFoundError", "SyntaxError",
    "IndentationError", "TabError",    "NameError",      "UnboundLocalError", "KeyError",     "ValueError"};

// Launchers that wrap a rank's failure in their own exception (torchrun); the rank's own
// error, printed before, is the cause.
constexpr absl::string_view kLauncherWrappers[] = {"ChildFailedError"};

// Drops the "[rank3]: " / "[default0]:" prefix torchrun puts before a rank's lines.
absl::string_view StripRankPrefix(absl::string_view line) {
  if (line.empty() || line.front() != '[') return line;
  const size_t close = line.find("]:");
  if (close == absl::string_view::npos || close > 32) return line;
  size_t i = 1;
  while (i < close && absl::ascii_isalpha(static_cast<unsigned char>(line[i]))) ++i;
  const size_t digits_from = i;
  while (i < close && absl::ascii_isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i != close || digits_from == close) return line;
  line.remove_prefix(close + 2);
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  return line;
}

// A traceback frame: File "path", line N[, in function].
bool IsFrameLine(absl::string_view stripped) {
  return absl::StartsWith(stripped, "File \"") && absl::StrContains(stripped, "\", line ");
}

// The exception's class name (last component of "pkg.mod.Name: message" or "Name"), or
// "" when the line is not of that form.
absl::string_view ExceptionName(absl::string_view stripped) {
  absl::string_view name = stripped.substr(0, stripped.find(':'));
  if (name.empty()) return "";
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.') return "";
  }
  if (const size_t dot = name.rfind('.'); dot != absl::string_view::npos) name = name.substr(dot + 1);
  if (name.empty() || !absl::ascii_isupper(static_cast<unsigned char>(name.front()))) return "";
  return name;
}

}  // namespace

std::optional<std::string> UserCodeError(const std::vector<std::string>& last_log_lines) {
  // Every traceback in the tail ends at its first unindented line after the header or a
  // frame line; that line names the exception. The header may be missing: a SyntaxError
  // in the main script has none, and a deep traceback's header falls out of the tail.
  bool in_traceback = false;
  std::vector<absl::string_view> exceptions;
  for (const std::string& raw : last_log_lines) {
    const absl::string_view line = StripRankPrefix(raw);
    const absl::string_view stripped = absl::StripAsciiWhitespace(line);
    if (stripped.empty()) continue;
    if (absl::StartsWith(stripped, "Traceback (most recent call last):")) {
      in_traceback = true;
      continue;
    }
    if (line.front() == ' ' || line.front() == '\t') {
      if (IsFrameLine(stripped)) in_traceback = true;
      continue;
    }
    if (!in_traceback) continue;
    in_traceback = false;
    if (!ExceptionName(stripped).empty()) exceptions.push_back(stripped);
  }
  // The last exception decides (a chain ends with the one that killed the process); a
  // launcher's wrapper defers to the rank's error before it.
  for (auto it = exceptions.rbegin(); it != exceptions.rend(); ++it) {
    const absl::string_view name = ExceptionName(*it);
    if (std::find(std::begin(kLauncherWrappers), std::end(kLauncherWrappers), name) != std::end(kLauncherWrappers)) {
      continue;
    }
    if (std::find(std::begin(kUserCodeErrors), std::end(kUserCodeErrors), name) != std::end(kUserCodeErrors)) {
      return std::string(*it);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<CodeVersionSpec> RollbackTarget(const std::vector<VersionRecord>& history) {
  if (history.size() < 2) return std::nullopt;
  const CodeVersionSpec& current = history.back().code;
  for (size_t i = history.size() - 1; i-- > 0;) {
    if (history[i].outcome == VersionOutcome::kHealthy && !(history[i].code == current)) return history[i].code;
  }
  for (size_t i = history.size() - 1; i-- > 0;) {
    if (history[i].code == current) continue;
    if (history[i].outcome == VersionOutcome::kRolledBack || history[i].outcome == VersionOutcome::kFailed) continue;
    return history[i].code;
  }
  return std::nullopt;
}

bool WasRejected(const std::vector<VersionRecord>& history, const CodeVersionSpec& code) {
  return std::any_of(history.begin(), history.end(), [&](const VersionRecord& r) {
    return r.code == code && (r.outcome == VersionOutcome::kRolledBack || r.outcome == VersionOutcome::kFailed);
  });
}

}  // namespace peregrine
