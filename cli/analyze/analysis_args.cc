#include "cli/analyze/analysis_args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace peregrine {
namespace {

// "a", "a or b", "a, b or c".
std::string Alternatives(const std::vector<std::string>& names) {
  if (names.size() <= 1) return absl::StrJoin(names, "");
  return absl::StrCat(absl::StrJoin(names.begin(), names.end() - 1, ", "), " or ", names.back());
}

template <typename Target>
FlagSetter IntegerFlagInto(Target* target, int min, std::string what) {
  return [target, min, what = std::move(what)](const std::string& flag,
                                               const std::string& value) -> std::optional<std::string> {
    int v = 0;
    if (!absl::SimpleAtoi(value, &v) || v < min) return absl::StrCat("--", flag, ": not a ", what, ": ", value);
    *target = v;
    return std::nullopt;
  };
}

}  // namespace

std::optional<std::string> ParseAnalyzeArgs(const std::vector<std::string>& words, AnalyzeArgs* args) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& s = words[i];
    if (s == "--help" || s == "-h") {
      args->help = true;
    } else if (s == "--json") {
      args->json = true;
    } else if (s.rfind("--", 0) == 0 && s.size() > 2) {
      std::string name = s.substr(2), value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      } else {
        if (i + 1 >= words.size()) return absl::StrCat(s, ": needs a value");
        value = words[++i];
      }
      args->flags[name] = value;
    } else {
      args->operands.push_back(s);
    }
  }
  if (!args->operands.empty()) {
    args->command = args->operands[0];
    args->operands.erase(args->operands.begin());
  }
  return std::nullopt;
}

FlagSetter NumberFlag(double* target) {
  return [target](const std::string& flag, const std::string& value) -> std::optional<std::string> {
    double v = 0;
    if (!absl::SimpleAtod(value, &v)) return absl::StrCat("--", flag, ": not a number: ", value);
    *target = v;
    return std::nullopt;
  };
}

FlagSetter IntegerFlag(int* target, int min, std::string what) {
  return IntegerFlagInto(target, min, std::move(what));
}

FlagSetter IntegerFlag(std::optional<int>* target, int min, std::string what) {
  return IntegerFlagInto(target, min, std::move(what));
}

FlagSetter ChoiceFlag(std::vector<std::string> names, std::function<void(size_t index)> choose) {
  return [names = std::move(names), choose = std::move(choose)](
             const std::string& flag, const std::string& value) -> std::optional<std::string> {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == value) {
        choose(i);
        return std::nullopt;
      }
    }
    return absl::StrCat("--", flag, " must be ", Alternatives(names), ", got '", value, "'");
  };
}

bool ApplyAnalysisArgs(const AnalyzeArgs& args, absl::string_view analysis, absl::string_view operand,
                       const FlagTable& table, absl::string_view usage, std::ostream& err) {
  const std::string prefix = absl::StrCat("peregrinectl analyze ", analysis, ": ");
  if (args.operands.size() != 1) {
    err << prefix << "needs exactly one " << operand << "\n" << usage;
    return false;
  }
  for (const auto& [flag, value] : args.flags) {
    auto it = table.find(flag);
    if (it == table.end()) {
      err << prefix << "unknown flag --" << flag << "\n" << usage;
      return false;
    }
    if (std::optional<std::string> problem = it->second(flag, value)) {
      err << prefix << *problem << "\n";
      return false;
    }
  }
  return true;
}

}  // namespace peregrine
