// `peregrinectl analyze nccl` on binary NCCL rings: a real ring written by
// libperegrine_nccl.so preloaded into sim-trainer over sim's libnccl.so.2 (healthy, and with
// a compute slowdown injected through the sim fault table mid-run), then truncated and
// garbage files that must fail with a clear error.
#ifdef PEREGRINE_HAVE_SIM_NCCL

#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sim/fault/fault_control.h"
#include "tests/cli/analyze/analyze_test_util.h"
#include "tests/agent/nccl_hook/probe_process.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using testing::ReadFile;
using testing::WriteFile;

// The single ring file in `dir`.
std::string OnlyRing(const std::string& dir) {
  std::vector<std::string> rings;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".ring") rings.push_back(e.path().string());
  }
  REQUIRE(rings.size() == 1);
  return rings[0];
}

// Runs a 1-rank sim-trainer with the hook preloaded, writing its ring into `dir`. With a
// fault table, `on_step` is called once the trainer has logged step `at_step`.
struct TrainerRun {
  std::string ring;
  std::string output;
};
TrainerRun RunTrainer(const testing::TempDir& dir, int steps, const std::string& faults = "",
                      int at_step = -1, const std::function<void()>& on_step = {}) {
  const std::string out = dir.path() + "/trainer.out";
  testing::Child trainer(
      {std::string(PEREGRINE_BINARY_DIR) + "/bin/sim-trainer", "--steps", std::to_string(steps),
       "--compute-ms", "4"},
      {{"LD_LIBRARY_PATH", testing::SimNcclDir()},
       {"LD_PRELOAD", testing::HookPath()},
       {"PEREGRINE_NCCL_RING_DIR", dir.path()},
       {"PEREGRINE_SIM_FAULTS", faults},
       {"PEREGRINE_MACHINE_ID", "0"},
       {"RANK", "0"},
       {"WORLD_SIZE", "1"},
       {"LOCAL_RANK", "0"},
       {"LOCAL_WORLD_SIZE", "1"},
       {"MASTER_ADDR", ""},
       {"MASTER_PORT", ""},
       {"PEREGRINE_NCCL_PROFILING", ""},
       {"PEREGRINE_NCCL_TRAP", ""}},
      out);
  if (on_step) {
    const std::string marker = "step=" + std::to_string(at_step) + " ";
    REQUIRE(testing::Eventually([&] {
      std::error_code ec;
      return std::filesystem::exists(out, ec) && ReadFile(out).find(marker) != std::string::npos;
    }));
    on_step();
  }
  const int rc = trainer.Wait();
  const std::string output = ReadFile(out);
  INFO(output);
  REQUIRE(rc == 0);
  return {OnlyRing(dir.path()), output};
}

TEST_CASE("analyze nccl: a real ring file from the hook over sim-trainer", "[integration]") {
  testing::TempDir dir;
  const TrainerRun run = RunTrainer(dir, 120);
  const nlohmann::json j = Analyze({"nccl", run.ring, "--json"}).Json();
  CHECK(j["format"] == "peregrine-ring");
  REQUIRE(j["streams"].size() == 1);
  const nlohmann::json& s = j["streams"][0];
  CHECK(s["rank"] == 0);
  CHECK(s["period"].get<int>() > 0);
  // One iteration per step after the first (an iteration spans two anchors).
  CHECK(s["stats"]["count"].get<int>() >= 115);
  CHECK(s["stats"]["count"].get<int>() <= 120);
  // The trainer's own iteration times (iter_ms= in its log) bracket the median.
  std::vector<double> logged;
  for (size_t p = run.output.find("iter_ms="); p != std::string::npos;
       p = run.output.find("iter_ms=", p + 1)) {
    logged.push_back(std::stod(run.output.substr(p + 8)));
  }
  REQUIRE(logged.size() >= 100);
  std::sort(logged.begin(), logged.end());
  const double median = s["stats"]["median"].get<double>();
  CHECK(median >= 0.8 * logged[logged.size() / 2]);
  CHECK(median <= 1.25 * logged[logged.size() / 2]);
  CHECK(s["changes"]["slowdowns"].empty());

  // The text report names the format and the ring's process.
  const analyze_test::Result text = Analyze({"nccl", run.ring});
  CHECK(text.code == 0);
  CHECK(text.out.find("peregrine-ring") != std::string::npos);
  CHECK(text.out.find("rank 0 (pid ") != std::string::npos);
}

TEST_CASE("analyze nccl: a ring with a compute slowdown injected mid-run", "[integration]") {
  testing::TempDir dir;
  const std::string faults = dir.path() + "/faults";
  REQUIRE(sim::CreateFaultTable(faults).ok());
  const TrainerRun run = RunTrainer(dir, 260, faults, 100, [&] {
    sim::RankFault slow;
    slow.compute_slowdown = 2.0;
    REQUIRE(sim::SetRankFault(faults, 0, -1, slow).ok());
  });
  const nlohmann::json j = Analyze({"nccl", run.ring, "--json"}).Json();
  INFO(j.dump(1));
  const nlohmann::json& slowdowns = j["streams"][0]["changes"]["slowdowns"];
  REQUIRE(slowdowns.size() == 1);
  // Injected after step 100 was logged: the onset is at or after it, within a few steps.
  CHECK(slowdowns[0]["onsetStep"].get<int>() >= 99);
  CHECK(slowdowns[0]["onsetStep"].get<int>() <= 115);
  CHECK(slowdowns[0]["severity"].get<double>() >= 0.3);
}

TEST_CASE("analyze nccl: truncated and garbage ring files fail with a clear error", "[integration]") {
  testing::TempDir dir;
  const std::string bytes = ReadFile(RunTrainer(dir, 20).ring);
  REQUIRE(bytes.size() > 100000);
  struct Case {
    std::string name;
    std::string content;
    std::string message;
  };
  std::string bad_version = bytes.substr(0, 100000);
  bad_version[8] = '\x7f';  // RingHeader.version follows the 8-byte magic
  const std::vector<Case> cases = {
      {"header-only.ring", bytes.substr(0, 5000),
       "truncated Peregrine NCCL ring: 5000 bytes, smaller than its header and communicator table"},
      {"short-records.ring", bytes.substr(0, 100000),
       "truncated or corrupt Peregrine NCCL ring: capacity"},
      {"magic-then-garbage.ring", "PEGRRING" + std::string(50000, '\x5a'),
       "truncated or corrupt Peregrine NCCL ring: format version"},
      {"garbage.bin", std::string("\x01\x02\x00\x7f", 4) + std::string(3000, '\x00'),
       "binary data without the Peregrine ring magic"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::string path = dir.path() + "/" + c.name;
    WriteFile(path, c.content);
    const analyze_test::Result r = Analyze({"nccl", path});
    CHECK(r.code == 1);
    CHECK(r.err.find(path + ": ") != std::string::npos);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.err.find("peregrine-analyze-ring-") == std::string::npos);  // no temp path
  }
}

}  // namespace
}  // namespace peregrine

#endif  // PEREGRINE_HAVE_SIM_NCCL
