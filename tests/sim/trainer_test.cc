// sim-trainer end to end: a TP=2 PP=2 DP=2 world of 8 real processes on the stand-in NCCL,
// with real checkpoint stores (a directory per rank, as the agent gives each rank).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "checkpoint/shard_format.h"
#include "sim/fault/fault_control.h"
#include "tests/sim/sim_test_util.h"

namespace peregrine::testing {
namespace {

struct StepLine {
  int step;
  std::string loss;
  std::string grad_norm;
  int mb = 0;           // micro-batches the rank ran
  double model_ms = 0;  // modelled device time (with --compute-ms)
  double iter_ms = 0;
  bool operator==(const StepLine& o) const {
    return step == o.step && loss == o.loss && grad_norm == o.grad_norm && mb == o.mb && model_ms == o.model_ms;
  }
};

struct RunResult {
  std::vector<std::optional<int>> statuses;
  std::vector<std::vector<StepLine>> lines;  // per rank
  std::vector<std::string> digests;          // per rank: the final weight digest
  std::vector<std::string> stderr_text;
};

// A checkpoint store per rank: <root>/rank-<r>, saving every `interval` steps (0: none).
struct Store {
  std::string root;  // empty: no store
  int interval = 0;
  std::string RankDir(int r) const { return root + "/rank-" + std::to_string(r); }
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Starts 8 ranks (4 machines x 2).
std::vector<std::unique_ptr<ChildProcess>> StartWorld(const TempDir& dir, const std::string& tag,
                                                      int steps, int resume_step,
                                                      const std::string& faults,
                                                      const std::vector<std::string>& extra,
                                                      const std::string& timeout_ms = "",
                                                      const Store& store = {},
                                                      const std::map<std::string, std::string>& env = {}) {
  const int port = FreeLoopbackPort();
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < 8; ++r) {
    ChildProcess::Options o;
    o.argv = {TrainerPath(), "--steps", std::to_string(steps), "--micro-batches", "4",
              "--hidden", "64", "--seed", "7"};
    o.argv.insert(o.argv.end(), extra.begin(), extra.end());
    o.env = {{"RANK", std::to_string(r)},           {"WORLD_SIZE", "8"},
             {"LOCAL_RANK", std::to_string(r % 2)}, {"LOCAL_WORLD_SIZE", "2"},
             {"MASTER_ADDR", "127.0.0.1"},          {"MASTER_PORT", std::to_string(port)},
             {"PEREGRINE_TP", "2"},                 {"PEREGRINE_PP", "2"},
             {"PEREGRINE_DP", "2"},                 {"PEREGRINE_RESUME_STEP", std::to_string(resume_step)},
             {"PEREGRINE_MACHINE_ID", std::to_string(r / 2)},
             {"PEREGRINE_SIM_FAULTS", faults},      {"PEREGRINE_NCCL_TIMEOUT_MS", timeout_ms}};
    if (!store.root.empty()) {
      std::filesystem::create_directories(store.RankDir(r));
      o.env["PEREGRINE_CHECKPOINT_DIR"] = store.RankDir(r);
      o.env["PEREGRINE_CHECKPOINT_INTERVAL"] = std::to_string(store.interval);
    }
    for (const auto& [k, v] : env) o.env[k] = v;
    o.stdout_path = dir.Path(tag + ".out." + std::to_string(r));
    o.stderr_path = dir.Path(tag + ".err." + std::to_string(r));
    ranks.push_back(ChildProcess::Start(o));
  }
  return ranks;
}

// Runs 8 ranks (4 machines x 2) and waits for all of them.
RunResult RunWorld(const TempDir& dir, const std::string& tag, int steps, int resume_step,
                   const std::string& faults, const std::vector<std::string>& extra = {},
                   const Store& store = {}, const std::map<std::string, std::string>& env = {}) {
  std::vector<std::unique_ptr<ChildProcess>> ranks =
      StartWorld(dir, tag, steps, resume_step, faults, extra, "", store, env);
  RunResult result;
  const std::regex line_re(
      R"(^\[peregrine\] step=(\d+) loss=(\S+) grad_norm=(\S+) iter_ms=([0-9.]+) mb=(\d+)(?: model_ms=([0-9.]+))?$)");
  const std::regex final_re(R"(^\[peregrine\] final step=(\d+) weight_digest=([0-9a-f]{64})$)");
  for (int r = 0; r < 8; ++r) {
    result.statuses.push_back(ranks[r] ? ranks[r]->Wait(kGenerous) : std::nullopt);
    std::vector<StepLine> lines;
    std::string digest;
    std::ifstream in(dir.Path(tag + ".out." + std::to_string(r)));
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (std::regex_match(line, m, line_re)) {
        lines.push_back(StepLine{std::stoi(m[1]), m[2], m[3], std::stoi(m[5]),
                                 m[6].matched ? std::stod(m[6]) : 0.0, std::stod(m[4])});
      } else if (digest.empty() && std::regex_match(line, m, final_re) && std::stoi(m[1]) == steps) {
        digest = m[2];
      } else {
        lines.push_back(StepLine{-1, line, ""});  // any other stdout line fails comparisons
      }
    }
    result.lines.push_back(lines);
    result.digests.push_back(digest);
    result.stderr_text.push_back(Slurp(dir.Path(tag + ".err." + std::to_string(r))));
  }
  return result;
}

TEST_CASE("sim-trainer: TP2 PP2 DP2 is deterministic across runs and ranks and resumes", "[e2e]") {
  TempDir dir;
  const RunResult a = RunWorld(dir, "a", 6, 0, "");
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r << " stderr: " << a.stderr_text[r]);
    REQUIRE(ExitedWith(a.statuses[r], 0));
    REQUIRE(a.lines[r].size() == 6);
    CHECK(a.lines[r] == a.lines[0]);
  }
  for (int s = 0; s < 6; ++s) CHECK(a.lines[0][s].step == s + 1);
  CHECK(a.lines[0][0].loss != a.lines[0][1].loss);  // the loss depends on the step's data

  const RunResult b = RunWorld(dir, "b", 6, 0, "", {"--dp-mode", "rs-ag"});
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r << " stderr: " << b.stderr_text[r]);
    REQUIRE(ExitedWith(b.statuses[r], 0));
    CHECK(b.lines[r] == a.lines[0]);
  }

  // Each rank's weights are its (TP, PP) shard, the same in both DP replicas.
  for (int r = 0; r < 8; ++r) {
    CHECK(a.digests[r].size() == 64);
    CHECK(b.digests[r] == a.digests[r]);
    CHECK(a.digests[r] == a.digests[r ^ 2]);  // rank r ^ 2: the same shard in the other DP replica
    if ((r & ~2) != 0) CHECK(a.digests[r] != a.digests[0]);  // another shard
  }
}

