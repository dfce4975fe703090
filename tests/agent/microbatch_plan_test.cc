// Micro-batch plans on the agent's side: the plan file's format (round trips, a table of
// garbage whose errors name the field, fuzzed text that never crashes the parser), the
// atomic file writes, the set_microbatch_plan command through CommandState and the proto
// translation, the ranks' PEREGRINE_MICROBATCH_PLAN and the progress line's mb=.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <filesystem>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/command_state.h"
#include "agent/launch_plan.h"
#include "agent/microbatch_plan_file.h"
#include "agent/progress_parser.h"
#include "agent/proto_translation.h"
#include "client/microbatch_plan_format.h"
#include "tests/testing/files.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using ::peregrine::testing::ReadFileIfExists;
using ::peregrine::testing::TempDir;

MicroBatchPlan Plan13() {
  MicroBatchPlan plan;
  plan.plan_id = 7;
  plan.from_step = 120;
  plan.counts = {1, 3};
  plan.gradient_scale = 0.5;
  plan.global_micro_batches = 4;
  return plan;
}

const char kValid[] =
    "version=1\nplan_id=7\nfrom_step=120\nglobal_micro_batches=4\ngradient_scale=0.5\ncounts=1,3\n";

TEST_CASE("micro-batch plan text round trips, scale bits included", "[unit]") {
  MicroBatchPlan plan = Plan13();
  plan.gradient_scale = 1.0 / 3.0;
  plan.counts = {2, 1, 4, 5};
  plan.global_micro_batches = 12;
  plan.from_step = UINT64_MAX;
  plan.plan_id = UINT64_MAX;
  absl::StatusOr<MicroBatchPlan> parsed = ParseMicroBatchPlan(FormatMicroBatchPlan(plan));
  REQUIRE(parsed.ok());
  CHECK(*parsed == plan);
  absl::StatusOr<MicroBatchPlan> hand = ParseMicroBatchPlan(std::string("# comment\r\n\n") + kValid);
  REQUIRE(hand.ok());
  CHECK(*hand == Plan13());
  absl::StatusOr<MicroBatchShare> share = ShareOf(plan, 2);
  REQUIRE(share.ok());
  CHECK(share->first == 3);
  CHECK(share->count == 4);
  CHECK_FALSE(ShareOf(plan, 4).ok());
}

TEST_CASE("a garbage micro-batch plan is refused with an error naming the field", "[unit]") {
  struct Case {
    std::string text;
    std::string names;
  };
  const std::string base = kValid;
  auto with = [&](const std::string& key, const std::string& value) {
    std::string out;
    for (const std::string& line : {std::string("version=1"), std::string("plan_id=7"), std::string("from_step=120"),
                                    std::string("global_micro_batches=4"), std::string("gradient_scale=0.5"),
                                    std::string("counts=1,3")}) {
      if (line.rfind(key + "=", 0) == 0) {
        if (value != "<drop>") out += key + "=" + value + "\n";
      } else {
        out += line + "\n";
      }
    }
    return out;
  };
  const std::vector<Case> cases = {
      {"", "version: missing"},
      {with("counts", "<drop>"), "counts: missing"},
      {with("version", "2"), "version: 2"},
      {with("version", "one"), "version"},
      {with("plan_id", "-1"), "plan_id"},
      {with("plan_id", "0"), "plan_id: must be >= 1"},
      {with("plan_id", "18446744073709551616"), "plan_id"},
      {with("from_step", " 5"), "from_step"},
      {with("from_step", "+5"), "from_step"},
      {with("global_micro_batches", "4294967296"), "global_micro_batches"},
      {with("global_micro_batches", "5"), "global_micro_batches: 5 but the counts sum to 4"},
      {with("gradient_scale", "nan"), "gradient_scale"},
      {with("gradient_scale", "inf"), "gradient_scale"},
      {with("gradient_scale", "-0.5"), "gradient_scale"},
      {with("gradient_scale", "0"), "gradient_scale"},
      {with("gradient_scale", "half"), "gradient_scale"},
      {with("gradient_scale", ""), "gradient_scale"},
      {with("counts", ""), "counts: empty"},
      {with("counts", "1,,3"), "counts[1]"},
      {with("counts", "1,x"), "counts[1]"},
      {with("counts", "0,4"), "counts[0]: 0"},
      {with("counts", "1,3,"), "counts[2]"},
      {with("counts", "1;3"), "counts[0]"},
      {base + "plan_id=8\n", "plan_id given twice"},
      {base + "colour=blue\n", "unknown key \"colour\""},
      {base + "garbage\n", "line 7: not key=value"},
      {std::string("\x7f" "ELF\x02\x01\x01", 7), "not key=value"},
  };
  for (const Case& c : cases) {
    INFO("text: " << c.text);
    absl::StatusOr<MicroBatchPlan> parsed = ParseMicroBatchPlan(c.text);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(parsed.status().message()), Catch::Contains(c.names));
  }
}

