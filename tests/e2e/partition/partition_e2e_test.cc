// A network partition between every agent and the controller, end to end: the real
// local-mode controller, agent processes and sim-trainer ranks, the agents dialing the
// controller through the kit's TcpProxy. The proxy is blackholed for
// PEREGRINE_PARTITION_SECONDS (default 30) while training runs: nothing is evicted, the
// controller shows the agents unreachable, the ranks keep completing steps (read from their
// own log files, which the agent's loop writes from the ranks' stdout pipes: a blocked loop
// would stop them), and after the heal the job finishes. scripts/partition.sh runs it with
// a longer blackhole; the figures are printed as "partition: ...".
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "controller/core/agent_reach.h"
#include "controller/core/conditions.h"
#include "tests/e2e/e2e_util.h"
#include "tests/testing/ports.h"
#include "tests/testing/tcp_proxy.h"

namespace peregrine::e2e {
namespace {

int BlackholeSeconds() {
  const char* v = std::getenv("PEREGRINE_PARTITION_SECONDS");
  if (v == nullptr || *v == '\0') return 30;
  const int s = std::atoi(v);
  REQUIRE(s > 0);
  return s;
}

// The last "[peregrine] step=N" of every rank, from <state_dir>/logs/<pod>/rank-<r>.log.
std::map<std::string, uint64_t> RankSteps(const std::string& state_dir) {
  static const std::regex step_re(R"(\[peregrine\] step=(\d+) )");
  std::map<std::string, uint64_t> steps;
  std::error_code ec;
  for (const auto& pod : std::filesystem::directory_iterator(state_dir + "/logs", ec)) {
    if (!pod.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(pod.path(), ec)) {
      const std::string name = f.path().filename().string();
      if (name.rfind("rank-", 0) != 0) continue;
      std::ifstream in(f.path());
      std::string line;
      uint64_t last = 0;
      std::smatch m;
      while (std::getline(in, line)) {
        if (std::regex_search(line, m, step_re)) last = std::max<uint64_t>(last, std::stoull(m[1]));
      }
      steps[pod.path().filename().string() + "/" + name] = last;
    }
  }
  return steps;
}

uint64_t MinStep(const std::map<std::string, uint64_t>& s) {
  uint64_t m = UINT64_MAX;
  for (const auto& [rank, step] : s) m = std::min(m, step);
  return s.empty() ? 0 : m;
}
uint64_t MaxStep(const std::map<std::string, uint64_t>& s) {
  uint64_t m = 0;
  for (const auto& [rank, step] : s) m = std::max(m, step);
  return m;
}

TEST_CASE("A blackholed agent-controller link evicts nothing, training keeps stepping, the job finishes", "[e2e]") {
  const int blackhole_s = BlackholeSeconds();
  TempDir dir;
  // About 5 steps a second at most (2 micro-batches of 100 ms): enough steps to train
  // through the blackhole and some time after it.
  const int steps = 5 * (blackhole_s + 30) + 40;
  TrainingJob job = ShortDemoJob(steps);
  job.spec.code.command = {"sim-trainer", "--steps", std::to_string(steps), "--micro-batches", "2",
                           "--hidden", "64", "--compute-ms", "100"};
  job.spec.fault_tolerance.heartbeat_timeout_seconds = 10;
  LocalModeOptions options = Options(dir.path());
  options.grpc_port = testing::FreeLoopbackPort();
  testing::TcpProxy proxy(options.grpc_port);
  options.agent_controller_address = absl::StrCat("127.0.0.1:", proxy.port());
  ModeGuard mode = StartMode(job, options);
  const JobStatus before = WaitRunning(*mode, 10);
  REQUIRE(proxy.connections_open() >= 4);

  const std::map<std::string, uint64_t> at_cut = RankSteps(dir.path());
  REQUIRE(at_cut.size() == 8);
  proxy.Blackhole();
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::seconds(blackhole_s);
  bool shown_unreachable = false;
  size_t evicted_during = 0;
  // The blackhole lasts its full duration (the experiment); meanwhile the controller's
  // status is sampled as it changes.
  while (std::chrono::steady_clock::now() < end) {
    const int left_ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count());
    mode->controller().WaitFor([](const JobStatus&) { return false; }, std::clamp(left_ms, 1, 1000));
    const JobStatus s = mode->controller().Snapshot();
    evicted_during = std::max(evicted_during, s.evicted.size());
    const Condition* c = FindCondition(s, kAgentUnreachableCondition);
    shown_unreachable = shown_unreachable || (c != nullptr && c->status == ConditionStatus::kTrue);
  }
  const std::map<std::string, uint64_t> at_heal = RankSteps(dir.path());
  const JobStatus during = mode->controller().Snapshot();
  proxy.Heal();

  const uint64_t stepped = MinStep(at_heal) - std::min(MinStep(at_heal), MaxStep(at_cut));
  const JobStatus st = WaitFinished(*mode);
  std::cout << "partition: blackhole " << blackhole_s << " s, evictions " << st.evicted.size()
            << " (during the blackhole " << evicted_during << "), incidents " << st.incidents.size()
            << ", steps every rank completed during the blackhole " << stepped << " (ranks at " << MinStep(at_cut)
            << ".." << MaxStep(at_cut) << " at the cut, " << MinStep(at_heal) << ".." << MaxStep(at_heal)
            << " at the heal), job " << JobPhaseName(st.phase) << " at step " << st.last_completed_step << "\n";
  INFO(TimelineText(*mode, st));
  CHECK(evicted_during == 0);
  CHECK(st.evicted.empty());
  CHECK(st.incidents.empty());
  CHECK(shown_unreachable);
  CHECK(during.evicted.empty());
  // Every rank completed steps while the controller heard nothing.
  CHECK(MinStep(at_heal) > MaxStep(at_cut));
  CHECK(st.phase == JobPhase::kSucceeded);
  CHECK(st.last_completed_step == static_cast<uint64_t>(steps));
  CHECK(st.slots.size() == before.slots.size());
  for (size_t i = 0; i < st.slots.size(); ++i) CHECK(st.slots[i].machine_id == before.slots[i].machine_id);
}

}  // namespace
}  // namespace peregrine::e2e
