// spec.faultTolerance.exitRules from a TrainingJob's YAML/JSON: a list of
//   {action: RestartInPlace | FailJob | Ignore,
//    exitCodes: [42, "3-5", ...],          # non-zero exit codes 1..255, single or "A-B"
//    signals: [9, "SIGTERM", "USR1", ...]} # by number (1..64) or name
// Each rule needs an action and at least one exit code or signal; no exit code or signal
// may be in two rules (a rule's own duplicates too). Errors are kInvalidArgument and name
// the field path ("spec.faultTolerance.exitRules[1].exitCodes[0]: 3-5 overlaps
// spec.faultTolerance.exitRules[0].exitCodes[2] (4)"). Pure; thread-safe.
#ifndef PEREGRINE_CONTROLLER_EXIT_RULES_PARSER_H_
#define PEREGRINE_CONTROLLER_EXIT_RULES_PARSER_H_

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "controller/core/job_spec.h"

namespace peregrine {

// Parses `node` (the exitRules list at `path`) into `*out`.
absl::Status ParseExitRules(const YAML::Node& node, const std::string& path, std::vector<ExitRule>* out);

}  // namespace peregrine

#endif  // PEREGRINE_CONTROLLER_EXIT_RULES_PARSER_H_
