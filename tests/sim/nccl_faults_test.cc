// Fault injection through the stand-in NCCL with real processes: link delay and bandwidth
// caps slow only the faulted machine pair, nan/corrupt faults change results while the
// processes run, and a dead or silent peer yields an error instead of a hang.
#include <cstdlib>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "sim/fault/fault_control.h"
#include "tests/sim/sim_test_util.h"

namespace peregrine::testing {
namespace {

using sim::LinkFault;
using sim::RankFault;

// Four `serve` workers on machines 0,0,1,1 (local ranks 0,1,0,1).
class ServeCluster {
 public:
  explicit ServeCluster(const std::string& faults, const std::string& timeout_ms = "") {
    const std::string id = NewIdHex();
    for (int r = 0; r < 4; ++r) {
      ChildProcess::Options o;
      o.argv = {WorkerPath(), "serve"};
      o.env = {{"RANK", std::to_string(r)},
               {"WORLD_SIZE", "4"},
               {"PEREGRINE_TEST_NCCL_ID", id},
               {"PEREGRINE_MACHINE_ID", std::to_string(r / 2)},
               {"LOCAL_RANK", std::to_string(r % 2)},
               {"PEREGRINE_SIM_FAULTS", faults},
               {"PEREGRINE_NCCL_TIMEOUT_MS", timeout_ms}};
      o.pipe_stdin = true;
      o.pipe_stdout = true;
      ranks_.push_back(ChildProcess::Start(o));
    }
  }
  bool Ready() {
    for (auto& r : ranks_) {
      if (r == nullptr || r->ReadLine(kGenerous).value_or("") != "ready") return false;
    }
    return true;
  }
  // Sends `cmd` to the given ranks (all when empty) and returns their answers in order.
  std::vector<std::string> Run(const std::string& cmd, std::vector<int> which = {}) {
    if (which.empty()) which = {0, 1, 2, 3};
    for (int r : which) ranks_[r]->WriteLine(cmd);
    std::vector<std::string> out;
    for (int r : which) out.push_back(ranks_[r]->ReadLine(kGenerous).value_or("<no answer>"));
    return out;
  }
  ChildProcess& rank(int r) { return *ranks_[r]; }
  ~ServeCluster() {
    for (auto& r : ranks_) {
      if (r != nullptr) r->WriteLine("exit");
    }
    for (auto& r : ranks_) {
      if (r != nullptr) r->Wait(std::chrono::seconds(10));
    }
  }

 private:
  std::vector<std::unique_ptr<ChildProcess>> ranks_;
};

// The four workers reading a fault table of their own, started and ready.
struct FaultedCluster {
  FaultedCluster() { REQUIRE(ranks.Ready()); }

