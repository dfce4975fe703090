// Supervisor against real processes (/bin/sh scripts as stand-in workloads;
// the supervisor itself never runs a shell). Every test ends with no child,
// grandchild or zombie of the test process left.
#include "agent/supervisor.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "absl/time/clock.h"
#include "tests/testing/eventually.h"
#include "tests/testing/files.h"
#include "tests/testing/process_guard.h"
#include "tests/testing/temp_dir.h"

namespace peregrine {
namespace {

using ::peregrine::testing::DescendantGuard;
using ::peregrine::testing::Descendants;
using ::peregrine::testing::Eventually;
using ::peregrine::testing::NoDescendantsLeft;
using ::peregrine::testing::ReadFile;
using ::peregrine::testing::TempDir;

std::vector<std::string> AgentEnv() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

ProcessSpec Script(int rank, const std::string& script) {
  ProcessSpec spec;
  spec.global_rank = rank;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = AgentEnv();
  return spec;
}

// Drives the supervisor like the agent's loop does, accumulating results,
// until `done` holds (or a generous deadline).
struct Driver {
  explicit Driver(Supervisor& s) : supervisor(s) {}
  Supervisor& supervisor;
  std::vector<OutputLine> lines;
  std::vector<ProcessExitReport> exits;
  bool became_idle = false;

