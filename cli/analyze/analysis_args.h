// The words after `peregrinectl analyze`, and the flag table through which each analysis
// (steps, nccl, stacks) takes its flags, so that every analysis checks its operand and
// flags, and words its usage errors, the same way.
//
// ApplyAnalysisArgs writes its messages to the stream it is given; nothing else does I/O.
// Thread-compatible; a FlagTable's setters write through the pointers they were made with,
// which must outlive it.
#ifndef PEREGRINE_CLI_ANALYZE_ANALYSIS_ARGS_H_
#define PEREGRINE_CLI_ANALYZE_ANALYSIS_ARGS_H_

#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace peregrine {

struct AnalyzeArgs {
  std::string command;                       // the first operand: steps, nccl, stacks, help
  std::vector<std::string> operands;         // the other words that are not flags
  std::map<std::string, std::string> flags;  // --name VALUE or --name=VALUE, by name
  bool json = false;                         // --json
  bool help = false;                         // --help or -h
};

// Splits `words` into `*args`. Returns the problem ("--rank: needs a value") when the last
// word is a flag that needs a value, else nullopt.
std::optional<std::string> ParseAnalyzeArgs(const std::vector<std::string>& words, AnalyzeArgs* args);

// Takes one flag's value: nullopt when accepted (and stored), else the problem, which names
// the flag ("--verify: not a number: x").
using FlagSetter = std::function<std::optional<std::string>(const std::string& flag, const std::string& value)>;
// An analysis' flags by name (without the leading "--").
using FlagTable = std::map<std::string, FlagSetter>;

// A number, stored in *target; else "--<flag>: not a number: <value>".
FlagSetter NumberFlag(double* target);
// An integer of at least `min`, stored in *target; else "--<flag>: not a <what>: <value>".
FlagSetter IntegerFlag(int* target, int min, std::string what);
FlagSetter IntegerFlag(std::optional<int>* target, int min, std::string what);
// One of `names`, whose index is passed to `choose`; else
// "--<flag> must be a, b or c, got '<value>'". The template stores the value of the chosen
// (name, value) pair in *target.
FlagSetter ChoiceFlag(std::vector<std::string> names, std::function<void(size_t index)> choose);
template <typename T>
FlagSetter ChoiceFlag(T* target, std::vector<std::pair<std::string, T>> choices) {
  std::vector<std::string> names;
  for (const auto& choice : choices) names.push_back(choice.first);
  return ChoiceFlag(std::move(names), [target, choices](size_t i) { *target = choices[i].second; });
}

// Checks the words of `analysis`: exactly one operand, then every flag, in name order, known
// to `table` and accepted by its setter. Returns true when all is well; otherwise writes
// "peregrinectl analyze <analysis>: <problem>\n" to `err` ("needs exactly one <operand>",
// "unknown flag --x" or the setter's problem; `usage` follows the first two) and returns false
// at the first problem.
bool ApplyAnalysisArgs(const AnalyzeArgs& args, absl::string_view analysis, absl::string_view operand,
                       const FlagTable& table, absl::string_view usage, std::ostream& err);

}  // namespace peregrine

#endif  // PEREGRINE_CLI_ANALYZE_ANALYSIS_ARGS_H_
