// sim-trainer's replay mode (PEREGRINE_REPLAY*): the same global data whatever the DP size,
// the same model whatever the pipeline split of its layers, exact bits printed per step.
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/diagnostics/diagnostic_invocation.h"
#include "agent/diagnostics/rank_processes.h"
#include "base/free_port.h"
#include "tests/agent/diagnostics/diagnostics_test_util.h"

namespace peregrine::diagtest {
namespace {

using ::peregrine::testing::DescendantGuard;

// Runs a replay of `layers` layers under tp x pp x dp on one machine; returns rank 0's
// "[peregrine] step=..." lines' losses by step.
std::map<int, double> ReplayLosses(int tp, int pp, int dp, int layers) {
  absl::StatusOr<int> port = PickFreePort();
  REQUIRE(port.ok());
  const int world = tp * pp * dp;
  std::vector<DiagnosticProcess> processes;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> env = {absl::StrCat("RANK=", r), absl::StrCat("WORLD_SIZE=", world),
                                    absl::StrCat("LOCAL_RANK=", r), absl::StrCat("LOCAL_WORLD_SIZE=", world),
                                    "MASTER_ADDR=127.0.0.1", absl::StrCat("MASTER_PORT=", *port),
                                    absl::StrCat("PEREGRINE_TP=", tp), absl::StrCat("PEREGRINE_PP=", pp),
                                    absl::StrCat("PEREGRINE_DP=", dp), "PEREGRINE_RESUME_STEP=40",
                                    "PEREGRINE_REPLAY=1", absl::StrCat("PEREGRINE_REPLAY_LAYERS=", layers),
                                    "PEREGRINE_REPLAY_STEPS=3", "PEREGRINE_REPLAY_SEED=11"};
    processes.push_back(DiagnosticProcess{r,
                                          {std::string(PEREGRINE_BINARY_DIR) + "/bin/sim-trainer", "--steps", "100",
                                           "--hidden", "32", "--micro-batches", "4", "--seed", "3"},
                                          env});
  }
  RunProcessesOptions options;
  options.deadline = absl::Now() + absl::Seconds(120);
  absl::StatusOr<DiagnosticProcessesOutcome> run = RunProcesses(processes, options);
  REQUIRE(run.ok());
  REQUIRE_FALSE(run->timed_out);
  std::map<int, double> losses;
  int replay_lines = 0;
  for (const DiagnosticProcessOutcome& p : run->processes) {
    INFO(p.Describe());
    REQUIRE(p.ok());
    if (p.index != 0) continue;
    for (const std::string& line : p.lines) {
      replay_lines += absl::StartsWith(line, "[peregrine] replay step=") ? 1 : 0;
      int step = 0;
      double loss = 0;
      if (std::sscanf(line.c_str(), "[peregrine] step=%d loss=%lf", &step, &loss) == 2) losses[step] = loss;
    }
  }
  CHECK(replay_lines == 3);
  return losses;
}

TEST_CASE("sim-trainer replay: DP size and pipeline split do not change the replayed model", "[integration]") {
  DescendantGuard guard;
  const std::map<int, double> base = ReplayLosses(1, 1, 1, 2);
  REQUIRE(base.size() == 3);  // steps 1..3, whatever the resume step said
  CHECK(base.begin()->first == 1);
  for (const auto& [tp, pp, dp] : std::vector<std::tuple<int, int, int>>{{1, 1, 2}, {1, 2, 1}, {2, 1, 1}, {1, 2, 2}}) {
    INFO("tp " << tp << " pp " << pp << " dp " << dp);
    const std::map<int, double> other = ReplayLosses(tp, pp, dp, 2);
    REQUIRE(other.size() == 3);
    for (const auto& [step, loss] : base) CHECK(other.at(step) == Approx(loss).epsilon(1e-5));
  }
  // More layers is another model.
  CHECK(ReplayLosses(1, 1, 1, 4).at(1) != Approx(base.at(1)).epsilon(1e-6));
}

}  // namespace
}  // namespace peregrine::diagtest
