#include "controller/core/exit_policy.h"

#include <array>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace peregrine {
namespace {

// Linux's numbering (x86, arm64), the platforms the agent runs on.
constexpr std::array<std::pair<const char*, int>, 31> kSignals = {{
    {"HUP", 1},   {"INT", 2},     {"QUIT", 3},  {"ILL", 4},    {"TRAP", 5},   {"ABRT", 6},   {"BUS", 7},
    {"FPE", 8},   {"KILL", 9},    {"USR1", 10}, {"SEGV", 11},  {"USR2", 12},  {"PIPE", 13},  {"ALRM", 14},
    {"TERM", 15}, {"STKFLT", 16}, {"CHLD", 17}, {"CONT", 18},  {"STOP", 19},  {"TSTP", 20},  {"TTIN", 21},
    {"TTOU", 22}, {"URG", 23},    {"XCPU", 24}, {"XFSZ", 25},  {"VTALRM", 26}, {"PROF", 27}, {"WINCH", 28},
    {"IO", 29},   {"PWR", 30},    {"SYS", 31},
}};
constexpr int kRtMin = 34;
constexpr int kRtMax = 64;

std::string ExitDescription(const FailedExit& e) {
  return e.exit.signal != 0
             ? absl::StrFormat("pod %s: rank %d killed by %s", e.pod, e.exit.global_rank, SignalName(e.exit.signal))
             : absl::StrFormat("pod %s: rank %d exited with code %d", e.pod, e.exit.global_rank, e.exit.exit_code);
}

}  // namespace

const char* ExitActionName(ExitAction action) {
  switch (action) {
    case ExitAction::kRestartInPlace:
      return "RestartInPlace";
    case ExitAction::kFailJob:
      return "FailJob";
    case ExitAction::kIgnore:
      return "Ignore";
  }
  return "RestartInPlace";
}

std::optional<ExitAction> ParseExitAction(absl::string_view name) {
  for (ExitAction a : {ExitAction::kRestartInPlace, ExitAction::kFailJob, ExitAction::kIgnore}) {
    if (name == ExitActionName(a)) return a;
  }
  return std::nullopt;
}

std::optional<int> ParseSignal(absl::string_view text) {
  int number = 0;
  if (absl::SimpleAtoi(text, &number)) {
    if (number < 1 || number > kRtMax) return std::nullopt;
    return number;
  }
  std::string name = absl::AsciiStrToUpper(text);
  if (absl::StartsWith(name, "SIG")) name = name.substr(3);
  for (const auto& [n, v] : kSignals) {
    if (name == n) return v;
  }
  // RTMIN, RTMIN+n, RTMAX, RTMAX-n.
  if (absl::StartsWith(name, "RTMIN") || absl::StartsWith(name, "RTMAX")) {
    const bool from_min = name[4] == 'N';
    const absl::string_view rest = absl::string_view(name).substr(5);
    if (rest.empty()) return from_min ? kRtMin : kRtMax;
    int offset = 0;
    if (rest[0] != (from_min ? '+' : '-') || !absl::ascii_isdigit(rest.back()) ||
        !absl::SimpleAtoi(rest.substr(1), &offset) || offset < 0) {
      return std::nullopt;
    }
    const int signal = from_min ? kRtMin + offset : kRtMax - offset;
    if (signal < kRtMin || signal > kRtMax) return std::nullopt;
    return signal;
  }
  return std::nullopt;
}

std::string SignalName(int signal) {
  for (const auto& [n, v] : kSignals) {
    if (v == signal) return absl::StrCat("SIG", n);
  }
  if (signal == kRtMin) return "SIGRTMIN";
  if (signal > kRtMin && signal < kRtMax) return absl::StrFormat("SIGRTMIN+%d", signal - kRtMin);
  if (signal == kRtMax) return "SIGRTMAX";
  return absl::StrFormat("signal %d", signal);
}

std::optional<int> RuleCovering(const std::vector<ExitRule>& rules, const RankExit& exit) {
  for (size_t i = 0; i < rules.size(); ++i) {
    if (exit.signal != 0) {
      for (int s : rules[i].signals) {
        if (s == exit.signal) return static_cast<int>(i);
      }
    } else if (exit.exit_code != 0) {
      for (const ExitCodeRange& r : rules[i].exit_codes) {
        if (exit.exit_code >= r.first && exit.exit_code <= r.last) return static_cast<int>(i);
      }
    }
  }
  return std::nullopt;
}

std::optional<ExitJudgement> JudgeExits(const std::vector<ExitRule>& rules, const std::vector<FailedExit>& exits) {
  if (rules.empty()) return std::nullopt;
  // The deciding action by precedence, then the first exit (in report order) it covers.
  std::optional<ExitJudgement> best;
  auto rank = [](ExitAction a) { return a == ExitAction::kFailJob ? 0 : a == ExitAction::kRestartInPlace ? 1 : 2; };
  std::vector<std::optional<int>> covering;
  covering.reserve(exits.size());
  for (const FailedExit& e : exits) {
    covering.push_back(RuleCovering(rules, e.exit));
    if (!covering.back()) continue;
    const ExitAction a = rules[*covering.back()].action;
    if (!best || rank(a) < rank(best->action)) {
      best = ExitJudgement{a, *covering.back(), ExitDescription(e), 0, 0};
    }
  }
  if (!best) return std::nullopt;
  for (const std::optional<int>& c : covering) {
    if (c && *c == best->rule) {
      ++best->covered;
    } else {
      ++best->other;
    }
  }
  return best;
}

}  // namespace peregrine
