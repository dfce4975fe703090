#include "agent/inspection/command_runner.h"

#include <catch2/catch.hpp>

namespace peregrine {
namespace {

TEST_CASE("command runner: stdout, stderr and exit code of a real program", "[unit]") {
  absl::StatusOr<CommandResult> r = RunCommand({"echo", "hello", "world"}, absl::Seconds(30));
  REQUIRE(r.ok());
  CHECK(r->exit_code == 0);
  CHECK(r->stdout_text == "hello world\n");
  CHECK(!r->truncated);

  r = RunCommand({"ls", "/definitely/not/here"}, absl::Seconds(30));
  REQUIRE(r.ok());
  CHECK(r->exit_code != 0);
  CHECK(r->stderr_text.find("/definitely/not/here") != std::string::npos);
}

TEST_CASE("command runner: arguments reach the program verbatim, no shell", "[unit]") {
  absl::StatusOr<CommandResult> r =
      RunCommand({"printf", "%s|", "a b", "$HOME", "`id`", ";"}, absl::Seconds(30));
  REQUIRE(r.ok());
  CHECK(r->stdout_text == "a b|$HOME|`id`|;|");
}

TEST_CASE("command runner: missing program, timeout, signal, bounded output", "[unit]") {
  absl::StatusOr<CommandResult> r = RunCommand({"peregrine-no-such-tool"}, absl::Seconds(5));
  CHECK(r.status().code() == absl::StatusCode::kNotFound);
  CHECK(RunCommand({}, absl::Seconds(1)).status().code() == absl::StatusCode::kInvalidArgument);

  r = RunCommand({"sleep", "600"}, absl::Milliseconds(200));
  CHECK(r.status().code() == absl::StatusCode::kDeadlineExceeded);

  r = RunCommand({"sh", "-c", "kill -9 $$"}, absl::Seconds(30));
  REQUIRE(r.ok());
  CHECK(r->term_signal == 9);
  CHECK(r->exit_code == 137);

  r = RunCommand({"seq", "1", "100000"}, absl::Seconds(30), 100);
  REQUIRE(r.ok());
  CHECK(r->exit_code == 0);
  CHECK(r->truncated);
  CHECK(r->stdout_text.size() == 100);
  CHECK(r->stdout_text.rfind("1\n2\n3\n", 0) == 0);
}

}  // namespace
}  // namespace peregrine
