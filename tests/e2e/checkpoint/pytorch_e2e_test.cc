// In-memory checkpoints end to end with real PyTorch: examples/pytorch/local.yaml (4
// machines x 1 GPU, pipeline 2 x data 2 declared, one standby, a checkpoint every 10
// steps, one backup copy) running examples/pytorch/train.py under Debian's
// /usr/bin/python3 with python3-torch, gloo on loopback, the state saved through the
// `peregrine` package and the client library into the agents' shared-memory stores. A
// machine is killed once a checkpoint is complete for the whole job; the job must finish
// with the parameters of an uninterrupted run of the same job (run first, in the same
// test), and every restarted rank must have loaded exactly the state it saved (the script
// prints a SHA-256 of each state it saves and of the state it loads).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

#include "tests/e2e/checkpoint/checkpoint_e2e_util.h"

namespace peregrine::e2e {
namespace {

constexpr int kWorld = 4;
constexpr int kSteps = 50;
constexpr int kVictim = 1;  // rank 1

bool HaveTorch() {
  return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

// The example job, short: a small model, paced so that a kill lands mid-run, writing its
// final parameters to <params_dir>/params-<rank>.bin.
TrainingJob PytorchJob(bool ddp, const std::string& params_dir) {
  auto job = LoadTrainingJobFile(PEREGRINE_SOURCE_DIR "/examples/pytorch/local.yaml");
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  REQUIRE(job->spec.checkpoint.interval_steps == 10);
  job->spec.code.command = {"/usr/bin/python3", PEREGRINE_SOURCE_DIR "/examples/pytorch/train.py",
                            "--steps", std::to_string(kSteps), "--hidden", "32", "--layers", "2",
                            "--step-sleep-ms", "100", "--seed", "5", "--print-state-digests",
                            "--params-out", params_dir + "/params-{rank}.bin"};
  if (ddp) job->spec.code.command.push_back("--ddp");
  job->spec.fault_tolerance.restart_grace_seconds = 2;
  return *job;
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

struct PytorchRun {
  JobRun run;
  std::map<int, FinalLine> finals;
  std::map<int, std::vector<float>> params;  // by rank
};

PytorchRun RunPytorch(bool ddp, bool kill) {
  TempDir dir;
  const std::string params_dir = dir.path() + "/params";
  std::filesystem::create_directories(params_dir);
  const TrainingJob job = PytorchJob(ddp, params_dir);
  PytorchRun out;
  if (kill) {
    out.run = RunJob(
        dir, job, [](LocalMode& mode) { return WaitCheckpointComplete(mode, 10, 30, 6); },
        [](LocalMode& mode, const JobStatus&) { KillSlot(mode, kVictim); });
  } else {
    out.run = RunJob(dir, job);
  }
  INFO(out.run.timeline);
  REQUIRE(out.run.status.phase == JobPhase::kSucceeded);
  out.finals = FinalLines(out.run.logs, "param_digest", kWorld);
  for (int r = 0; r < kWorld; ++r) {
    out.params[r] = ReadFloats(params_dir + "/params-" + std::to_string(r) + ".bin");
    REQUIRE(!out.params[r].empty());
  }
  return out;
}

// Every "loaded step=N state_digest=D" line of a rank has a "saved step=N" line of the same
// rank with digest D (the restored state is bit-identical to the saved one); returns the
// ranks that loaded a state.
std::set<int> CheckLoadedEqualsSaved(const std::map<int, RankOutput>& logs) {
  const std::regex saved_re(R"(\[train\] rank=(\d+) saved step=(\d+) state_digest=([0-9a-f]{64}))");
  const std::regex loaded_re(R"(\[train\] rank=(\d+) loaded step=(\d+) state_digest=([0-9a-f]{64}))");
  std::map<std::pair<int, uint64_t>, std::set<std::string>> saved;
  for (const auto& [rank, matches] : MatchRankLines(logs, saved_re)) {
    for (const std::smatch& m : matches) saved[{rank, std::stoull(m[2].str())}].insert(m[3].str());
  }
  std::set<int> loaded_ranks;
  for (const auto& [rank, matches] : MatchRankLines(logs, loaded_re)) {
    for (const std::smatch& m : matches) {
      const uint64_t step = std::stoull(m[2].str());
      INFO("rank " << rank << " loaded step " << step << " digest " << m[3].str());
      CHECK(std::stoi(m[1].str()) == rank);
      const auto it = saved.find({rank, step});
      REQUIRE(it != saved.end());
      CHECK(it->second.count(m[3].str()) == 1);
      loaded_ranks.insert(rank);
    }
  }
  return loaded_ranks;
}

// The recovery itself: one machine lost, resumed from the complete checkpoint with at most
// one interval redone, the victim's rank fetched from its holder, every rank restored.
void CheckRecovery(const JobRun& run) {
  INFO(run.timeline);
  const JobStatus& st = run.status;
  REQUIRE(st.incidents.size() == 1);
  const Incident& inc = st.incidents[0];
  CHECK(inc.kind == IncidentKind::kMachineLost);
  CheckOnlyEvicted(run.before_fault, st, {kVictim});
  CHECK(inc.resume_step >= 10);
  CHECK(inc.resume_step % 10 == 0);
  CHECK(inc.steps_redone == inc.step_at_failure - inc.resume_step);
  CHECK(inc.steps_redone <= 10);
  REQUIRE(st.checkpoint.placement.size() == kWorld);
  REQUIRE(!st.checkpoint.placement[kVictim].holders.empty());
  const int holder = st.checkpoint.placement[kVictim].holders[0];
  bool fetched = false;
  for (const CheckpointEventRecord& e : CheckpointEvents(st, CheckpointEventKind::kRestored)) {
    INFO(e.detail);
    CHECK(e.global_rank == kVictim);
    CHECK(e.step == inc.resume_step);
    fetched = fetched || e.detail.find("fetched from slot " + std::to_string(holder) + " (") != std::string::npos;
  }
  CHECK(fetched);
  // Every rank restarted and loaded exactly what it had saved (the victim from the copy
  // fetched from its holder, the others from their own).
  CHECK(CheckLoadedEqualsSaved(run.logs) == std::set<int>{0, 1, 2, 3});
}

TEST_CASE("PyTorch fixed-layout all-reduce: a killed machine, and every rank's final parameters are bit-identical to an uninterrupted run", "[e2e]") {
  if (!HaveTorch()) FAIL("/usr/bin/python3 cannot import torch (Debian's python3-torch is needed)");
  const PytorchRun reference = RunPytorch(/*ddp=*/false, /*kill=*/false);
  CHECK(reference.run.status.incidents.empty());
  CHECK(CheckLoadedEqualsSaved(reference.run.logs).empty());  // nothing restarted, nothing loaded

  const PytorchRun faulted = RunPytorch(/*ddp=*/false, /*kill=*/true);
  CheckRecovery(faulted.run);
  for (const auto& [rank, line] : faulted.finals) CHECK(line.step == kSteps);
  CHECK(faulted.finals == reference.finals);
  CHECK(faulted.params == reference.params);
}

// DDP rebuilds its gradient buckets after the first iteration of each process, so a resumed
// run sums gradients in a different order than an uninterrupted one: the parameters differ
// by rounding only. The restored state itself must still be bit-identical to the saved one.
TEST_CASE("PyTorch DDP: a killed machine, the restored state is the saved one and the final parameters match an uninterrupted run closely", "[e2e]") {
  if (!HaveTorch()) FAIL("/usr/bin/python3 cannot import torch (Debian's python3-torch is needed)");
  const PytorchRun reference = RunPytorch(/*ddp=*/true, /*kill=*/false);
  const PytorchRun faulted = RunPytorch(/*ddp=*/true, /*kill=*/true);
  CheckRecovery(faulted.run);
  for (const auto& [rank, line] : faulted.finals) CHECK(line.step == kSteps);

  // max |faulted - reference| / max |reference| over every parameter, per rank.
  for (int r = 0; r < kWorld; ++r) {
    const std::vector<float>& a = faulted.params.at(r);
    const std::vector<float>& b = reference.params.at(r);
    REQUIRE(a.size() == b.size());
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
    }
    const double relative = max_diff / max_ref;
    INFO("rank " << r << ": max |diff| " << max_diff << ", max |param| " << max_ref << ", relative " << relative);
    CHECK(std::isfinite(relative));
    CHECK(relative <= 1e-5);
    WARN("DDP rank " << r << ": max relative parameter difference to the uninterrupted run " << relative);
  }
}

}  // namespace
}  // namespace peregrine::e2e