TEST_CASE("fuzzed micro-batch plan text parses to a valid plan or to an error, never a crash", "[unit]") {
  std::mt19937_64 rng(20240611);
  const std::string alphabet = "0123456789,=.-+e\nxnai# \r";
  int parsed_ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = kValid;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      const size_t at = text.empty() ? 0 : rng() % text.size();
      switch (rng() % 3) {
        case 0:
          if (!text.empty()) text[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
          break;
        default:
          if (!text.empty()) text.erase(at, 1 + rng() % 4);
          break;
      }
    }
    absl::StatusOr<MicroBatchPlan> parsed = ParseMicroBatchPlan(text);
    if (parsed.ok()) {
      ++parsed_ok;
      CHECK(ValidateMicroBatchPlan(*parsed).ok());
    } else {
      CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK_FALSE(parsed.status().message().empty());
    }
  }
  CHECK(parsed_ok > 0);  // some edits (a comment, a digit) still give a plan
}

TEST_CASE("the plan file is written whole, replaced, refused when invalid and removed when cleared", "[unit]") {
  TempDir dir;
  const std::string path = MicroBatchPlanPathFor(dir.Path("logs"), "pod-0");
  CHECK(path == dir.Path("logs") + "/microbatch-plan");
  CHECK(MicroBatchPlanPathFor("", "pod-3") == "/tmp/peregrine-microbatch-pod-3/microbatch-plan");
  CHECK(ClearMicroBatchPlan(path).ok());  // nothing there yet
  REQUIRE(WriteMicroBatchPlan(path, Plan13()).ok());  // creates logs/
  absl::StatusOr<MicroBatchPlan> read = ParseMicroBatchPlan(ReadFileIfExists(path));
  REQUIRE(read.ok());
  CHECK(*read == Plan13());

  MicroBatchPlan next = Plan13();
  next.plan_id = 8;
  next.counts = {3, 1};
  REQUIRE(WriteMicroBatchPlan(path, next).ok());
  CHECK(*ParseMicroBatchPlan(ReadFileIfExists(path)) == next);

  MicroBatchPlan bad = next;
  bad.counts = {4, 0};
  absl::Status refused = WriteMicroBatchPlan(path, bad);
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(refused.message()), Catch::Contains("counts[1]"));
  CHECK(*ParseMicroBatchPlan(ReadFileIfExists(path)) == next);  // unchanged

  REQUIRE(WriteMicroBatchPlan(path, MicroBatchPlan{}).ok());  // the empty plan clears
  CHECK_FALSE(std::filesystem::exists(path));
  // Only the plan file was ever in the directory (no temporary files left).
  size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.Path("logs"))) ++entries;
  CHECK(entries == 0);
}

TrainingAssignment TwoReplicas() {
  TrainingAssignment a;
  a.attempt = 1;
  a.world_size = 2;
  a.layout = AssignedLayout{1, 1, 2, 2};
  a.ranks = {AssignedRank{0, 0, 0, 0, 0}, AssignedRank{1, 1, 0, 0, 1}};
  a.code.command = {"train"};
  return a;
}

AgentCommand PlanCommand(const std::string& id, MicroBatchPlan plan) {
  AgentCommand c;
  c.id = id;
  c.kind = AgentCommand::Kind::kSetMicroBatchPlan;
  c.microbatch_plan = std::move(plan);
  return c;
}

std::optional<CommandOutcome> FinishOf(const std::vector<AgentAction>& actions) {
  for (const AgentAction& a : actions) {
    if (const auto* f = std::get_if<FinishAction>(&a)) return f->outcome;
  }
  return std::nullopt;
}

