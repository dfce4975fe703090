// analyze steps on real per-worker mini-batch times from a production cluster (Alibaba PAI,
// testdata/alibaba_pai, see the README there): the labelled straggler is the only one
// flagged, a worker ~1.1x its peers within their spread is not persistently slow, and a
// change every worker shares is one job-wide change. Plus the rule's flags and output.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/analyze/analyze_report.h"
#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using analyze_test::Fixture;

// The published files: ",worker,gpu,time,batch_time_norm" (row index, worker, GPU share in
// %, iteration, mini-batch time normalised to 0-1000). Read here with a plain splitter so
// that these tests check the analysis, not the CSV parser; a row repeating a (worker,
// iteration) already read is dropped (job 2 has one). `shared` multiplies every worker's
// time from `shared_from` on (a job-wide change imposed on the real noise).
StepTimesTable ReadPai(const std::string& name, int64_t shared_from = -1, double shared = 1.0) {
  std::ifstream in(Fixture(absl::StrCat("alibaba_pai/", name)));
  REQUIRE(in);
  std::string line;
  std::getline(in, line);
  REQUIRE(line.find("worker,gpu,time,batch_time_norm") != std::string::npos);
  std::map<int, std::map<int64_t, double>> by_worker;
  while (std::getline(in, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    REQUIRE(f.size() == 5);
    int worker = 0;
    int64_t step = 0;
    double t = 0;
    REQUIRE(absl::SimpleAtoi(f[1], &worker));
    REQUIRE(absl::SimpleAtoi(f[3], &step));
    REQUIRE(absl::SimpleAtod(f[4], &t));
    if (shared_from >= 0 && step >= shared_from) t *= shared;
    by_worker[worker].emplace(step, t);
  }
  StepTimesTable table;
  table.unit = "";
  for (const auto& [worker, series] : by_worker) {
    WorkerStepTimes w;
    w.worker = absl::StrCat(worker);
    for (const auto& [step, t] : series) {
      w.steps.push_back(step);
      w.times.push_back(t);
    }
    table.workers.push_back(std::move(w));
  }
  return table;
}

StepsReport Report(const StepTimesTable& table) {
  absl::StatusOr<StepsReport> r = AnalyzeStepTimes(table, StepsOptions{});
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("stragglers on real PAI job 1: worker 6, labelled, is the only straggler - worker 0 at 1.1x is within the spread", "[unit]") {
  const StepsReport r = Report(ReadPai("job_1_norm.csv"));
  REQUIRE(r.workers.size() == 10);
  CHECK(r.steps_compared == 300);
  CHECK(r.with_slowdowns == std::vector<std::string>{"6"});
  const WorkerAnalysis& w6 = r.workers[6];
  REQUIRE(w6.change.episodes.size() == 1);
  // The logged steps are 10 apart; worker 6 is 1.7-2.4x its peers from step 1811 and back
  // with them at step 1951.
  CHECK(std::abs(w6.change.episodes[0].onset_step - 1811) <= 10);
  REQUIRE(w6.change.episodes[0].end_step.has_value());
  CHECK(std::abs(*w6.change.episodes[0].end_step - 1951) <= 20);
  CHECK(w6.change.episodes[0].severity > 0.4);
  // Worker 0 is 1.11x by the old rule (its median over the median of the medians) and ~1.08x
  // its peers step by step, but the workers scatter by ~5% at every step.
  const WorkerAnalysis& w0 = r.workers[0];
  CHECK(w0.stats.median / r.median_of_medians > 1.1);
  CHECK(w0.ratio_to_peers > 1.05);
  CHECK(w0.peer_z < 2);
  CHECK(r.persistently_slow.empty());
  CHECK(r.job_wide.changes.empty());
}

TEST_CASE("stragglers on real PAI job 1 with a 30% slowdown shared by all workers: one job-wide change, still one straggler", "[unit]") {
  const StepsReport r = Report(ReadPai("job_1_norm.csv", 1001, 1.3));
  REQUIRE(r.job_wide.changes.size() == 1);
  CHECK(r.job_wide.changes[0].kind == FailSlowEventKind::kSlowdownStart);
  CHECK(std::abs(r.job_wide.changes[0].step - 1001) <= 10);
  CHECK(r.job_wide.changes[0].relative_change == Approx(0.3).margin(0.05));
  CHECK(r.with_slowdowns == std::vector<std::string>{"6"});
  CHECK(r.persistently_slow.empty());
  for (const WorkerAnalysis& w : r.workers) {
    INFO(w.worker);
    CHECK(w.changes_relative_to_peers);
    for (const StepChange& c : w.change.changes) CHECK(std::abs(c.step - 1001) > 50);
  }
}

TEST_CASE("stragglers on real PAI jobs 2 and 3: stable per-worker differences are not stragglers - late stragglers are", "[unit]") {
  // Job 2: "the variation seems stable, different workers have different mini-batch times".
  const StepsReport two = Report(ReadPai("job_2_norm.csv"));
  CHECK(two.persistently_slow.empty());
  CHECK(two.with_slowdowns.empty());
  CHECK(two.job_wide.changes.empty());
  // Job 3: "there could be multiple stragglers": workers 6 and 7 slow down relative to the
  // others late in the run (their last quarter is ~15% over the rest).
  const StepsReport three = Report(ReadPai("job_3_norm.csv"));
  CHECK(three.job_wide.changes.empty());
  for (const char* w : {"6", "7"}) {
    INFO(w);
    const WorkerAnalysis& a = three.workers[static_cast<size_t>(std::stoi(w))];
    REQUIRE(a.change.episodes.size() == 1);
    CHECK(a.change.episodes[0].onset_step > 2000);
  }
  for (const std::string& w : three.with_slowdowns) {
    CHECK(three.workers[static_cast<size_t>(std::stoi(w))].change.episodes.at(0).onset_step > 2000);
  }
}

// 8 workers, 200 steps of ~1 s with +-1% noise; every worker 40% slower from step 120.
std::string SharedSlowdownCsv() {
  std::string csv = "worker,step,seconds\n";
  uint64_t state = 12345;
  for (int s = 0; s < 200; ++s) {
    for (int w = 0; w < 8; ++w) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const double u = static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5;
      absl::StrAppend(&csv, "n", w, ",", s, ",", (s >= 120 ? 1.4 : 1.0) * (1.0 + 0.02 * u), "\n");
    }
  }
  return csv;
}

TEST_CASE("analyze steps: a slowdown all workers share is reported once as job-wide, in text and JSON", "[unit]") {
  testing::TempDir dir;
  testing::WriteFile(dir.Path("shared.csv"), SharedSlowdownCsv());
  const nlohmann::json j = Analyze({"steps", dir.Path("shared.csv"), "--json"}).Json();
  INFO(j.dump(2));
  CHECK(j["withSlowdowns"].empty());
  CHECK(j["persistentlySlow"].empty());
  REQUIRE(j["jobWide"]["slowdowns"].size() == 1);
  CHECK(std::abs(j["jobWide"]["slowdowns"][0]["onsetStep"].get<int64_t>() - 120) <= 2);
  CHECK(j["jobWide"]["slowdowns"][0]["severity"].get<double>() == Approx(0.4).margin(0.03));
  CHECK(j["peerRule"]["persistentZ"] == 3.0);
  CHECK(j["peerRule"]["minRelativeExcess"] == 0.05);
  CHECK(j["peerRule"]["stepsCompared"] == 200);
  for (const auto& w : j["workers"]) {
    CHECK(w["changes"]["changePoints"].empty());
    CHECK(w["changesRelativeToPeers"] == true);
  }
  const analyze_test::Result text = Analyze({"steps", dir.Path("shared.csv")});
  REQUIRE(text.code == 0);
  CHECK(text.out.find("job: SLOWDOWN from step 12") != std::string::npos);
  CHECK(text.out.find("summary: no persistently slow worker; no slowdown; 1 job-wide change(s)") !=
        std::string::npos);
  CHECK(text.out.find("persistently slow = median z > 3.00 and median excess over the step median > +5.0%") !=
        std::string::npos);
}

// 8 workers, 100 steps of ~1 s with +-1% noise; n3 is 8% and n5 4% slower throughout.
std::string PersistentCsv() {
  std::string csv = "worker,step,seconds\n";
  uint64_t state = 777;
  for (int s = 0; s < 100; ++s) {
    for (int w = 0; w < 8; ++w) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const double u = static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5;
      const double level = w == 3 ? 1.08 : w == 5 ? 1.04 : 1.0;
      absl::StrAppend(&csv, "n", w, ",", s, ",", level * (1.0 + 0.02 * u), "\n");
    }
  }
  return csv;
}

