// The analyses' command lines: AnalyzeArgs splitting, the flag setters and
// ApplyAnalysisArgs directly, and the usage errors each analysis prints through RunAnalyze.
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cli/analyze/analysis_args.h"
#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine::analyze_test {
namespace {

TEST_CASE("ParseAnalyzeArgs: command, operands, flags in both spellings, --json and --help", "[unit]") {
  AnalyzeArgs args;
  REQUIRE_FALSE(ParseAnalyzeArgs({"stacks", "dir", "--tp", "2", "--pp=1", "--json", "-h", "extra"}, &args));
  CHECK(args.command == "stacks");
  CHECK(args.operands == std::vector<std::string>{"dir", "extra"});
  CHECK(args.flags == std::map<std::string, std::string>{{"tp", "2"}, {"pp", "1"}});
  CHECK(args.json);
  CHECK(args.help);

  AnalyzeArgs dangling;
  CHECK(ParseAnalyzeArgs({"nccl", "f", "--rank"}, &dangling) == std::optional<std::string>("--rank: needs a value"));
}

TEST_CASE("flag setters store accepted values and name the flag in a problem", "[unit]") {
  double number = 0;
  int size = 0;
  std::optional<int> rank;
  enum class Color { kRed, kGreen, kBlue } color = Color::kRed;
  const FlagTable table = {
      {"verify", NumberFlag(&number)},
      {"tp", IntegerFlag(&size, 1, "positive integer")},
      {"rank", IntegerFlag(&rank, 0, "rank")},
      {"color", ChoiceFlag<Color>(&color, {{"red", Color::kRed}, {"green", Color::kGreen}, {"blue", Color::kBlue}})},
      {"two", ChoiceFlag<Color>(&color, {{"red", Color::kRed}, {"blue", Color::kBlue}})}};
  struct Case {
    std::string flag, value;
    std::optional<std::string> problem;
  };
  const std::vector<Case> cases = {
      {"verify", "0.25", std::nullopt},
      {"verify", "x", "--verify: not a number: x"},
      {"tp", "4", std::nullopt},
      {"tp", "0", "--tp: not a positive integer: 0"},
      {"tp", "two", "--tp: not a positive integer: two"},
      {"rank", "0", std::nullopt},
      {"rank", "-1", "--rank: not a rank: -1"},
      {"color", "blue", std::nullopt},
      {"color", "pink", "--color must be red, green or blue, got 'pink'"},
      {"two", "", "--two must be red or blue, got ''"},
  };
  for (const Case& c : cases) {
    INFO("--" << c.flag << " " << c.value);
    CHECK(table.at(c.flag)(c.flag, c.value) == c.problem);
  }
  CHECK(number == 0.25);
  CHECK(size == 4);
  CHECK(rank == std::optional<int>(0));
  CHECK(color == Color::kBlue);
}

TEST_CASE("ApplyAnalysisArgs: one operand, known flags, the first problem in flag-name order", "[unit]") {
  double verify = 0;
  const FlagTable table = {{"verify", NumberFlag(&verify)}, {"prob", NumberFlag(&verify)}};
  struct Case {
    std::vector<std::string> words;
    bool ok;
    std::string err;
  };
  const std::vector<Case> cases = {
      {{"steps", "f.csv", "--verify", "0.2"}, true, ""},
      {{"steps"}, false, "peregrinectl analyze steps: needs exactly one FILE\nUSAGE"},
      {{"steps", "a", "b"}, false, "peregrinectl analyze steps: needs exactly one FILE\nUSAGE"},
      {{"steps", "f", "--zz", "1", "--verify", "x"}, false, "peregrinectl analyze steps: --verify: not a number: x\n"},
      {{"steps", "f", "--aa", "1", "--verify", "x"}, false, "peregrinectl analyze steps: unknown flag --aa\nUSAGE"},
      {{"steps", "f", "--verify", "x", "--prob", "y"}, false, "peregrinectl analyze steps: --prob: not a number: y\n"},
  };
  for (const Case& c : cases) {
    INFO(c.err);
    AnalyzeArgs args;
    REQUIRE_FALSE(ParseAnalyzeArgs(c.words, &args));
    std::ostringstream err;
    CHECK(ApplyAnalysisArgs(args, "steps", "FILE", table, "USAGE", err) == c.ok);
    CHECK(err.str() == c.err);
  }
}

TEST_CASE("analyze: each analysis' usage errors, exit code 2", "[unit]") {
  struct Case {
    std::vector<std::string> args;
    std::string first_line;
  };
  const std::vector<Case> cases = {
      {{"steps", "--format", "tall", "x.csv"}, "peregrinectl analyze steps: --format must be auto, long or wide, got 'tall'"},
      {{"steps", "x.csv", "--prob", "high"}, "peregrinectl analyze steps: --prob: not a number: high"},
      {{"steps", "x.csv", "--rank", "1"}, "peregrinectl analyze steps: unknown flag --rank"},
      {{"nccl", "x.log", "--rank", "-2"}, "peregrinectl analyze nccl: --rank: not a rank: -2"},
      {{"nccl", "x.log", "--format", "long"}, "peregrinectl analyze nccl: unknown flag --format"},
      {{"nccl"}, "peregrinectl analyze nccl: needs at least one FILE or DIR"},
      {{"stacks", "d"}, "peregrinectl analyze stacks: --dp is required"},
      {{"stacks", "d", "--tp", "0"}, "peregrinectl analyze stacks: --tp: not a positive integer: 0"},
      {{"stacks", "d", "--threads", "some"}, "peregrinectl analyze stacks: --threads must be all or main, got 'some'"},
      {{"stacks", "--tp", "1"}, "peregrinectl analyze stacks: needs exactly one DIR"},
  };
  for (const Case& c : cases) {
    const Result r = Analyze(c.args);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.err.substr(0, r.err.find('\n')) == c.first_line);
    CHECK(r.out.empty());
  }
}

}  // namespace
}  // namespace peregrine::analyze_test
