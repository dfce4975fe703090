// peregrine-linkcheck on 4 local processes (4 stand-in machines, one rank each) over the
// stand-in NCCL: a link fault injected between two machines through the fault table is
// flagged as exactly that link, and the JSON report holds every ring link.
#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sim/fault/fault_control.h"
#include "tests/e2e/e2e_util.h"
#include "tests/testing/child_process.h"
#include "tests/testing/files.h"
#include "tests/testing/ports.h"

namespace peregrine::e2e {
namespace {

using testing::ChildProcess;

using testing::FreeLoopbackPort;
using testing::ReadFileIfExists;

TEST_CASE("peregrine-linkcheck flags exactly the link with an injected fault", "[integration]") {
  TempDir dir;
  const std::string faults = dir.path() + "/faults.bin";
  REQUIRE(sim::CreateFaultTable(faults).ok());
  sim::LinkFault fault;
  fault.delay_us = 20000;
  // Machines 1 and 2, both directions: only ring link 1 -> 2 (data out, ack back) crosses it.
  REQUIRE(sim::SetLinkFault(faults, 1, 2, fault, /*both_directions=*/true).ok());

  const int port = FreeLoopbackPort();
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < 4; ++r) {
    ChildProcess::Options o;
    o.argv = {PEREGRINE_BINARY_DIR "/bin/peregrine-linkcheck", "--bytes", "1048576", "--repeats", "5",
              "--slow-ratio", "3", "--init-timeout-s", "60"};
    o.env = {{"RANK", std::to_string(r)},        {"WORLD_SIZE", "4"},
             {"LOCAL_RANK", "0"},                {"MASTER_ADDR", "127.0.0.1"},
             {"MASTER_PORT", std::to_string(port)}, {"PEREGRINE_MACHINE_ID", std::to_string(r)},
             {"PEREGRINE_SIM_FAULTS", faults}};
    o.stdout_path = dir.path() + "/out." + std::to_string(r);
    o.stderr_path = dir.path() + "/err." + std::to_string(r);
    ranks.push_back(ChildProcess::Start(o));
    REQUIRE(ranks.back() != nullptr);
  }
  std::vector<int> codes;
  for (auto& r : ranks) {
    std::optional<int> status = r->Wait(std::chrono::seconds(120));
    REQUIRE(status.has_value());
    REQUIRE(WIFEXITED(*status));
    codes.push_back(WEXITSTATUS(*status));
  }
  const std::string out = ReadFileIfExists(dir.path() + "/out.0");
  INFO(out << ReadFileIfExists(dir.path() + "/err.0"));
  for (int c : codes) CHECK(c == 1);  // a slow link was found (every rank knows the verdict)
  const nlohmann::json report = nlohmann::json::parse(out);
  CHECK(report["world"] == 4);
  CHECK(report["topology"] == "ring");
  REQUIRE(report["links"].size() == 4);  // 0->1, 2->3 | 1->2, 3->0
  const auto& verdict = report["verdict"];
  REQUIRE(verdict["slow_links"].size() == 1);
  CHECK(verdict["slow_links"][0]["sender"] == 1);
  CHECK(verdict["slow_links"][0]["receiver"] == 2);
  CHECK(verdict["slow_links"][0]["seconds"].get<double>() >= 0.02);
  CHECK(verdict["slow_ranks"].empty());
  std::printf("[failslow_e2e] linkcheck: link 1->2 %.1f ms = %.1fx the median link (%.3f ms)\n",
              verdict["slow_links"][0]["seconds"].get<double>() * 1e3,
              verdict["slow_links"][0]["ratio"].get<double>(), verdict["median_seconds"].get<double>() * 1e3);
}

TEST_CASE("peregrine-linkcheck refuses a bad --plan before joining the world, naming what is wrong", "[integration]") {
  TempDir dir;
  const struct {
    const char* plan;
    const char* error;
  } cases[] = {
      {"r0:0>1,1>0", "--plan: rank 1 used twice in round r0 (transfer \"1>0\")"},
      {"r0:0>2", "--plan: bad transfer \"0>2\" in r0"},
      {"garbage", "--plan: round 0 must start with \"r0:\", got \"garbage\""},
  };
  for (const auto& c : cases) {
    INFO(c.plan);
    ChildProcess::Options o;
    // Nothing listens on the port: a plan that passed would fail later, with another code.
    o.argv = {PEREGRINE_BINARY_DIR "/bin/peregrine-linkcheck", "--plan", c.plan, "--init-timeout-s", "1"};
    o.env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}};
    o.stderr_path = dir.path() + "/err";
    auto p = ChildProcess::Start(o);
    REQUIRE(p != nullptr);
    std::optional<int> status = p->Wait(std::chrono::seconds(60));
    const std::string err = ReadFileIfExists(dir.path() + "/err");
    INFO(err);
    CHECK(testing::ExitedWith(status, 2));
    CHECK(err.find(c.error) != std::string::npos);
  }
}

TEST_CASE("peregrine-gemm falls back to the CPU without CUDA and reports GFLOP/s", "[integration]") {
  TempDir dir;
  ChildProcess::Options o;
  o.argv = {PEREGRINE_BINARY_DIR "/bin/peregrine-gemm", "--n", "128", "--seconds", "0"};
  o.stdout_path = dir.path() + "/out";
  auto p = ChildProcess::Start(o);
  REQUIRE(p != nullptr);
  std::optional<int> status = p->Wait(std::chrono::seconds(120));
  REQUIRE(status.has_value());
  CHECK((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
  std::istringstream lines(ReadFileIfExists(dir.path() + "/out"));
  std::string line;
  int cpu = 0, cuda = 0;
  while (std::getline(lines, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("gflops")) {
      CHECK(j["gflops"].get<double>() > 0);
      if (j["device"] == "cpu") {
        ++cpu;
        CHECK(j["max_error"].get<double>() < 1e-2);
      } else {
        ++cuda;
      }
    }
  }
  // Without a GPU both CPU precisions run; with one, the three cuBLAS precisions per device.
  CHECK(((cpu == 2 && cuda == 0) || (cpu == 0 && cuda >= 3)));
}

}  // namespace
}  // namespace peregrine::e2e