  FreshFaultTable table;
  ServeCluster ranks{table.path};
};

long long Nanos(const std::string& answer, const std::string& prefix) {
  if (answer.rfind(prefix + " ", 0) != 0) return -1;
  return std::atoll(answer.c_str() + prefix.size() + 1);
}

TEST_CASE("link delay slows transfers between the faulted machines only", "[integration]") {
  FaultedCluster cluster;
  ServeCluster& c = cluster.ranks;
  const std::string& faults = cluster.table.path;
  const int rounds = 10;
  const int64_t delay_us = 40000;
  LinkFault slow;
  slow.delay_us = delay_us;
  REQUIRE(sim::SetLinkFault(faults, 0, 1, slow, /*both_directions=*/true).ok());
  // Rank 0 (machine 0) <-> rank 2 (machine 1): every message crosses the faulted link.
  const std::string cross = "pingpong 0 2 " + std::to_string(rounds);
  const auto cross_answers = c.Run(cross);
  const long long cross_ns = Nanos(cross_answers[0], "pingpong");
  // Rank 0 <-> rank 1, both on machine 0: untouched.
  const auto local_answers = c.Run("pingpong 0 1 " + std::to_string(rounds));
  const long long local_ns = Nanos(local_answers[0], "pingpong");
  INFO("cross-machine " << cross_ns << " ns, same-machine " << local_ns << " ns");
  REQUIRE(cross_ns > 0);
  REQUIRE(local_ns > 0);
  // Each round trip carries two delayed messages: a hard lower bound, not a speed guess.
  CHECK(cross_ns >= 2LL * rounds * delay_us * 1000);
  CHECK(local_ns < cross_ns);
  // Clearing the fault while the processes run removes the delay's floor.
  REQUIRE(sim::ClearFaults(faults).ok());
  const long long healed_ns = Nanos(c.Run(cross)[0], "pingpong");
  REQUIRE(healed_ns > 0);
  CHECK(healed_ns < cross_ns);
}

TEST_CASE("bandwidth cap paces payload between machines", "[integration]") {
  FaultedCluster cluster;
  ServeCluster& c = cluster.ranks;
  const std::string& faults = cluster.table.path;
  LinkFault cap;
  cap.bandwidth_bytes_per_s = 2e6;
  REQUIRE(sim::SetLinkFault(faults, 1, 0, cap).ok());  // machine 1 -> machine 0 only
  const size_t bytes = 1 << 20;
  const auto capped = c.Run("bulk 3 0 " + std::to_string(bytes));
  CHECK(capped[0] == "bulk ok");
  const long long capped_ns = Nanos(capped[3], "bulk");
  // The other direction is not capped.
  const auto free = c.Run("bulk 0 3 " + std::to_string(bytes));
  CHECK(free[3] == "bulk ok");
  const long long free_ns = Nanos(free[0], "bulk");
  INFO("capped " << capped_ns << " ns, uncapped " << free_ns << " ns");
  REQUIRE(capped_ns > 0);
  REQUIRE(free_ns > 0);
  CHECK(capped_ns >= static_cast<long long>(bytes / 2e6 * 1e9));
  CHECK(free_ns < capped_ns);
}

TEST_CASE("nan and corrupt faults from one GPU change results while running", "[integration]") {
  FaultedCluster cluster;
  ServeCluster& c = cluster.ranks;
  const std::string& faults = cluster.table.path;
  for (const auto& a : c.Run("allreduce")) CHECK(a == "allreduce exact");
  RankFault nan;
  nan.nan = true;
  REQUIRE(sim::SetRankFault(faults, 1, 1, nan).ok());  // rank 3
  for (const auto& a : c.Run("allreduce")) CHECK(a == "allreduce nan");
  RankFault corrupt;
  corrupt.corrupt = true;
  REQUIRE(sim::SetRankFault(faults, 1, 1, corrupt).ok());
  for (const auto& a : c.Run("allreduce")) {
    REQUIRE(a.rfind("allreduce off ", 0) == 0);
    const double rel = std::atof(a.c_str() + 14);
    CHECK(rel > 0);
    // One contribution (|v| <= 7) scaled by 1 + 1e-3, relative to a sum of magnitude >= 1.
    CHECK(rel <= 7.01e-3);
  }
  // A fault on another machine id (a replaced machine) does not touch these ranks.
  REQUIRE(sim::ClearFaults(faults).ok());
  REQUIRE(sim::SetRankFault(faults, 7, -1, nan).ok());
  for (const auto& a : c.Run("allreduce")) CHECK(a == "allreduce exact");
}

TEST_CASE("nvlink corrupts payloads inside the machine only, link-corrupt between machines only", "[integration]") {
  FaultedCluster cluster;
  ServeCluster& c = cluster.ranks;
  const std::string& faults = cluster.table.path;
  const std::string bytes = std::to_string(1 << 16);
  RankFault nvlink;
  nvlink.intra_corrupt = true;
  REQUIRE(sim::SetRankFault(faults, 1, -1, nvlink).ok());  // machine 1 = ranks 2, 3
  CHECK(c.Run("bulk 2 3 " + bytes)[3] == "bulk bad");  // inside machine 1
  CHECK(c.Run("bulk 3 2 " + bytes)[2] == "bulk bad");
  CHECK(c.Run("bulk 2 0 " + bytes)[0] == "bulk ok");   // machine 1 -> machine 0
  CHECK(c.Run("bulk 0 1 " + bytes)[1] == "bulk ok");   // inside healthy machine 0
  for (const auto& a : c.Run("allreduce")) CHECK(a.rfind("allreduce off ", 0) == 0);
  REQUIRE(sim::ClearFaults(faults).ok());
  LinkFault nic;
  nic.corrupt = true;
  REQUIRE(sim::SetLinkFault(faults, 1, -1, nic, /*both_directions=*/true).ok());  // machine 1's NIC
  CHECK(c.Run("bulk 2 0 " + bytes)[0] == "bulk bad");
  CHECK(c.Run("bulk 0 3 " + bytes)[3] == "bulk bad");
  CHECK(c.Run("bulk 2 3 " + bytes)[3] == "bulk ok");
  CHECK(c.Run("bulk 0 1 " + bytes)[1] == "bulk ok");
  REQUIRE(sim::ClearFaults(faults).ok());
  for (const auto& a : c.Run("allreduce")) CHECK(a == "allreduce exact");
}

TEST_CASE("a dead peer makes the others fail instead of hanging", "[integration]") {
  ServeCluster c("");
  REQUIRE(c.Ready());
  for (const auto& a : c.Run("allreduce")) CHECK(a == "allreduce exact");
  c.rank(2).WriteLine("die");
  REQUIRE(ExitedWith(c.rank(2).Wait(kGenerous), 9));
  // Rank 0 is not a ring neighbour of rank 2: it learns through the neighbours' failure.
  for (const auto& a : c.Run("allreduce", {0, 1, 3})) {
    CHECK(a.rfind("allreduce error ", 0) == 0);
  }
}

TEST_CASE("PEREGRINE_NCCL_TIMEOUT_MS turns a silent peer into an error", "[integration]") {
  ServeCluster c("", "1500");
  REQUIRE(c.Ready());
  // Rank 1 never joins the collective (it waits for a command that does not come).
  const auto answers = c.Run("allreduce", {0, 2, 3});
  for (const auto& a : answers) {
    CHECK((a == "allreduce error 2" || a == "allreduce error 6"));
  }
}

}  // namespace
}  // namespace peregrine::testing
