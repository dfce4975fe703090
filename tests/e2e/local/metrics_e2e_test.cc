// The live /metrics of a running controller (local mode, a 1 machine x 1 GPU sim-trainer
// job) scraped over HTTP and checked by the real `promtool check metrics` (Debian package
// prometheus), plus: every peregrine_ metric the chart's alert rules use is in the scrape,
// and the finished job keeps no live gauge. (controller_metrics_test.cc covers the
// series' lifecycle; kube_e2e scrapes a deleted job's series away.)
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/deploy/run_process.h"
#include "tests/e2e/e2e_util.h"

namespace peregrine::e2e {
namespace {

constexpr char kPromtool[] = "/usr/bin/promtool";

struct ToolResult {
  int exit_code = -1;
  std::string output;
};

// Runs argv (no shell) with `input` on stdin; returns its exit code and stdout+stderr.
ToolResult RunWithStdin(const std::vector<std::string>& argv, const std::string& input) {
  absl::StatusOr<ProcessResult> r = RunProcess(argv, {}, input);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return ToolResult{r->exit_code, r->out + r->err};
}

// peregrine_ names used by the chart's alert rules.
std::set<std::string> AlertMetricNames() {
  std::set<std::string> names;
  const std::regex name_re("peregrine_[a-z_]+");
  for (const auto& entry : std::filesystem::directory_iterator(PEREGRINE_SOURCE_DIR "/helm/peregrine/files")) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (auto it = std::sregex_iterator(s.begin(), s.end(), name_re); it != std::sregex_iterator(); ++it) {
      names.insert(it->str());
    }
  }
  return names;
}

// Sample names in the exposition, plus the names of declared families (# TYPE lines),
// since a labelled counter with no increments yet has no sample.
std::set<std::string> ExposedNames(const std::string& text) {
  std::set<std::string> names;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream f(line.substr(7));
      std::string name, type;
      f >> name >> type;
      names.insert(name);
      if (type == "histogram") {
        for (const char* suffix : {"_count", "_sum", "_bucket"}) names.insert(name + suffix);
      }
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    names.insert(line.substr(0, line.find_first_of("{ ")));
  }
  return names;
}

// Runs a 1 x 1 sim-trainer job of `steps` steps in local mode until `until` holds for its
// status and returns the live /metrics scrape taken then (everything is torn down).
std::string ScrapeWhen(int steps, const std::function<bool(const JobStatus&)>& until) {
  const std::string bin_dir = PEREGRINE_BINARY_DIR "/bin";
  REQUIRE(access((bin_dir + "/peregrine-agent").c_str(), X_OK) == 0);
  REQUIRE(access((bin_dir + "/sim-trainer").c_str(), X_OK) == 0);

  TempDir dir("peregrine-metrics");

  auto job = ParseTrainingJob(absl::StrCat(R"(
apiVersion: peregrine.dev/v1alpha1
kind: TrainingJob
metadata: {name: tiny, namespace: default}
spec:
  machines: 1
  gpusPerMachine: 1
  parallelism: {tensor: 1, pipeline: 1, data: 1}
  codeVersion:
    command: ["sim-trainer", "--steps", ")", steps, R"("]
  standby: {min: 0, max: 0}
  faultTolerance: {restartGraceSeconds: 1}
)"));
  REQUIRE(job.ok());
  LocalModeOptions options = Options(dir.Path("state"));
  options.heartbeat_ms = 500;  // the demo default
  ModeGuard mode = StartMode(*job, options);
  REQUIRE(mode->controller().WaitFor(until, 120'000));
  return ScrapeMetrics(*mode);
}

TEST_CASE("the live /metrics passes promtool and has every metric the alerts use", "[integration]") {
  REQUIRE(access(kPromtool, X_OK) == 0);
  // A job far from its last step: every per-job series is live.
  const std::string scrape = ScrapeWhen(1'000'000, [](const JobStatus& st) {
    return st.phase == JobPhase::kRunning && st.last_completed_step >= 2;
  });
  ToolResult check = RunWithStdin({kPromtool, "check", "metrics"}, scrape);
  INFO("promtool said:\n" << check.output << "\nscrape:\n" << scrape);
  CHECK(check.exit_code == 0);

  const std::set<std::string> exposed = ExposedNames(scrape);
  const std::set<std::string> wanted = AlertMetricNames();
  REQUIRE_FALSE(wanted.empty());
  for (const std::string& name : wanted) {
    INFO("metric used by helm/peregrine/files alerts: " << name);
    CHECK(exposed.count(name) == 1);
  }
  CHECK(scrape.find("peregrine_job_last_completed_step{job=\"tiny\",namespace=\"default\"}") != std::string::npos);
  CHECK(scrape.find("peregrine_jobs{phase=\"Running\"} 1") != std::string::npos);
}

TEST_CASE("a finished job keeps no live gauge in /metrics", "[integration]") {
  REQUIRE(access(kPromtool, X_OK) == 0);
  const std::string scrape = ScrapeWhen(5, [](const JobStatus& st) {
    return st.phase == JobPhase::kSucceeded || st.phase == JobPhase::kFailed;
  });
  ToolResult check = RunWithStdin({kPromtool, "check", "metrics"}, scrape);
  INFO("promtool said:\n" << check.output << "\nscrape:\n" << scrape);
  CHECK(check.exit_code == 0);
  // Counted in its final phase; no live gauges (no alert can fire on it), only counters.
  CHECK(scrape.find("peregrine_jobs{phase=\"Succeeded\"} 1") != std::string::npos);
  CHECK(scrape.find("peregrine_jobs{phase=\"Running\"} 0") != std::string::npos);
  CHECK(scrape.find("peregrine_job_last_completed_step{job=\"tiny\"") == std::string::npos);
  CHECK(scrape.find("peregrine_standby_ready{job=\"tiny\"") == std::string::npos);
  CHECK(scrape.find("peregrine_evictions_total{job=\"tiny\",namespace=\"default\",reason=\"machine_fault\"} 0") !=
        std::string::npos);
}

TEST_CASE("promtool check metrics rejects a malformed exposition", "[integration]") {
  REQUIRE(access(kPromtool, X_OK) == 0);
  // The same check must be able to fail: a counter without _total and a broken line.
  ToolResult bad = RunWithStdin({kPromtool, "check", "metrics"},
                                "# HELP x_requests Requests.\n# TYPE x_requests counter\nx_requests{a=\"1\" 3\n");
  CHECK(bad.exit_code != 0);
}

}  // namespace
}  // namespace peregrine::e2e
