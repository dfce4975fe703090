// Fixtures of the fail-slow policy tests (failslow_policy_test.cc, failslow_p2p_test.cc):
// one connected agent per machine slot of job "j" at attempt 1 (pod "j-m<slot>", machine
// "<10 + slot>"), the policy's input for them, and an agent's report of a verified
// slowdown of one rank. Header-only; layouts come from the kit (tests/testing/layout.h).
#ifndef PEREGRINE_TESTS_CONTROLLER_CORE_FAILSLOW_FIXTURES_H_
#define PEREGRINE_TESTS_CONTROLLER_CORE_FAILSLOW_FIXTURES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "controller/core/failslow_policy.h"
#include "tests/testing/layout.h"

namespace peregrine {

inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kNow = 1'700'000'000'000'000'000;

// One connected agent per machine slot (pod "j-m<slot>", machine "<10 + slot>"), attempt 1.
inline std::vector<AgentObservation> Agents(const ParallelLayout& layout) {
  std::vector<AgentObservation> out;
  for (int m = 0; m < layout.machines(); ++m) {
    AgentObservation a;
    a.pod = "j-m" + std::to_string(m);
    a.machine_id = std::to_string(10 + m);
    a.connected = true;
    a.attempt = 1;
    a.acked_attempt = 1;
    out.push_back(a);
  }
  return out;
}

// The policy's input for job "j" at attempt 1, slot m on machine "<10 + m>".
inline FailSlowPolicyInput Input(const ParallelLayout& layout, std::vector<AgentObservation> agents) {
  FailSlowPolicyInput in;
  in.job_name = "j";
  in.layout = &layout;
  in.attempt = 1;
  for (int m = 0; m < layout.machines(); ++m) in.slot_machines.push_back(std::to_string(10 + m));
  in.agents = std::move(agents);
  return in;
}

// The agent of `rank`'s machine reports it slow by `severity` (0.1 s iterations before)
// since `onset` (by default 3 s before kNow, plus `rank` ns).
inline void MarkSlow(std::vector<AgentObservation>& agents, const ParallelLayout& layout, int rank, double severity,
                     std::optional<int64_t> onset = std::nullopt) {
  RankFailSlowObservation& fs = agents[static_cast<size_t>(layout.MachineOf(rank))].fail_slow[rank];
  fs.slow = true;
  fs.onset = onset.value_or(kNow - 3000 * kMs + rank);
  fs.severity = severity;
  fs.before_seconds = 0.1;
  fs.after_seconds = 0.1 * (1 + severity);
}

}  // namespace peregrine

#endif  // PEREGRINE_TESTS_CONTROLLER_CORE_FAILSLOW_FIXTURES_H_