// Finishes every saved shard of `store` the way the agent does before it restarts ranks.
void FinishShards(const Store& store) {
  for (int r = 0; r < 8; ++r) {
    for (const auto& entry : std::filesystem::directory_iterator(store.RankDir(r))) {
      uint64_t step = 0;
      if (!checkpoint::ParseShardFileName(entry.path().filename(), &step)) continue;
      std::string bytes = Slurp(entry.path());
      REQUIRE(checkpoint::FinishShard(absl::MakeSpan(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size())).ok());
      std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << bytes;
    }
  }
}

TEST_CASE("sim-trainer: a resume from its checkpoint continues bit-identically, a lost state does not",
          "[e2e]") {
  TempDir dir;
  const RunResult full = RunWorld(dir, "full", 40, 0, "");
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r << " stderr: " << full.stderr_text[r]);
    REQUIRE(ExitedWith(full.statuses[r], 0));
    REQUIRE(full.lines[r].size() == 40);
    REQUIRE(full.digests[r].size() == 64);
  }
  const std::vector<StepLine> tail(full.lines[0].begin() + 20, full.lines[0].end());

  // 20 steps with a checkpoint every 10, then the rest from step 20's.
  const Store store{dir.Path("store"), 10};
  const RunResult first = RunWorld(dir, "first", 20, 0, "", {}, store);
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r << " stderr: " << first.stderr_text[r]);
    REQUIRE(ExitedWith(first.statuses[r], 0));
    CHECK(first.lines[r] == std::vector<StepLine>(full.lines[0].begin(), full.lines[0].begin() + 20));
    for (uint64_t step : {10, 20}) {
      CHECK(std::filesystem::exists(store.RankDir(r) + "/" + checkpoint::ShardFileName(step)));
    }
  }
  FinishShards(store);
  const RunResult resumed = RunWorld(dir, "resumed", 40, 20, "", {}, store);
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r << " stderr: " << resumed.stderr_text[r]);
    REQUIRE(ExitedWith(resumed.statuses[r], 0));
    CHECK(resumed.lines[r] == tail);
    CHECK(resumed.digests[r] == full.digests[r]);
  }

  // Resuming at step 20 without the state (no store): fresh weights, other losses.
  const RunResult lost = RunWorld(dir, "lost", 40, 20, "");
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r << " stderr: " << lost.stderr_text[r]);
    REQUIRE(ExitedWith(lost.statuses[r], 0));
    REQUIRE(lost.lines[r].size() == 20);
    CHECK(lost.lines[r].back().loss != full.lines[r].back().loss);
    CHECK(lost.digests[r] != full.digests[r]);
  }

  // A missing shard (rank 5) and a corrupt one (rank 2): those ranks refuse to resume.
  std::filesystem::remove(store.RankDir(5) + "/" + checkpoint::ShardFileName(20));
  {
    const std::string path = store.RankDir(2) + "/" + checkpoint::ShardFileName(20);
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(checkpoint::kShardHeaderBytes + 100);
    f.put('\x5a');
  }
  const RunResult broken = RunWorld(dir, "broken", 40, 20, "", {}, store);
  CHECK(ExitedWith(broken.statuses[5], 4));
  CHECK_THAT(broken.stderr_text[5], Catch::Contains("cannot resume at step 20: NOT_FOUND"));
  CHECK(ExitedWith(broken.statuses[2], 4));
  CHECK_THAT(broken.stderr_text[2], Catch::Contains("cannot resume at step 20: DATA_LOSS"));
  for (int r : {0, 1, 3, 4, 6, 7}) {
    INFO("rank " << r << " stderr: " << broken.stderr_text[r]);
    CHECK_FALSE(ExitedWith(broken.statuses[r], 0));
    CHECK(broken.digests[r].empty());
  }
}

