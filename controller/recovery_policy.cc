#include "controller/recovery_policy.h"

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

bool IsMachineFault(const InspectionObservation& o) { return o.machine_attributed && o.status == "FAULT"; }

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
  return (alarm.kind == "network" || alarm.kind == "rdma") && (alarm.status == "WARNING" || alarm.status == "FAULT");
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

std::optional<std::string> UserCodeError(const std::vector<std::string>& last_log_lines) {
  static constexpr absl::string_view kErrors[] = {"TypeError",   "IndexError",          "AttributeError",
                                                  "ImportError", "ModuleNotFoundError", "SyntaxError",
                                                  "NameError",   "KeyError",            "ValueError"};
  bool in_traceback = false;
  std::optional<std::string> found;
  for (const std::string& raw : last_log_lines) {
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (absl::StartsWith(line, "Traceback (most recent call last):")) {
      in_traceback = true;
      found.reset();
      continue;
    }
    if (!in_traceback || raw.empty() || raw.front() == ' ' || raw.front() == '\t') continue;
    // The exception line: "<name>: message" or "<name>", name possibly module-qualified.
    absl::string_view name = line.substr(0, line.find(':'));
    if (name.find(' ') != absl::string_view::npos) continue;
    if (const size_t dot = name.rfind('.'); dot != absl::string_view::npos) name = name.substr(dot + 1);
    for (absl::string_view e : kErrors) {
      if (name == e) {
        found = std::string(line);
        break;
      }
    }
    in_traceback = false;  // a traceback ends at its first unindented line
  }
  return found;
}

std::optional<CodeVersionSpec> RollbackTarget(const std::vector<VersionRecord>& history) {
  if (history.size() < 2) return std::nullopt;
  const CodeVersionSpec& current = history.back().code;
  for (size_t i = history.size() - 1; i-- > 0;) {
    if (history[i].outcome == "Healthy" && !(history[i].code == current)) return history[i].code;
  }
  for (size_t i = history.size() - 1; i-- > 0;) {
    if (history[i].code == current) continue;
    if (history[i].outcome == "RolledBack" || history[i].outcome == "Failed") continue;
    return history[i].code;
  }
  return std::nullopt;
}

bool WasRejected(const std::vector<VersionRecord>& history, const CodeVersionSpec& code) {
  return std::any_of(history.begin(), history.end(), [&](const VersionRecord& r) {
    return r.code == code && (r.outcome == "RolledBack" || r.outcome == "Failed");
  });
}

}  // namespace peregrine
