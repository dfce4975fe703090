// Exit policy: what the exits of an attempt's training processes mean, by the user's rules
// (spec.faultTolerance.exitRules, ExitRule in job_spec.h).
//
// JudgeExits looks at the ranks that failed (a non-zero exit code or a signal) and returns
// the rule that decides, by precedence: any exit a FailJob rule covers fails the job; else
// any exit a RestartInPlace rule covers restarts in place; else any exit an Ignore rule
// covers restarts in place without counting as a recovery. The other exits (no rule
// covers them, usually peers that failed in their collectives after the first one) are
// consequences and only counted. No rule covering any exit: nullopt, the default triage
// decides (diagnosis, user-code errors, rollback).
//
// Also the names the spec, the CRD and the status use for actions and signals. Pure; no
// I/O. Thread-safe.
#ifndef PEREGRINE_CONTROLLER_CORE_EXIT_POLICY_H_
#define PEREGRINE_CONTROLLER_CORE_EXIT_POLICY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "controller/core/job_spec.h"
#include "controller/core/job_state.h"

namespace peregrine {

// "RestartInPlace", "FailJob", "Ignore".
const char* ExitActionName(ExitAction action);
std::optional<ExitAction> ParseExitAction(absl::string_view name);

// A signal by number ("9"), name ("SIGKILL") or short name ("KILL"); POSIX signals and
// SIGRTMIN+n / SIGRTMAX-n are named. nullopt when it is none of those or not in 1..64.
std::optional<int> ParseSignal(absl::string_view text);
// "SIGKILL" for 9; "signal 40" for a number without a name.
std::string SignalName(int signal);

// A failed exit of one rank, with where it ran.
struct FailedExit {
  std::string pod;
  RankExit exit;
};

struct ExitJudgement {
  ExitAction action = ExitAction::kRestartInPlace;
  int rule = 0;             // index in exitRules of the rule that decided
  std::string exit;         // the first exit it covers: "pod p: rank 3 exited with code 42"
  int covered = 0;          // failed exits that rule covers
  int other = 0;            // failed exits it does not (other rules' or none)
};

// The index of the rule covering `exit` (code first, then signal), or nullopt.
std::optional<int> RuleCovering(const std::vector<ExitRule>& rules, const RankExit& exit);

// See the file comment. `exits` holds only failed exits, in report order.
std::optional<ExitJudgement> JudgeExits(const std::vector<ExitRule>& rules, const std::vector<FailedExit>& exits);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_CORE_EXIT_POLICY_H_