TEST_CASE("sim-trainer: nan and corrupt faults show in the loss and a crash exits the rest with 3",
          "[e2e]") {
  TempDir dir;
  const std::string faults = dir.Path("faults");
  REQUIRE(sim::CreateFaultTable(faults).ok());
  const RunResult clean = RunWorld(dir, "clean", 2, 0, faults);
  for (int r = 0; r < 8; ++r) REQUIRE(ExitedWith(clean.statuses[r], 0));

  sim::RankFault corrupt;
  corrupt.corrupt = true;
  REQUIRE(sim::SetRankFault(faults, 2, 1, corrupt).ok());  // rank 5: TP 1, DP 0, PP 1
  const RunResult sdc = RunWorld(dir, "sdc", 2, 0, faults);
  for (int r = 0; r < 8; ++r) {
    REQUIRE(ExitedWith(sdc.statuses[r], 0));
    REQUIRE(sdc.lines[r].size() == 2);
    CHECK(sdc.lines[r] == sdc.lines[0]);
  }
  for (int s = 0; s < 2; ++s) {
    CHECK(sdc.lines[0][s].loss != clean.lines[0][s].loss);
    CHECK(sdc.lines[0][s].loss != "nan");
  }

  sim::RankFault nan;
  nan.nan = true;
  REQUIRE(sim::SetRankFault(faults, 2, 1, nan).ok());
  const RunResult poisoned = RunWorld(dir, "nan", 2, 0, faults);
  for (int r = 0; r < 8; ++r) {
    REQUIRE(ExitedWith(poisoned.statuses[r], 0));
    REQUIRE(poisoned.lines[r].size() == 2);
    CHECK((poisoned.lines[r][0].loss == "nan" || poisoned.lines[r][0].loss == "-nan"));
  }

  sim::RankFault crash;
  crash.crash = true;
  REQUIRE(sim::ClearFaults(faults).ok());
  REQUIRE(sim::SetRankFault(faults, 1, 0, crash).ok());  // rank 2
  const RunResult crashed = RunWorld(dir, "crash", 2, 0, faults);
  REQUIRE(crashed.statuses[2].has_value());
  CHECK(WIFSIGNALED(*crashed.statuses[2]));
  CHECK(crashed.stderr_text[2].find("CUDA error: an illegal memory access") != std::string::npos);
  for (int r = 0; r < 8; ++r) {
    if (r == 2) continue;
    INFO("rank " << r << " stderr: " << crashed.stderr_text[r]);
    CHECK(ExitedWith(crashed.statuses[r], 3));
    CHECK(crashed.stderr_text[r].find("NCCL error") != std::string::npos);
  }
}

