// peregrine-agent: flags -> AgentOptions -> Agent -> wait for termination.
#include <signal.h>
#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/agent_flags.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<peregrine::ParsedAgentFlags> parsed =
      peregrine::ParseAgentFlags(args, [](std::string_view name) -> std::optional<std::string> {
        const char* value = std::getenv(std::string(name).c_str());
        if (value == nullptr) return std::nullopt;
        return std::string(value);
      });
  if (!parsed.ok()) {
    std::fprintf(stderr, "peregrine-agent: %s\n%s", std::string(parsed.status().message()).c_str(),
                 peregrine::AgentUsage().c_str());
    return 2;
  }
  if (parsed->help) {
    std::fputs(peregrine::AgentUsage().c_str(), stdout);
    return 0;
  }
  // A write to a closed socket must fail with EPIPE, not kill the agent.
  ::signal(SIGPIPE, SIG_IGN);
  // The agent holds its controller credential in memory: not dumpable, so processes of
  // the same user (the training ranks) cannot read /proc/<agent>/mem or environ or ptrace
  // it. Its children are dumpable again after their execve.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    std::perror("peregrine-agent: prctl(PR_SET_DUMPABLE, 0)");
    return 1;
  }
  peregrine::AgentOptions options = parsed->options;
  options.handle_signals = true;
  absl::StatusOr<std::unique_ptr<peregrine::Agent>> agent = peregrine::Agent::BuildAndStart(options);
  if (!agent.ok()) {
    std::fprintf(stderr, "peregrine-agent: %s\n", agent.status().ToString().c_str());
    return 1;
  }
  int code = (*agent)->Wait();
  agent->reset();
  return code;
}
