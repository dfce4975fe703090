// Unit tests of the agent's pure parts: progress lines, line assembly and
// tails, flags, reconnect backoff, and the launch plan's environment.
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "agent/agent_flags.h"
#include "agent/controller_link.h"
#include "agent/launch_plan.h"
#include "agent/log_tail.h"
#include "agent/progress_parser.h"
#include "tests/agent/process_env.h"

namespace peregrine {
namespace {

TEST_CASE("progress lines in real formats are parsed", "[unit]") {
  auto full = ParseProgressLine("[peregrine] step=120 loss=2.3456 grad_norm=0.87 iter_ms=412.5");
  REQUIRE(full.has_value());
  CHECK(full->step == 120);
  CHECK(*full->loss == Approx(2.3456));
  CHECK(*full->grad_norm == Approx(0.87));
  CHECK(*full->iter_ms == Approx(412.5));

  auto prefixed = ParseProgressLine("2024-05-01 12:00:01,123 INFO rank0: [peregrine] step=7 loss=1e-3");
  REQUIRE(prefixed.has_value());
  CHECK(prefixed->step == 7);
  CHECK(*prefixed->loss == Approx(0.001));
  CHECK_FALSE(prefixed->grad_norm.has_value());
  CHECK_FALSE(prefixed->iter_ms.has_value());

  auto reordered = ParseProgressLine("[peregrine] iter_ms=10 tokens=4096 step=3\r");
  REQUIRE(reordered.has_value());
  CHECK(reordered->step == 3);
  CHECK(*reordered->iter_ms == Approx(10));

  auto nan_loss = ParseProgressLine("[peregrine] step=9 loss=nan grad_norm=inf");
  REQUIRE(nan_loss.has_value());
  CHECK(std::isnan(*nan_loss->loss));
  CHECK(std::isinf(*nan_loss->grad_norm));
}

TEST_CASE("a trainer's final line is progress of its step", "[unit]") {
  for (const char* line : {"[peregrine] final step=300 weight_digest=0f3a9c", "[peregrine] final step=300 param_digest=ab",
                           "[rank 3] [peregrine] final step=300"}) {
    INFO(line);
    auto final_line = ParseProgressLine(line);
    REQUIRE(final_line.has_value());
    CHECK(final_line->step == 300);
    CHECK_FALSE(final_line->loss.has_value());
    CHECK_FALSE(final_line->iter_ms.has_value());
  }
  CHECK_FALSE(ParseProgressLine("[peregrine] final weight_digest=0f3a9c").has_value());
}

TEST_CASE("garbage and lines without a valid step are not progress", "[unit]") {
  for (const char* line : {"", "step=5 loss=1.0", "[peregrine]", "[peregrine] loss=1.0 iter_ms=3",
                           "[peregrine] step=-4 loss=1", "[peregrine] step=abc", "[peregrine] step=",
                           "[peregrine] step=18446744073709551616", "[peregrine step=5", "\x01\xff[peregrin] step=1",
                           "Traceback (most recent call last):"}) {
    INFO(line);
    CHECK_FALSE(ParseProgressLine(line).has_value());
  }
  auto bad_optional = ParseProgressLine("[peregrine] step=5 loss=1.2.3 grad_norm= iter_ms=-7 =x noequals");
  REQUIRE(bad_optional.has_value());
  CHECK(bad_optional->step == 5);
  CHECK_FALSE(bad_optional->loss.has_value());
  CHECK_FALSE(bad_optional->grad_norm.has_value());
  CHECK_FALSE(bad_optional->iter_ms.has_value());
}

TEST_CASE("rank progress summarises a window", "[unit]") {
  RankProgress progress;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  CHECK_FALSE(progress.Current().has_progress);

  SECTION("reported iteration times are averaged") {
    progress.Observe(ProgressRecord{10, 2.0, 1.0, 100.0, std::nullopt}, t0);
    progress.Observe(ProgressRecord{11, 1.9, 0.9, 300.0, std::nullopt}, t0 + absl::Seconds(1));
    ProgressWindow w = progress.TakeWindow();
    CHECK(w.has_progress);
    CHECK(w.last_completed_step == 11);
    CHECK(w.last_loss == Approx(1.9));
    CHECK(w.last_grad_norm == Approx(0.9));
    CHECK(w.steps_in_window == 2);
    CHECK(w.mean_iteration_seconds == Approx(0.2));
    CHECK(w.last_step_time == t0 + absl::Seconds(1));
    ProgressWindow empty = progress.TakeWindow();
    CHECK(empty.steps_in_window == 0);
    CHECK(empty.mean_iteration_seconds == 0);
    CHECK(empty.last_completed_step == 11);
  }
  SECTION("the final line repeating the last step is no new iteration") {
    progress.Observe(ProgressRecord{9, 2.0, 1.0, 100.0, std::nullopt}, t0);
    progress.Observe(ProgressRecord{10, 1.9, 0.9, 300.0, std::nullopt}, t0 + absl::Seconds(1));
    progress.Observe(*ParseProgressLine("[peregrine] final step=10 weight_digest=00"), t0 + absl::Seconds(5));
    ProgressWindow w = progress.TakeWindow();
    CHECK(w.last_completed_step == 10);
    CHECK(w.steps_in_window == 2);
    CHECK(w.mean_iteration_seconds == Approx(0.2));  // still the reported times only
    CHECK(w.last_loss == Approx(1.9));
    CHECK(w.last_step_time == t0 + absl::Seconds(1));
    // A trainer that prints only its final line still shows the step completed.
    RankProgress only_final;
    only_final.Observe(*ParseProgressLine("[peregrine] final step=40 weight_digest=00"), t0);
    CHECK(only_final.Current().has_progress);
    CHECK(only_final.Current().last_completed_step == 40);
  }
  SECTION("without iter_ms the observed spacing is used, across windows") {
    progress.Observe(ProgressRecord{1, 3.0, std::nullopt, std::nullopt, std::nullopt}, t0);
    progress.TakeWindow();
    progress.Observe(ProgressRecord{3, std::nullopt, std::nullopt, std::nullopt, std::nullopt}, t0 + absl::Seconds(1));
    progress.Observe(ProgressRecord{4, std::nullopt, std::nullopt, std::nullopt, std::nullopt}, t0 + absl::Seconds(2));
    ProgressWindow w = progress.TakeWindow();
    CHECK(w.steps_in_window == 2);
    CHECK(w.mean_iteration_seconds == Approx(2.0 / 3.0));
    CHECK(w.last_loss == Approx(3.0));  // kept from the earlier line
  }
}

TEST_CASE("line assembler splits, strips CR, bounds long lines", "[unit]") {
  LineAssembler assembler(8);
  CHECK(assembler.Append("ab").empty());
  CHECK(assembler.Append("c\r\nde\n") == std::vector<std::string>{"abc", "de"});
  CHECK(assembler.Append("0123456789") == std::vector<std::string>{"01234567"});
  CHECK(assembler.Flush() == std::vector<std::string>{"89"});
  CHECK(assembler.Flush().empty());
  CHECK(assembler.Append("\n\n") == std::vector<std::string>{"", ""});
}

TEST_CASE("log tail keeps the last lines oldest first", "[unit]") {
  LogTail tail(3);
  for (int i = 0; i < 5; ++i) tail.Add("line" + std::to_string(i));
  CHECK(tail.Lines() == std::vector<std::string>{"line2", "line3", "line4"});
  LogTail none(0);
  none.Add("x");
  CHECK(none.Lines().empty());
}

absl::StatusOr<ParsedAgentFlags> Parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return ParseAgentFlags(args, [env](std::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

TEST_CASE("flags and their environment variables", "[unit]") {
  auto parsed = Parse({"--controller", "ctl:7000", "--job=ns1/job1", "--pod", "p-0", "--role", "standby",
                       "--heartbeat-ms=250", "--log-dir", "/tmp/x"});
  REQUIRE(parsed.ok());
  const AgentOptions& o = parsed->options;
  CHECK(o.controller == "ctl:7000");
  CHECK(o.job_namespace == "ns1");
  CHECK(o.job_name == "job1");
  CHECK(o.pod_name == "p-0");
  CHECK(o.machine_id == "p-0");
  CHECK(o.role == AgentRoleOption::kStandby);
  CHECK(o.heartbeat_ms == 250);
  CHECK(o.grace_ms == 10000);
  CHECK(o.log_dir == "/tmp/x");
  // The data channel's token comes from the controller's RegisterAck, not a file.
  CHECK_THAT(std::string(Parse({"--token-file", "/t"}).status().message()),
             Catch::Contains("unknown flag --token-file"));

  auto from_env = Parse({"--pod", "flag-pod"}, {{"PEREGRINE_CONTROLLER", "c:1"}, {"PEREGRINE_JOB", "a/b"},
                                                {"PEREGRINE_POD", "env-pod"}, {"PEREGRINE_MACHINE_ID", "node-7"}});
  REQUIRE(from_env.ok());
  CHECK(from_env->options.pod_name == "flag-pod");  // the flag wins
  CHECK(from_env->options.machine_id == "node-7");
  CHECK(from_env->options.role == AgentRoleOption::kActive);

  CHECK(Parse({"--help"})->help);
}

TEST_CASE("bad flags are refused with the flag's name", "[unit]") {
  const std::vector<std::string> base = {"--controller", "c:1", "--job", "a/b", "--pod", "p"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return Parse(args);
  };
  auto contains = [](const absl::Status& s, const std::string& text) {
    return std::string(s.message()).find(text) != std::string::npos;
  };
  CHECK(contains(with({"--frobnicate=1"}).status(), "--frobnicate"));
  CHECK(contains(with({"--role", "leader"}).status(), "--role"));
  CHECK(contains(with({"--heartbeat-ms", "fast"}).status(), "--heartbeat-ms"));
  CHECK(contains(with({"--grace-ms", "0"}).status(), "--grace-ms"));
  CHECK(contains(with({"--log-dir"}).status(), "--log-dir"));
  CHECK(contains(with({"positional"}).status(), "positional"));
  CHECK(contains(Parse({"--controller", "c:1", "--job", "nojobslash", "--pod", "p"}).status(), "--job"));
  CHECK(contains(Parse({"--job", "a/b", "--pod", "p"}).status(), "--controller"));
  CHECK(contains(Parse({"--controller", "c:1", "--job", "a/b"}, {{"PEREGRINE_ROLE", "x"}}).status(), "--pod"));
  CHECK(contains(Parse(base, {{"PEREGRINE_ROLE", "x"}}).status(), "PEREGRINE_ROLE"));
  CHECK(contains(with({"--host-inspections", "both"}).status(), "--host-inspections"));
}

TEST_CASE("host-inspections flag: pod by default, node from the flag or the variable the pod builder sets", "[unit]") {
  const std::vector<std::string> base = {"--controller", "c:1", "--job", "a/b", "--pod", "p"};
  CHECK(!Parse(base)->options.host_inspections_on_node);
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--host-inspections", "node"});
  CHECK(Parse(args)->options.host_inspections_on_node);
  CHECK(Parse(base, {{"PEREGRINE_HOST_INSPECTIONS", "node"}})->options.host_inspections_on_node);
  CHECK(!Parse(base, {{"PEREGRINE_HOST_INSPECTIONS", "pod"}})->options.host_inspections_on_node);
  CHECK(!Parse(base, {{"PEREGRINE_HOST_INSPECTIONS", "nodes"}}).ok());
}

TEST_CASE("reconnect backoff doubles to the cap with jitter", "[unit]") {
  ReconnectBackoff backoff(absl::Milliseconds(100), absl::Seconds(5));
  CHECK(backoff.Next(0.0) == absl::Milliseconds(50));
  CHECK(backoff.Next(0.999999) <= absl::Milliseconds(200));
  CHECK(backoff.Next(0.5) == absl::Milliseconds(300));  // base 400 * 0.75
  absl::Duration d;
  for (int i = 0; i < 20; ++i) {
    d = backoff.Next(0.999);
    CHECK(d <= absl::Seconds(5));
  }
  CHECK(d >= absl::Milliseconds(4990));  // capped at 5 s
  backoff.Reset();
  CHECK(backoff.Next(1.0) <= absl::Milliseconds(100));
}

peregrine::v1::Assignment TwoRankAssignment() {
  peregrine::v1::Assignment a;
  a.set_machine_index(1);
  a.set_world_size(4);
  a.mutable_layout()->set_tensor(2);
  a.mutable_layout()->set_pipeline(1);
  a.mutable_layout()->set_data(2);
  a.mutable_layout()->set_gpus_per_machine(2);
  a.set_master_addr("10.0.0.1");
  a.set_master_port(29500);
  a.set_resume_step(40);
  a.set_attempt(3);
  a.mutable_code()->add_command("python3");
  a.mutable_code()->add_command("train.py");
  (*a.mutable_code()->mutable_env())["PATH"] = "/opt/bin";
  (*a.mutable_code()->mutable_env())["RANK"] = "999";  // the agent's value wins
  for (uint32_t local = 0; local < 2; ++local) {
    auto* r = a.add_ranks();
    r->set_global_rank(2 + local);
    r->set_local_rank(local);
    r->set_tp(local);
    r->set_dp(1);
  }
  return a;
}

using testing::EnvOf;

TEST_CASE("launch plan sets the rendezvous and layout environment per rank", "[unit]") {
  LaunchContext context;
  context.agent_env = {"HOME=/root", "PATH=/usr/bin"};
  context.machine_id = "node-a";
  context.log_dir = "/logs";
  context.started_at = "now";
  auto plan = BuildLaunchPlan(TwoRankAssignment(), context);
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 2);
  const ProcessSpec& second = (*plan)[1];
  CHECK(second.global_rank == 3);
  CHECK(second.argv == std::vector<std::string>{"python3", "train.py"});
  CHECK(second.log_path == "/logs/rank-3.log");
  CHECK(second.log_header.find("attempt 3") != std::string::npos);
  auto env = EnvOf(second);
  CHECK(env["HOME"] == "/root");
  CHECK(env["PATH"] == "/opt/bin");
  CHECK(env["RANK"] == "3");
  CHECK(env["LOCAL_RANK"] == "1");
  CHECK(env["WORLD_SIZE"] == "4");
  CHECK(env["LOCAL_WORLD_SIZE"] == "2");
  CHECK(env["NODE_RANK"] == "1");
  CHECK(env["NNODES"] == "2");
  CHECK(env["MASTER_ADDR"] == "10.0.0.1");
  CHECK(env["MASTER_PORT"] == "29500");
  CHECK(env["PEREGRINE_TP"] == "2");
  CHECK(env["PEREGRINE_PP"] == "1");
  CHECK(env["PEREGRINE_DP"] == "2");
  CHECK(env["PEREGRINE_TP_RANK"] == "1");
  CHECK(env["PEREGRINE_PP_RANK"] == "0");
  CHECK(env["PEREGRINE_DP_RANK"] == "1");
  CHECK(env["PEREGRINE_RESUME_STEP"] == "40");
  CHECK(env["PEREGRINE_ATTEMPT"] == "3");
  CHECK(env["PEREGRINE_MACHINE_ID"] == "node-a");
}

TEST_CASE("launch plan gives every rank torchrun's worker environment", "[unit]") {
  LaunchContext context;
  context.agent_env = {"HOME=/root", "GROUP_RANK=stale"};
  context.machine_id = "node-a";
  context.started_at = "now";
  context.run_id = "ml/pretrain";
  auto plan = BuildLaunchPlan(TwoRankAssignment(), context);
  REQUIRE(plan.ok());
  REQUIRE(plan->size() == 2);
  // What torch.distributed.elastic's agent sets for worker 1 of node 1 (of 2 nodes x 2
  // workers), restarted twice before this attempt, plus NODE_RANK / NNODES.
  const std::map<std::string, std::string> want = {
      {"RANK", "3"},           {"LOCAL_RANK", "1"},          {"WORLD_SIZE", "4"},
      {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"},        {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "3"},      {"ROLE_WORLD_SIZE", "4"},     {"ROLE_NAME", "default"},
      {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
      {"TORCHELASTIC_RUN_ID", "ml/pretrain"}, {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"NODE_RANK", "1"},      {"NNODES", "2"}};
  for (size_t i = 0; i < plan->size(); ++i) {
    std::map<std::string, std::string> expected = want;
    expected["RANK"] = expected["ROLE_RANK"] = std::to_string(2 + i);
    expected["LOCAL_RANK"] = std::to_string(i);
    auto env = EnvOf((*plan)[i]);
    for (const auto& [key, value] : expected) {
      INFO("local rank " << i << ": " << key);
      CHECK(env[key] == value);
    }
  }
  // The first attempt has not restarted; a limit in the context is passed through.
  peregrine::v1::Assignment first = TwoRankAssignment();
  first.set_attempt(1);
  context.max_restarts = 3;
  auto again = BuildLaunchPlan(first, context);
  REQUIRE(again.ok());
  CHECK(EnvOf((*again)[0])["TORCHELASTIC_RESTART_COUNT"] == "0");
  CHECK(EnvOf((*again)[0])["TORCHELASTIC_MAX_RESTARTS"] == "3");
  first.set_attempt(0);  // an assignment from before attempts were counted
  CHECK(EnvOf((*BuildLaunchPlan(first, context))[0])["TORCHELASTIC_RESTART_COUNT"] == "0");
}

TEST_CASE("SetTorchrunWorker sets the rendezvous variables over an environment", "[unit]") {
  std::map<std::string, std::string> env = {{"PATH", "/bin"}, {"RANK", "stale"}};
  SetTorchrunWorker({5, 1, 8, 4, "10.0.0.9", 29501}, &env);
  const std::map<std::string, std::string> want = {
      {"PATH", "/bin"},        {"RANK", "5"},              {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"},
      {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "29501"}};
  CHECK(env == want);
}

TEST_CASE("launch plan refuses assignments it cannot run", "[unit]") {
  LaunchContext context;
  auto bad = [&](auto mutate) {
    peregrine::v1::Assignment a = TwoRankAssignment();
    mutate(a);
    return BuildLaunchPlan(a, context).status();
  };
  CHECK(bad([](auto& a) { a.mutable_code()->clear_command(); }).code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad([](auto& a) { a.clear_ranks(); }).code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad([](auto& a) { a.set_world_size(8); }).code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad([](auto& a) { a.mutable_layout()->set_gpus_per_machine(0); }).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(bad([](auto& a) { a.mutable_ranks(0)->set_global_rank(4); }).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine
