// Helpers for the in-memory checkpoint end-to-end tests: run one job in local mode to the
// end (optionally injecting a fault once the first checkpoint is complete everywhere),
// then read what every rank printed from the pods' per-rank logs
// (<state_dir>/logs/<pod>/rank-<g>.log, every attempt appended): its final line
// ("[peregrine] final step=<n> <key>=<hex>") and any other lines of a given pattern.
// Each run owns a TempDir state directory; the mode is torn down (pods stopped, the
// checkpoint root in /dev/shm removed) on scope exit, also when a REQUIRE fails, and
// RunJob checks that the checkpoint root is gone afterwards.
//
// Not thread-safe (one test thread).
#ifndef PEREGRINE_TESTS_E2E_CHECKPOINT_CHECKPOINT_E2E_UTIL_H_
#define PEREGRINE_TESTS_E2E_CHECKPOINT_CHECKPOINT_E2E_UTIL_H_

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/e2e_util.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process_guard.h"

namespace peregrine::e2e {

// What one rank printed, read from its log files in every pod.
struct RankOutput {
  std::vector<std::string> lines;  // every line, oldest pod log first (attempt order within a pod)
};

// rank -> its lines, from <state_dir>/logs/<pod>/rank-<g>.log of every pod.
inline std::map<int, RankOutput> ReadRankLogs(const std::string& state_dir) {
  namespace fs = std::filesystem;
  std::map<int, RankOutput> out;
  const fs::path logs = fs::path(state_dir) / "logs";
  if (!fs::is_directory(logs)) return out;
  const std::regex name_re(R"(rank-(\d+)\.log)");
  std::vector<fs::path> files;
  for (const fs::directory_entry& pod : fs::directory_iterator(logs)) {
    if (!pod.is_directory()) continue;
    for (const fs::directory_entry& f : fs::directory_iterator(pod.path())) files.push_back(f.path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::smatch m;
    const std::string name = f.filename().string();
    if (!std::regex_match(name, m, name_re)) continue;
    std::ifstream in(f);
    std::string line;
    RankOutput& rank = out[std::stoi(m[1].str())];
    while (std::getline(in, line)) rank.lines.push_back(line);
  }
  return out;
}

// rank -> the matches of `re` on that rank's lines (first capture group, or the whole
// match without one), in order.
inline std::map<int, std::vector<std::smatch>> MatchRankLines(const std::map<int, RankOutput>& logs,
                                                              const std::regex& re) {
  std::map<int, std::vector<std::smatch>> out;
  for (const auto& [rank, output] : logs) {
    for (const std::string& line : output.lines) {
      std::smatch m;
      if (std::regex_search(line, m, re)) out[rank].push_back(m);
    }
  }
  return out;
}

struct FinalLine {
  uint64_t step = 0;
  std::string digest;
  bool operator==(const FinalLine&) const = default;
};

// rank -> its "[peregrine] final step=<n> <key>=<hex>" line. REQUIREs exactly one per rank
// (only the attempt that finishes prints it) and every rank of `world` present.
inline std::map<int, FinalLine> FinalLines(const std::map<int, RankOutput>& logs, const std::string& key,
                                           int world) {
  const std::regex re("\\[peregrine\\] final step=(\\d+) " + key + "=([0-9a-f]{64})");
  std::map<int, FinalLine> out;
  for (const auto& [rank, matches] : MatchRankLines(logs, re)) {
    INFO("rank " << rank);
    REQUIRE(matches.size() == 1);
    out[rank] = FinalLine{std::stoull(matches[0][1].str()), matches[0][2].str()};
  }
  REQUIRE(static_cast<int>(out.size()) == world);
  return out;
}

// A finished run of a job.
struct JobRun {
  std::string state_dir;
  JobStatus before_fault;  // the status when the fault was injected (the final one without a fault)
  JobStatus status;        // final
  std::string timeline;    // FormatTimeline of the whole run
  std::string events;      // every timeline entry's text, one a line
  std::map<int, RankOutput> logs;
};

// Waits (generous deadline) until the job runs with a checkpoint complete for the whole job
// at a step in [first, last], and the ranks are at most `within` steps past it (so a fault
// injected now redoes at most about that many steps, and lands before the end of a job
// longer than last + within); returns the status then.
inline JobStatus WaitCheckpointComplete(LocalMode& mode, uint64_t first, uint64_t last, uint64_t within) {
  auto reached = [&](const JobStatus& s) {
    const uint64_t complete = s.checkpoint.last_complete_step;
    return s.phase == JobPhase::kRunning && complete >= first && complete <= last &&
           s.max_completed_step <= complete + within;
  };
  JobStatus status;
  REQUIRE(WaitForStatus(mode, [&](const JobStatus& s) {
    status = s;
    return reached(s) || Finished(s);
  }));
  INFO(TimelineText(mode, status));
  INFO("last complete checkpoint step " << status.checkpoint.last_complete_step << ", steps completed "
                                        << status.last_completed_step << ".." << status.max_completed_step);
  REQUIRE(reached(status));
  return status;
}

// The same with no upper bound on the complete step.
inline JobStatus WaitCheckpointComplete(LocalMode& mode, uint64_t step, uint64_t within) {
  return WaitCheckpointComplete(mode, step, UINT64_MAX, within);
}

// Runs `job` in local mode until it finishes. When `fault` is set, it is called once
// `ready` returns a status (typically WaitCheckpointComplete) and injects the fault. The
// mode is always torn down; afterwards the checkpoint root (in /dev/shm) must be gone and
// no process of the run (agents, ranks, stack tools) may be left; a DescendantGuard kills
// any that are, also when a REQUIRE fails.
inline JobRun RunJob(const TempDir& dir, const TrainingJob& job,
                     const std::function<JobStatus(LocalMode&)>& ready = {},
                     const std::function<void(LocalMode&, const JobStatus&)>& fault = {}) {
  JobRun run;
  run.state_dir = dir.path();
  std::string checkpoint_root;
  ::peregrine::testing::DescendantGuard descendants;
  {
    ModeGuard mode = StartMode(job, Options(dir.path()));
    const std::filesystem::path link = std::filesystem::path(dir.path()) / "shm";
    if (std::filesystem::is_symlink(link)) checkpoint_root = std::filesystem::read_symlink(link).string();
    if (ready) {
      run.before_fault = ready(*mode);
      if (fault) fault(*mode, run.before_fault);
    }
    run.status = WaitFinished(*mode);
    if (!ready) run.before_fault = run.status;
    run.timeline = TimelineText(*mode, run.status);
    run.events = TimelineEvents(*mode);
  }
  if (!checkpoint_root.empty()) CHECK_FALSE(std::filesystem::exists(checkpoint_root));
  CHECK(::peregrine::testing::Eventually([] { return ::peregrine::testing::NoDescendantsLeft(); }));
  run.logs = ReadRankLogs(run.state_dir);
  return run;
}

// An uninterrupted run of `job` in `dir`: it must succeed with no incident. Faulted runs
// compare their final digests with its.
inline JobRun UninterruptedRun(const TempDir& dir, const TrainingJob& job) {
  JobRun run = RunJob(dir, job);
  INFO(run.timeline);
  REQUIRE(run.status.phase == JobPhase::kSucceeded);
  CHECK(run.status.incidents.empty());
  return run;
}

// Kills machine slot `slot` (every process of its pod: its shared memory is gone with it).
inline void KillSlot(LocalMode& mode, int slot) {
  auto injected = mode.Inject(Fault("kill", slot));
  INFO(injected.status().ToString());
  REQUIRE(injected.ok());
}

// The checkpoint events of `kind` in the final status.
inline std::vector<CheckpointEventRecord> CheckpointEvents(const JobStatus& s, CheckpointEventKind kind) {
  std::vector<CheckpointEventRecord> out;
  for (const CheckpointEventRecord& e : s.checkpoint.events) {
    if (e.kind == kind) out.push_back(e);
  }
  return out;
}

}  // namespace peregrine::e2e

#endif  // PEREGRINE_TESTS_E2E_CHECKPOINT_CHECKPOINT_E2E_UTIL_H_
