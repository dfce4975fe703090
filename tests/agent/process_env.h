// EnvOf: a launched process's environment ("NAME=value" strings of a ProcessSpec) as a
// map, for tests of the agent's launch plan. Header-only: the agent and agent_checkpoint
// suites use it.
#ifndef PEREGRINE_TESTS_AGENT_PROCESS_ENV_H_
#define PEREGRINE_TESTS_AGENT_PROCESS_ENV_H_

#include <map>
#include <string>

#include "agent/supervisor.h"

namespace peregrine::testing {

inline std::map<std::string, std::string> EnvOf(const ProcessSpec& spec) {
  std::map<std::string, std::string> env;
  for (const std::string& e : spec.env) env[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  return env;
}

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_AGENT_PROCESS_ENV_H_