TEST_CASE("sim-trainer: a compute slowdown on one GPU stretches every iteration", "[e2e]") {
  TempDir dir;
  const std::string faults = dir.Path("faults");
  REQUIRE(sim::CreateFaultTable(faults).ok());
  sim::RankFault slow;
  slow.compute_slowdown = 3.0;
  REQUIRE(sim::SetRankFault(faults, 3, 0, slow).ok());  // rank 6
  const RunResult r = RunWorld(dir, "slow", 2, 0, faults, {"--compute-ms", "10"});
  for (int k = 0; k < 8; ++k) REQUIRE(ExitedWith(r.statuses[k], 0));
  // The slowed rank alone spends >= 4 micro-batches x 10 ms x 3 per step; every rank waits
  // for it, so every iteration time has that floor.
  std::ifstream in(dir.Path("slow.out.0"));
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.find("iter_ms=") == std::string::npos) continue;  // the final digest line
    const double ms = std::atof(line.substr(line.find("iter_ms=") + 8).c_str());
    CHECK(ms >= 4 * 10 * 3);
    ++checked;
  }
  CHECK(checked == 2);
}

// A micro-batch plan file as the agent writes it (a temporary file renamed over it).
std::string PublishPlan(const TempDir& dir, const std::string& name, const std::string& counts, uint32_t global,
                        double scale, uint64_t from_step) {
  const std::string path = dir.Path(name);
  char scale_text[64];
  std::snprintf(scale_text, sizeof(scale_text), "%.17g", scale);
  {
    std::ofstream out(path + ".tmp");
    out << "version=1\nplan_id=1\nfrom_step=" << from_step << "\nglobal_micro_batches=" << global
        << "\ngradient_scale=" << scale_text << "\ncounts=" << counts << "\n";
  }
  std::filesystem::rename(path + ".tmp", path);
  return path;
}

std::vector<float> Weights(const std::string& path) {
  const std::string bytes = Slurp(path);
  std::vector<float> w(bytes.size() / sizeof(float));
  std::memcpy(w.data(), bytes.data(), w.size() * sizeof(float));
  return w;
}

// The largest |a - b| relative to max(1, |b|).
double MaxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / std::max(1.0, std::abs(double{b[i]})));
  }
  return a.size() == b.size() ? worst : INFINITY;
}

// DP replica of rank r in StartWorld's TP2 x DP2 x PP2 layout (rank = tp + 2 dp + 4 pp).
int DpOf(int r) { return (r >> 1) & 1; }