TEST_CASE("analyze steps: --straggler-z and --straggler-excess set the persistent rule", "[unit]") {
  testing::TempDir dir;
  testing::WriteFile(dir.Path("p.csv"), PersistentCsv());
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"steps", dir.Path("p.csv"), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Analyze(args);
  };
  // The workers agree within 1% (the spread's floor): n3 is ~8 and n5 ~4 robust standard
  // deviations out; only n3 is also more than 5% slower.
  const nlohmann::json defaults = run({}).Json();
  INFO(defaults.dump(2));
  CHECK(defaults["persistentlySlow"] == nlohmann::json::array({"n3"}));
  CHECK(defaults["workers"][5]["peerZ"].get<double>() > 3);
  CHECK(defaults["withSlowdowns"].empty());
  const nlohmann::json small = run({"--straggler-excess", "0.03"}).Json();
  CHECK(small["persistentlySlow"] == nlohmann::json::array({"n3", "n5"}));
  CHECK(small["peerRule"]["minRelativeExcess"] == 0.03);
  const nlohmann::json far = run({"--straggler-excess", "0.03", "--straggler-z", "6"}).Json();
  CHECK(far["persistentlySlow"] == nlohmann::json::array({"n3"}));
  CHECK(far["peerRule"]["persistentZ"] == 6.0);
  const analyze_test::Result bad = run({"--straggler-z", "0"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--straggler-z must be > 0, got 0") != std::string::npos);
  CHECK(run({"--straggler-excess", "-1"}).code == 2);
  CHECK(run({"--straggler-z", "abc"}).code == 2);
}

TEST_CASE("analyze steps on the real PAI file as published: the columns named, worker 6 the only straggler", "[unit]") {
  const std::vector<std::string> args = {"steps", Fixture("alibaba_pai/job_1_norm.csv"), "--worker-col", "worker",
                                         "--step-col", "time", "--time-col", "batch_time_norm"};
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const nlohmann::json j = Analyze(json_args).Json();
  CHECK(j["peerRule"]["stepsCompared"] == 300);
  CHECK(j["jobWide"]["changePoints"].empty());
  CHECK(j["persistentlySlow"].empty());
  CHECK(j["withSlowdowns"] == nlohmann::json::array({"6"}));
  const analyze_test::Result text = Analyze(args);
  REQUIRE(text.code == 0);
  CHECK(text.out.find("6: SLOWDOWN from step 1811 to step 1951") != std::string::npos);
  CHECK(text.out.find("summary: no persistently slow worker; slowdowns: 6; no job-wide change") != std::string::npos);
}

}  // namespace
}  // namespace peregrine
