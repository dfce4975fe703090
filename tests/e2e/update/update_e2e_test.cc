// Hot code updates from the command line, end to end: a local-mode job
// with real agents and sim-trainer ranks is updated with `peregrinectl update` through
// the controller's HTTP API (RunPeregrinectl, the tool as a function):
//   - an invalid update is refused with the parser's message and changes nothing;
//   - an urgent update restarts training in place at once with the new revision: same
//     pods and machines, attempt + 1, resumed from the step reached, recorded in the
//     version history, and the ranks really run it (their log headers name it);
//   - a lazy update waits (the job keeps training the old revision) and is applied at
//     the next failure-triggered restart (an injected crash).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/peregrinectl.h"
#include "tests/e2e/e2e_util.h"

namespace peregrine::e2e {
namespace {

struct CtlResult {
  int code = -1;
  std::string out, err;
};

CtlResult Ctl(LocalMode& mode, std::vector<std::string> args) {
  args.insert(args.begin(), {"--controller", absl::StrCat("http://127.0.0.1:", mode.http_port())});
  std::ostringstream out, err;
  CtlResult r;
  r.code = RunPeregrinectl(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// The sim-trainer command of ShortDemoJob with a different compute time: a new command
// line, so the update changes more than the revision string, for the same model (a new
// revision restores the job's checkpoint, which only loads into the shape it was saved
// from; a shape change fails at start-up on every rank: a user-code error).
std::vector<std::string> NewCommand(int steps) {
  return {"sim-trainer", "--steps", std::to_string(steps), "--micro-batches", "2", "--hidden", "64",
          "--compute-ms", "5"};
}

// Rank log headers under the state dir that name `revision`.
int RankLogsNaming(const std::string& state_dir, const std::string& revision) {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(state_dir + "/logs", ec)) {
    if (!entry.is_regular_file() || entry.path().filename().string().rfind("rank-", 0) != 0) continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      if (absl::StrContains(line, "===== peregrine attempt") && absl::StrContains(line, " revision " + revision + " ")) {
        ++n;
      }
    }
  }
  return n;
}

struct Placement {
  std::vector<std::string> pods, machines;
  bool operator==(const Placement&) const = default;
};

Placement PlacementOf(const JobStatus& s) {
  Placement p;
  for (const SlotStatus& slot : s.slots) {
    p.pods.push_back(slot.pod);
    p.machines.push_back(slot.machine_id);
  }
  return p;
}

TEST_CASE("an urgent update restarts training in place with the new revision", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(400);
  ModeGuard mode = StartMode(job, Options(dir.path()));
  // A checkpoint is complete before the update, so the restart has one to resume from.
  WaitRunning(*mode, 10, [](const JobStatus& s) { return s.checkpoint.last_complete_step >= 10; });
  const std::string name = absl::StrCat(job.metadata.namespace_, "/", job.metadata.name);

  // Invalid: refused with the parser's message; the job runs on untouched.
  TrainingJob broken = mode->controller().job();
  broken.spec.parallelism.data = 3;
  auto refused = mode->controller().UpdateJob(broken);
  REQUIRE_FALSE(refused.ok());
  CHECK(absl::IsInvalidArgument(refused.status()));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("parallelism"));
  CHECK(mode->controller().job().metadata.generation == job.metadata.generation);
  CHECK(mode->controller().job().spec.parallelism.data == job.spec.parallelism.data);
  const CtlResult bad = Ctl(*mode.mode, {"update", name, "--command-json", "[]", "--revision", "v2"});
  CHECK(bad.code == 2);
  CHECK_THAT(bad.err, Catch::Contains("command"));
  const CtlResult unknown = Ctl(*mode.mode, {"update", "default/nosuchjob", "--revision", "v2"});
  CHECK(unknown.code == 1);
  CHECK_THAT(unknown.err, Catch::Contains("no job default/nosuchjob"));

  const JobStatus before = mode->controller().Snapshot();
  REQUIRE(before.code.revision == "v1");
  REQUIRE(before.incidents.empty());
  const CtlResult ok = Ctl(*mode.mode, {"update", name, "--revision", "v2", "--command",
                                        absl::StrJoin(NewCommand(400), " "), "--urgent"});
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("urgent"));
  CHECK(mode->controller().job().metadata.generation == job.metadata.generation + 1);
  CHECK(mode->controller().job().spec.code.command == NewCommand(400));

  REQUIRE(WaitForStatus(*mode.mode, [&](const JobStatus& s) {
    return s.code.revision == "v2" && s.phase == JobPhase::kRunning && s.last_completed_step > s.resume_step;
  }));
  const JobStatus after = mode->controller().Snapshot();
  CHECK(after.attempt == before.attempt + 1);
  // Progress kept: the new revision starts from the newest complete checkpoint.
  CHECK(after.resume_step >= before.checkpoint.last_complete_step);
  CHECK(after.resume_step > 0);
  CHECK(PlacementOf(after) == PlacementOf(before));        // same pods, same machines
  CHECK(after.incidents.empty());
  CHECK(after.evicted.empty());
  CHECK(after.code.command == NewCommand(400));
  REQUIRE(after.version_history.size() == 2);
  CHECK(after.version_history[0].code.revision == "v1");
  CHECK(after.version_history[1].code.revision == "v2");
  CHECK(after.version_history[1].reason == "urgent hot update");
  CHECK(after.version_history[1].applied_at_step == after.resume_step);
  // Every rank (4 machines x 2 GPUs) started the new revision.
  CHECK(RankLogsNaming(dir.path(), "v2") >= 8);

  const CtlResult status = Ctl(*mode.mode, {"status", name});
  CHECK(status.code == 0);
  CHECK_THAT(status.out, Catch::Contains("code revision v2"));
}

TEST_CASE("a lazy update waits for the next failure and is applied at that restart", "[e2e]") {
  TempDir dir;
  const TrainingJob job = ShortDemoJob(200);
  LocalModeOptions options = Options(dir.path());
  // The injected crash stays in the fault table until cleared; it is cleared as soon as
  // the incident opens, long before the triage window ends and the ranks restart.
  options.decision.triage_window_ns = 5'000'000'000;
  ModeGuard mode = StartMode(job, options);
  const JobStatus before = WaitRunning(*mode, 10);
  const std::string name = absl::StrCat(job.metadata.namespace_, "/", job.metadata.name);

  const CtlResult ok = Ctl(*mode.mode, {"update", name, "--revision", "v2"});
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  CHECK_THAT(ok.out, Catch::Contains("lazy"));
  REQUIRE(WaitForStatus(*mode.mode, [](const JobStatus& s) {
    return s.pending_code.has_value() && s.pending_code->revision == "v2";
  }));
  // It waits: training goes on with v1 in the same attempt.
  const uint64_t pending_at = mode->controller().Snapshot().last_completed_step;
  REQUIRE(WaitForStatus(*mode.mode, [&](const JobStatus& s) { return s.last_completed_step >= pending_at + 10; }));
  {
    const JobStatus waiting = mode->controller().Snapshot();
    CHECK(waiting.code.revision == "v1");
    CHECK(waiting.attempt == before.attempt);
    CHECK(waiting.pending_code.has_value());
    CHECK(RankLogsNaming(dir.path(), "v2") == 0);
    const CtlResult status = Ctl(*mode.mode, {"status", name});
    CHECK_THAT(status.out, Catch::Contains("code revision v1  (waiting: revision v2)"));
  }

  // A training process crashes: the failure-triggered restart takes the update along.
  CrashOnce(*mode, 2, 0);
  const JobStatus st = WaitFinished(*mode);
  CHECK(st.phase == JobPhase::kSucceeded);
  CHECK(st.code.revision == "v2");
  CHECK_FALSE(st.pending_code.has_value());
  REQUIRE(st.incidents.size() == 1);
  bool applied = false;
  for (const std::string& action : st.incidents[0].actions) {
    applied = applied || absl::StrContains(action, "apply the pending code update (revision v2)");
  }
  CHECK(applied);
  REQUIRE(st.version_history.size() == 2);
  CHECK(st.version_history[1].code.revision == "v2");
  CHECK(st.version_history[1].reason == "lazy hot update at the failure-triggered restart");
  CHECK(st.evicted.empty());                           // a crash is no machine's fault
  CHECK(PlacementOf(st) == PlacementOf(before));        // restarted in place
  CHECK(RankLogsNaming(dir.path(), "v2") >= 8);
}

}  // namespace
}  // namespace peregrine::e2e