TEST_CASE("sim-trainer: a micro-batch plan moves micro-batches between DP replicas and keeps the update", "[e2e]") {
  TempDir dir;
  const int steps = 6;
  auto run = [&](const std::string& tag, const std::string& plan_path) {
    return RunWorld(dir, tag, steps, 0, "", {"--micro-batches", "2", "--weights-out", dir.Path(tag + ".w.{rank}")},
                    {}, {{"PEREGRINE_MICROBATCH_PLAN", plan_path}});
  };
  // Even split: DP=2 x 2 micro-batches (no plan file at the path).
  const RunResult even = run("even", dir.Path("no-plan"));
  // {1, 3} from step 1, and {3, 1} from step 3 (the even split before).
  const RunResult ahead = run("ahead", PublishPlan(dir, "plan13", "1,3", 4, 0.5, 1));
  const RunResult later = run("later", PublishPlan(dir, "plan31", "3,1", 4, 0.5, 3));
  for (int r = 0; r < 8; ++r) {
    INFO("rank " << r << " stderr: " << even.stderr_text[r] << ahead.stderr_text[r] << later.stderr_text[r]);
    REQUIRE(ExitedWith(even.statuses[r], 0));
    REQUIRE(ExitedWith(ahead.statuses[r], 0));
    REQUIRE(ExitedWith(later.statuses[r], 0));
    REQUIRE(even.lines[r].size() == steps);
    REQUIRE(ahead.lines[r].size() == steps);
    REQUIRE(later.lines[r].size() == steps);
    const std::vector<float> w_even = Weights(dir.Path("even.w." + std::to_string(r)));
    REQUIRE(!w_even.empty());
    for (const auto* planned : {&ahead, &later}) {
      const std::string tag = planned == &ahead ? "ahead" : "later";
      for (int s = 0; s < steps; ++s) {
        const StepLine& line = planned->lines[r][s];
        const int want = tag == "ahead" ? (DpOf(r) == 0 ? 1 : 3) : (s + 1 < 3 ? 2 : (DpOf(r) == 0 ? 3 : 1));
        CHECK(line.mb == want);
        CHECK(even.lines[r][s].mb == 2);
        // The same loss curve (the loss is over all of the step's micro-batches).
        CHECK(std::stod(line.loss) == Approx(std::stod(even.lines[r][s].loss)).epsilon(1e-6));
        CHECK(std::stod(line.grad_norm) == Approx(std::stod(even.lines[r][s].grad_norm)).epsilon(1e-5));
      }
      // The same final weights up to floating-point reordering.
      const double diff = MaxRelativeDifference(Weights(dir.Path(tag + ".w." + std::to_string(r))), w_even);
      INFO(tag << ": max relative weight difference " << diff);
      CHECK(diff <= 1e-6);
    }
  }
  // The comparison can tell: {1, 3} with the wrong scale (1/M instead of n/M) ends elsewhere.
  const RunResult wrong = run("wrong", PublishPlan(dir, "wrong", "1,3", 4, 0.25, 1));
  for (int r = 0; r < 8; ++r) {
    REQUIRE(ExitedWith(wrong.statuses[r], 0));
    CHECK(MaxRelativeDifference(Weights(dir.Path("wrong.w." + std::to_string(r))),
                                Weights(dir.Path("even.w." + std::to_string(r)))) > 1e-4);
  }
  // A garbage plan: every rank stops with exit code 5 naming the file and the field.
  const std::string garbage = PublishPlan(dir, "garbage", "1,x", 4, 0.5, 1);
  const RunResult refused = run("garbage", garbage);
  for (int r = 0; r < 8; ++r) {
    CHECK(ExitedWith(refused.statuses[r], 5));
    CHECK_THAT(refused.stderr_text[r], Catch::Contains("micro-batch plan " + garbage + ": ") &&
                                           Catch::Contains("counts[1]"));
  }
}

