#include "controller/exit_rules_parser.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "controller/core/exit_policy.h"

namespace peregrine {
namespace {

constexpr size_t kMaxRules = 32;
constexpr size_t kMaxEntries = 64;

absl::Status FieldError(const std::string& path, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", reason));
}

std::optional<int> ExitCode(absl::string_view text) {
  int v = 0;
  if (text.empty() || !absl::ascii_isdigit(text.front()) || !absl::SimpleAtoi(text, &v) || v < 1 || v > 255) {
    return std::nullopt;
  }
  return v;
}

absl::Status ParseCodes(const YAML::Node& list, const std::string& path, std::vector<ExitCodeRange>* out) {
  if (!list.IsSequence()) return FieldError(path, "expected a list of exit codes (42 or \"3-5\")");
  if (list.size() > kMaxEntries) return FieldError(path, absl::StrCat("at most ", kMaxEntries, " entries"));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = absl::StrCat(path, "[", i, "]");
    if (!list[i].IsScalar()) return FieldError(field, "expected an exit code (42) or a range (\"3-5\")");
    const std::string text = list[i].Scalar();
    const std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits('-', 1));
    const std::optional<int> first = ExitCode(parts[0]);
    const std::optional<int> last = parts.size() == 2 ? ExitCode(parts[1]) : first;
    if (!first || !last) {
      return FieldError(field, absl::StrCat("'", text, "' is not an exit code in 1..255 or a range A-B of them "
                                                       "(0 is success, never a failure)"));
    }
    if (*last < *first) return FieldError(field, absl::StrCat("range '", text, "' ends before it starts"));
    out->push_back(ExitCodeRange{*first, *last});
  }
  return absl::OkStatus();
}

absl::Status ParseSignals(const YAML::Node& list, const std::string& path, std::vector<int>* out) {
  if (!list.IsSequence()) return FieldError(path, "expected a list of signals (9, \"SIGKILL\" or \"KILL\")");
  if (list.size() > kMaxEntries) return FieldError(path, absl::StrCat("at most ", kMaxEntries, " entries"));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = absl::StrCat(path, "[", i, "]");
    if (!list[i].IsScalar()) return FieldError(field, "expected a signal (9, \"SIGKILL\" or \"KILL\")");
    const std::optional<int> signal = ParseSignal(list[i].Scalar());
    if (!signal) return FieldError(field, absl::StrCat("'", list[i].Scalar(), "' is not a signal number in 1..64 or a signal name"));
    out->push_back(*signal);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseExitRules(const YAML::Node& node, const std::string& path, std::vector<ExitRule>* out) {
  out->clear();
  if (!node.IsSequence()) return FieldError(path, "expected a list of rules");
  if (node.size() > kMaxRules) return FieldError(path, absl::StrCat("at most ", kMaxRules, " rules"));
  // Where each exit code and signal was claimed, for the overlap error.
  std::map<int, std::string> code_owner, signal_owner;
  for (size_t r = 0; r < node.size(); ++r) {
    const YAML::Node rule = node[r];
    const std::string rp = absl::StrCat(path, "[", r, "]");
    if (!rule.IsMap()) return FieldError(rp, "expected an object {action, exitCodes, signals}");
    for (const auto& kv : rule) {
      const std::string key = kv.first.as<std::string>();
      if (key != "action" && key != "exitCodes" && key != "signals") {
        return FieldError(absl::StrCat(rp, ".", key), "unknown field (known: action, exitCodes, signals)");
      }
    }
    ExitRule parsed;
    if (!rule["action"]) return FieldError(rp + ".action", "required (RestartInPlace, FailJob or Ignore)");
    const std::optional<ExitAction> action =
        rule["action"].IsScalar() ? ParseExitAction(rule["action"].Scalar()) : std::nullopt;
    if (!action) {
      return FieldError(rp + ".action",
                        absl::StrCat("unknown action '", rule["action"].IsScalar() ? rule["action"].Scalar() : "",
                                     "' (expected RestartInPlace, FailJob or Ignore)"));
    }
    parsed.action = *action;
    if (rule["exitCodes"]) {
      if (auto s = ParseCodes(rule["exitCodes"], rp + ".exitCodes", &parsed.exit_codes); !s.ok()) return s;
    }
    if (rule["signals"]) {
      if (auto s = ParseSignals(rule["signals"], rp + ".signals", &parsed.signals); !s.ok()) return s;
    }
    if (parsed.exit_codes.empty() && parsed.signals.empty()) {
      return FieldError(rp, "needs at least one of exitCodes and signals");
    }
    for (size_t i = 0; i < parsed.exit_codes.size(); ++i) {
      const std::string field = absl::StrCat(rp, ".exitCodes[", i, "]");
      for (int c = parsed.exit_codes[i].first; c <= parsed.exit_codes[i].last; ++c) {
        auto [it, inserted] = code_owner.emplace(c, field);
        if (!inserted) {
          return FieldError(field, absl::StrCat("exit code ", c, " is already covered by ", it->second,
                                                "; each exit code may be in one rule only"));
        }
      }
    }
    for (size_t i = 0; i < parsed.signals.size(); ++i) {
      const std::string field = absl::StrCat(rp, ".signals[", i, "]");
      auto [it, inserted] = signal_owner.emplace(parsed.signals[i], field);
      if (!inserted) {
        return FieldError(field, absl::StrCat(SignalName(parsed.signals[i]), " is already covered by ", it->second,
                                              "; each signal may be in one rule only"));
      }
    }
    out->push_back(std::move(parsed));
  }
  return absl::OkStatus();
}

}  // namespace peregrine