TEST_CASE("set_microbatch_plan needs a running training and a count per data-parallel replica", "[unit]") {
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  CommandState state(CommandStateOptions{});
  SupervisorView idle;

  // Nothing runs: refused; clearing is always fine.
  std::optional<CommandOutcome> early = FinishOf(state.OnCommand(PlanCommand("p0", Plan13()), idle, now));
  REQUIRE(early.has_value());
  CHECK(early->code == absl::StatusCode::kFailedPrecondition);
  std::vector<AgentAction> clear = state.OnCommand(PlanCommand("c0", MicroBatchPlan{}), idle, now);
  REQUIRE(clear.size() == 1);
  CHECK(std::get<MicroBatchPlanAction>(clear[0]).plan.empty());

  // A start queued by the ack: still refused (the start would clear it).
  DesiredState desired;
  desired.role = AgentRole::kActive;
  desired.assignment = TwoReplicas();
  state.OnRegisterAck(desired);
  CHECK(FinishOf(state.OnCommand(PlanCommand("p1", Plan13()), idle, now))->code ==
        absl::StatusCode::kFailedPrecondition);
  std::vector<AgentAction> start = state.Advance(idle);
  REQUIRE(start.size() == 1);
  state.OnStartResult(std::get<StartAction>(start[0]), absl::OkStatus());
  SupervisorView running{false, false, true, false};

  std::vector<AgentAction> accepted = state.OnCommand(PlanCommand("p2", Plan13()), running, now);
  REQUIRE(accepted.size() == 1);
  const auto& action = std::get<MicroBatchPlanAction>(accepted[0]);
  CHECK(action.id == "p2");
  CHECK(action.plan == Plan13());

  MicroBatchPlan three = Plan13();
  three.counts = {1, 1, 2};
  std::optional<CommandOutcome> wrong_dp = FinishOf(state.OnCommand(PlanCommand("p3", three), running, now));
  REQUIRE(wrong_dp.has_value());
  CHECK(wrong_dp->code == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(wrong_dp->message, Catch::Contains("counts: 3 entries") && Catch::Contains("2 data-parallel"));

  MicroBatchPlan bad_scale = Plan13();
  bad_scale.gradient_scale = std::numeric_limits<double>::infinity();
  std::optional<CommandOutcome> bad = FinishOf(state.OnCommand(PlanCommand("p4", bad_scale), running, now));
  REQUIRE(bad.has_value());
  CHECK(bad->code == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(bad->message, Catch::StartsWith("set_microbatch_plan: gradient_scale"));

  MicroBatchPlan bad_sum = Plan13();
  bad_sum.global_micro_batches = 8;
  CHECK_THAT(FinishOf(state.OnCommand(PlanCommand("p5", bad_sum), running, now))->message,
             Catch::Contains("global_micro_batches: 8"));

  // Idempotent by id: once answered, the stored record is resent.
  state.RecordResult("p2", "record-p2");
  std::vector<AgentAction> again = state.OnCommand(PlanCommand("p2", Plan13()), running, now);
  REQUIRE(again.size() == 1);
  CHECK(std::get<ResendAction>(again[0]).record == "record-p2");
}

TEST_CASE("set_microbatch_plan and mb= cross the wire and reach the ranks' environment", "[unit]") {
  v1::Command command;
  command.set_id("plan-1");
  v1::SetMicroBatchPlan* plan = command.mutable_set_microbatch_plan();
  plan->set_plan_id(7);
  plan->set_from_step(120);
  plan->add_counts(1);
  plan->add_counts(3);
  plan->set_gradient_scale(0.5);
  plan->set_global_micro_batches(4);
  AgentCommand translated = CommandFromProto(command);
  CHECK(translated.kind == AgentCommand::Kind::kSetMicroBatchPlan);
  CHECK(translated.microbatch_plan == Plan13());

  std::optional<ProgressRecord> record = ParseProgressLine("[peregrine] step=5 loss=1 iter_ms=3 mb=3");
  REQUIRE(record.has_value());
  CHECK(record->micro_batches == 3u);
  for (const char* line : {"[peregrine] step=5 mb=0", "[peregrine] step=5 mb=-1", "[peregrine] step=5 mb=x",
                           "[peregrine] step=5 mb=99999999999"}) {
    INFO(line);
    REQUIRE(ParseProgressLine(line).has_value());
    CHECK_FALSE(ParseProgressLine(line)->micro_batches.has_value());
  }
  RankProgress progress;
  progress.Observe(*ParseProgressLine("[peregrine] step=1 mb=2"), absl::FromUnixSeconds(10));
  progress.Observe(*ParseProgressLine("[peregrine] step=2"), absl::FromUnixSeconds(11));
  v1::IterationSummary summary;
  FillIterationSummary(0, progress.TakeWindow(), &summary);
  CHECK(summary.micro_batches() == 2);
  RankProgress silent;
  silent.Observe(*ParseProgressLine("[peregrine] step=1 loss=2"), absl::FromUnixSeconds(10));
  FillIterationSummary(0, silent.TakeWindow(), &summary);
  CHECK(summary.micro_batches() == 0);

  v1::Assignment assignment = AssignmentToProto(TwoReplicas());
  LaunchContext context;
  context.microbatch_plan_path = "/logs/microbatch-plan";
  absl::StatusOr<std::vector<ProcessSpec>> specs = BuildLaunchPlan(assignment, context);
  REQUIRE(specs.ok());
  for (const ProcessSpec& spec : *specs) {
    CHECK(std::count(spec.env.begin(), spec.env.end(), "PEREGRINE_MICROBATCH_PLAN=/logs/microbatch-plan") == 1);
  }
  context.microbatch_plan_path.clear();
  specs = BuildLaunchPlan(assignment, context);
  REQUIRE(specs.ok());
  for (const ProcessSpec& spec : *specs) {
    for (const std::string& e : spec.env) CHECK(e.rfind("PEREGRINE_MICROBATCH_PLAN=", 0) != 0);
  }
}

}  // namespace
}  // namespace peregrine