TEST_CASE("sim-trainer: under a plan the slowed replica's modelled compute per step drops", "[e2e]") {
  TempDir dir;
  const std::string faults = dir.Path("faults");
  REQUIRE(sim::CreateFaultTable(faults).ok());
  sim::RankFault slow;
  slow.compute_slowdown = 3.0;
  REQUIRE(sim::SetRankFault(faults, 3, 0, slow).ok());  // rank 6: DP replica 1
  const std::vector<std::string> flags = {"--micro-batches", "2", "--compute-ms", "10"};
  const RunResult even = RunWorld(dir, "even", 3, 0, faults, flags, {}, {{"PEREGRINE_MICROBATCH_PLAN", dir.Path("none")}});
  const RunResult plan = RunWorld(dir, "plan", 3, 0, faults, flags, {},
                                  {{"PEREGRINE_MICROBATCH_PLAN", PublishPlan(dir, "plan", "3,1", 4, 0.5, 1)}});
  // The step's critical path: the largest modelled compute over the ranks (every rank
  // waits for it in the DP all-reduce). Even: the slowed replica's 2 x 10 ms x 3; with the
  // plan {3, 1}: 3 x 10 ms on replica 0 and 1 x 10 ms x 3 on the slowed one.
  std::vector<double> even_iter, plan_iter;
  for (int s = 0; s < 3; ++s) {
    double even_max = 0, plan_max = 0;
    for (int r = 0; r < 8; ++r) {
      REQUIRE(ExitedWith(even.statuses[r], 0));
      REQUIRE(ExitedWith(plan.statuses[r], 0));
      REQUIRE(even.lines[r].size() == 3);
      REQUIRE(plan.lines[r].size() == 3);
      even_max = std::max(even_max, even.lines[r][s].model_ms);
      plan_max = std::max(plan_max, plan.lines[r][s].model_ms);
      // Each rank's own modelled compute: its micro-batches x 10 ms x its slowdown.
      const double stretch = r == 6 ? 3.0 : 1.0;
      CHECK(even.lines[r][s].model_ms == Approx(2 * 10 * stretch));
      CHECK(plan.lines[r][s].model_ms == Approx((DpOf(r) == 0 ? 3 : 1) * 10 * stretch));
      // No step is faster than its critical path.
      CHECK(even.lines[r][s].iter_ms >= 60);
      CHECK(plan.lines[r][s].iter_ms >= 30);
    }
    CHECK(even_max == Approx(60));
    CHECK(plan_max == Approx(30));
    even_iter.push_back(even.lines[0][s].iter_ms);
    plan_iter.push_back(plan.lines[0][s].iter_ms);
  }
  std::sort(even_iter.begin(), even_iter.end());
  std::sort(plan_iter.begin(), plan_iter.end());
  // Measured on this machine (a figure, not a threshold).
  WARN("median iter_ms even " << even_iter[1] << ", plan {3,1} " << plan_iter[1]);
}

TEST_CASE("sim-trainer: a hung GPU times its peers out and SIGTERM stops it", "[e2e]") {
  TempDir dir;
  const std::string faults = dir.Path("faults");
  REQUIRE(sim::CreateFaultTable(faults).ok());
  sim::RankFault hang;
  hang.hang = true;
  REQUIRE(sim::SetRankFault(faults, 3, 0, hang).ok());  // rank 6
  auto ranks = StartWorld(dir, "hang", 3, 0, faults, {}, /*timeout_ms=*/"1500");
  for (int r = 0; r < 8; ++r) {
    if (r == 6) continue;
    INFO("rank " << r << " stderr: " << Slurp(dir.Path("hang.err." + std::to_string(r))));
    CHECK(ExitedWith(ranks[r]->Wait(kGenerous), 3));
  }
  // The hung rank is not inside NCCL, so nothing times it out: it is still there.
  CHECK_FALSE(ranks[6]->Wait(std::chrono::milliseconds(0)).has_value());
  ranks[6]->Signal(SIGTERM);
  CHECK(ExitedWith(ranks[6]->Wait(kGenerous), 143));
}

}  // namespace
}  // namespace peregrine::testing