  bool Until(const std::function<bool()>& done, absl::Duration limit = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + limit;
    while (!done()) {
      if (absl::Now() > deadline) return false;
      std::vector<pollfd> fds;
      for (int fd : supervisor.OutputFds()) fds.push_back(pollfd{fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 20);
      PollResult r = supervisor.Poll(absl::Now(), /*sweep_orphans=*/true);
      for (auto& l : r.lines) lines.push_back(std::move(l));
      for (auto& e : r.exits) exits.push_back(std::move(e));
      became_idle = became_idle || r.became_idle;
    }
    return true;
  }
  bool Saw(const std::string& text) const {
    return std::any_of(lines.begin(), lines.end(), [&](const OutputLine& l) { return l.text == text; });
  }
};

TEST_CASE("a crash is reported with its exit code and last lines", "[integration]") {
  DescendantGuard guard;
  {
    Supervisor supervisor;
    REQUIRE(supervisor.Start({Script(0, "echo first; echo second >&2; printf unterminated; exit 7"),
                              Script(1, "exit 0")})
                .ok());
    Driver driver(supervisor);
    REQUIRE(driver.Until([&] { return supervisor.Idle(); }));
    REQUIRE(driver.exits.size() == 2);
    auto crash = std::find_if(driver.exits.begin(), driver.exits.end(), [](auto& e) { return e.global_rank == 0; });
    REQUIRE(crash != driver.exits.end());
    CHECK(crash->exit_code == 7);
    CHECK(crash->signal == 0);
    CHECK_FALSE(crash->during_stop);
    CHECK(crash->tail == std::vector<std::string>{"first", "second", "unterminated"});
    auto statuses = supervisor.Processes();
    REQUIRE(statuses.size() == 2);
    CHECK_FALSE(statuses[0].running);
    CHECK(statuses[0].exit_code == 7);
    CHECK(statuses[1].exit_code == 0);
  }
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("a signal-killed process reports the signal", "[integration]") {
  DescendantGuard guard;
  {
    Supervisor supervisor;
    REQUIRE(supervisor.Start({Script(3, "echo about to die; kill -SEGV $$")}).ok());
    Driver driver(supervisor);
    REQUIRE(driver.Until([&] { return supervisor.Idle(); }));
    REQUIRE(driver.exits.size() == 1);
    CHECK(driver.exits[0].global_rank == 3);
    CHECK(driver.exits[0].signal == SIGSEGV);
    CHECK(driver.exits[0].tail == std::vector<std::string>{"about to die"});
  }
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("stop escalates to SIGKILL for a grandchild ignoring SIGTERM, then a restart runs", "[integration]") {
  DescendantGuard guard;
  {
    Supervisor supervisor;
    // The leader forks a grandchild that ignores SIGTERM (sleep inherits the
    // ignored disposition), then waits; SIGTERM ends the leader only.
    const std::string script =
        "sh -c 'trap \"\" TERM; echo grandchild-ready; while true; do sleep 0.05; done' & "
        "echo leader-ready; wait";
    REQUIRE(supervisor.Start({Script(0, script)}).ok());
    Driver driver(supervisor);
    REQUIRE(driver.Until([&] { return driver.Saw("leader-ready") && driver.Saw("grandchild-ready"); }));
    const pid_t leader = supervisor.Processes()[0].pid;
    CHECK(::getpgid(leader) == leader);  // its own process group

    CHECK(supervisor.Start({Script(0, "true")}).code() == absl::StatusCode::kFailedPrecondition);

    const absl::Duration grace = absl::Seconds(3);
    const absl::Time stop_at = absl::Now();
    supervisor.BeginStop(grace, stop_at);
    CHECK(supervisor.stopping());
    REQUIRE(driver.Until([&] { return !driver.exits.empty(); }));
    CHECK(driver.exits[0].signal == SIGTERM);
    CHECK(driver.exits[0].during_stop);
    if (absl::Now() < stop_at + grace - absl::Milliseconds(500)) {
      // The leader is gone but its group still holds the grandchild.
      CHECK_FALSE(supervisor.Idle());
    }
    REQUIRE(driver.Until([&] { return supervisor.Idle(); }));
    CHECK(driver.became_idle);
    CHECK_FALSE(supervisor.stopping());
    CHECK(Descendants().empty());

    REQUIRE(supervisor.Start({Script(0, "echo second-attempt")}).ok());
    Driver second(supervisor);
    REQUIRE(second.Until([&] { return supervisor.Idle(); }));
    CHECK(second.Saw("second-attempt"));
    CHECK(supervisor.Processes()[0].pid != leader);
  }
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("pause and resume stop and continue the process group", "[integration]") {
  DescendantGuard guard;
  {
    Supervisor supervisor;
    // The rank becomes one sleeping process. (A shell loop that forks is not used: dash
    // starts commands with vfork, and a vfork child stopped before its exec leaves the shell
    // in state D rather than T - seen under load.)
    REQUIRE(supervisor.Start({Script(0, "echo tick; exec sleep 60")}).ok());
    Driver driver(supervisor);
    REQUIRE(driver.Until([&] { return driver.Saw("tick"); }));
    const pid_t pid = supervisor.Processes()[0].pid;
    auto state = [pid] {
      std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
      std::string stat;
      std::getline(in, stat);
      return stat.substr(stat.rfind(')') + 2, 1);
    };
    supervisor.SignalAll(SIGSTOP);
    CHECK(Eventually([&] { return state() == "T"; }));
    supervisor.SignalAll(SIGCONT);
    CHECK(Eventually([&] { return state() != "T"; }));
    supervisor.BeginStop(absl::Seconds(5), absl::Now());
    REQUIRE(driver.Until([&] { return supervisor.Idle(); }));
  }
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("environment and per-rank log file with attempt separators", "[integration]") {
  DescendantGuard guard;
  TempDir temp("peregrine-sup");
  const std::string& dir = temp.path();
  {
    Supervisor supervisor;
    for (int attempt = 1; attempt <= 2; ++attempt) {
      ProcessSpec spec = Script(5, "echo \"value=$PEREGRINE_TEST_VALUE\"");
      spec.env.push_back("PEREGRINE_TEST_VALUE=attempt" + std::to_string(attempt));
      spec.log_path = dir + "/rank-5.log";
      spec.log_header = "===== attempt " + std::to_string(attempt) + " =====";
      REQUIRE(supervisor.Start({spec}).ok());
      Driver driver(supervisor);
      REQUIRE(driver.Until([&] { return supervisor.Idle(); }));
    }
  }
  std::string log = ReadFile(dir + "/rank-5.log");
  CHECK(log == "===== attempt 1 =====\nvalue=attempt1\n===== attempt 2 =====\nvalue=attempt2\n");
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("orphaned grandchildren are reaped, never left as zombies", "[integration]") {
  DescendantGuard guard;
  {
    Supervisor supervisor;
    // The leader exits at once; its background child is re-parented to us.
    REQUIRE(supervisor.Start({Script(0, "(sleep 0.2; exit 0) & echo spawned; exit 0")}).ok());
    Driver driver(supervisor);
    REQUIRE(driver.Until([&] { return supervisor.Idle() && Descendants().empty(); }));
    CHECK(driver.Saw("spawned"));
  }
  CHECK(Eventually(NoDescendantsLeft));
}

TEST_CASE("a missing executable starts nothing and names the command", "[integration]") {
  DescendantGuard guard;
  Supervisor supervisor;
  ProcessSpec ok_spec = Script(0, "sleep 30");
  ProcessSpec missing;
  missing.global_rank = 1;
  missing.argv = {"peregrine-no-such-trainer"};
  missing.env = {"PATH=/usr/bin:/bin"};
  absl::Status status = supervisor.Start({ok_spec, missing});
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK(std::string(status.message()).find("peregrine-no-such-trainer") != std::string::npos);
  CHECK(supervisor.Idle());
  CHECK(Descendants().empty());
}

TEST_CASE("RunTool returns output, exit status and enforces its timeout", "[integration]") {
  DescendantGuard guard;
  auto run = RunTool({"sh", "-c", "echo hello; exit 3"}, absl::Seconds(30), 1024);
  REQUIRE(run.ok());
  CHECK(run->output == "hello\n");
  CHECK(run->exit_code == 3);
  CHECK_FALSE(run->timed_out);

  auto slow = RunTool({"sh", "-c", "echo partial; exec sleep 30"}, absl::Milliseconds(300), 1024);
  REQUIRE(slow.ok());
  CHECK(slow->timed_out);
  CHECK(slow->output == "partial\n");

  auto big = RunTool({"sh", "-c", "i=0; while [ $i -lt 200 ]; do echo 0123456789; i=$((i+1)); done"},
                     absl::Seconds(30), 100);
  REQUIRE(big.ok());
  CHECK(big->output.rfind("0123456789", 0) == 0);
  CHECK(big->output.find("[output truncated]") != std::string::npos);

  CHECK(RunTool({"peregrine-no-such-tool"}, absl::Seconds(1), 10).status().code() == absl::StatusCode::kNotFound);
  CHECK(Eventually(NoDescendantsLeft));
}

}  // namespace
}  // namespace peregrine
