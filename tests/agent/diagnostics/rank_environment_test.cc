// RankEnvironment and NcclTimeoutMs: the environment and NCCL timeout of the ranks the
// NCCL kinds (alignment, all_to_all / all_gather, p2p_rounds, replay) start.
#include <catch2/catch.hpp>

#include "agent/diagnostics/diagnostic_invocation.h"

namespace peregrine {
namespace {

TEST_CASE("RankEnvironment: torchrun's variables over the training environment", "[unit]") {
  DiagnosticInvocation inv;
  inv.machine_id = "7";
  inv.gpus = 4;
  inv.env = {{"PATH", "/bin"}, {"RANK", "stale"}, {"NCCL_DEBUG", "WARN"}};
  inv.code_env = {{"NCCL_DEBUG", "INFO"}};
  const std::map<std::string, std::string> env = RankEnvironment(inv, {8, 16, "10.0.0.2", 29555}, 3, 4500);
  const std::map<std::string, std::string> want = {
      {"PATH", "/bin"},          {"NCCL_DEBUG", "INFO"},         {"RANK", "11"},
      {"WORLD_SIZE", "16"},      {"LOCAL_RANK", "3"},            {"LOCAL_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "10.0.0.2"}, {"MASTER_PORT", "29555"},    {"PEREGRINE_MACHINE_ID", "7"},
      {"PEREGRINE_NCCL_TIMEOUT_MS", "4500"}};
  CHECK(env == want);
}

TEST_CASE("NcclTimeoutMs: the time left until the deadline, at least a second", "[unit]") {
  DiagnosticInvocation inv;
  const absl::Time now = absl::FromUnixSeconds(1000);
  struct Case {
    absl::Duration left;
    int64_t want_ms;
  };
  for (const Case& c : std::vector<Case>{{absl::Seconds(30), 30000},
                                         {absl::Milliseconds(1500), 1500},
                                         {absl::Milliseconds(200), 1000},
                                         {-absl::Seconds(5), 1000}}) {
    inv.deadline = now + c.left;
    INFO("left " << absl::FormatDuration(c.left));
    CHECK(NcclTimeoutMs(inv, now) == c.want_ms);
  }
}

}  // namespace
}  // namespace peregrine
