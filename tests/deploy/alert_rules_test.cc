// The chart's alert rules (helm/peregrine/files/alerts.yaml) with the real promtool
// (Debian package `prometheus`): `promtool check rules`, `promtool test rules` on
// tests/deploy/testdata/alerts_test.yaml, a mutated copy that the tests must catch,
// the metric names against the names a real ControllerMetrics exports (exported_metrics.h)
// and each new alert's runbook against docs/operations.md.
#include <catch2/catch.hpp>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include <yaml-cpp/yaml.h>

#include "tests/deploy/deploy_tools.h"
#include "tests/deploy/exported_metrics.h"

namespace peregrine {
namespace {

namespace fs = std::filesystem;

fs::path AlertsFile() { return SourceDir() / "helm/peregrine/files/alerts.yaml"; }
fs::path AlertsTestFile() { return SourceDir() / "tests/deploy/testdata/alerts_test.yaml"; }

void RequirePromtool() {
  absl::StatusOr<ProcessResult> r = RunProcess({"promtool", "--version"});
  if (!r.ok() || r->exit_code != 0) {
    FAIL("promtool is not on PATH: install it with `sudo apt-get install -y prometheus` "
         "(scripts/install-tools.sh checks for it)");
  }
}

TEST_CASE("promtool check rules accepts the alert rules", "[integration]") {
  RequirePromtool();
  const ProcessResult r = Run({"promtool", "check", "rules", AlertsFile().string()});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("SUCCESS: 10 rules found"));
}

TEST_CASE("promtool test rules: alerts fire and stay silent as intended", "[integration]") {
  RequirePromtool();
  const ProcessResult r = Run({"promtool", "test", "rules", AlertsTestFile().string()});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("SUCCESS"));
}

TEST_CASE("the rule tests catch a changed threshold and a dropped guard", "[integration]") {
  RequirePromtool();
  const std::string alerts = ReadText(AlertsFile());
  struct Mutation {
    std::string from, to, alert;
  };
  const std::vector<Mutation> mutations = {
      {"increase(peregrine_evictions_total[1h])) >= 3", "increase(peregrine_evictions_total[1h])) >= 5",
       "PeregrineRepeatedEvictions"},
      {"(peregrine_job_last_completed_step offset 15m)", "(peregrine_job_last_completed_step)",
       "PeregrineJobNotProgressing"},
      {"peregrine_standby_desired > 0", "peregrine_standby_desired >= 0", "PeregrineStandbyPoolEmpty"},
      {" or absent(peregrine_controller_is_leader)", "", "PeregrineControllerNoLeader"},
      {"peregrine_job_ettr_ratio < 0.90", "peregrine_job_ettr_ratio < 0.80", "PeregrineJobEttrLow"},
      {"peregrine_failslow_open{strategy=\"ignore\"} > 0", "peregrine_failslow_open > 0", "PeregrineFailSlowUnmitigated"},
      {"(peregrine_node_health_machines)), 1) > 0.05", "(peregrine_node_health_machines)), 1) > 0.04",
       "PeregrineNodesOutOfService"},
      {"sum(max by (state) (peregrine_node_health_machines{state=~\"quarantined|retired\"}))",
       "sum(peregrine_node_health_machines{state=~\"quarantined|retired\"})", "PeregrineNodesOutOfService"},
      {"peregrine_job_agents{state=\"disconnected\"} > 0", "peregrine_job_agents > 0", "PeregrineAgentsDisconnected"},
  };
  for (const Mutation& m : mutations) {
    INFO("mutation: " << m.from << " -> " << m.to);
    const size_t at = alerts.find(m.from);
    REQUIRE(at != std::string::npos);
    std::string mutated = alerts;
    mutated.replace(at, m.from.size(), m.to);
    // Same relative layout as the repository, so the test file's rule_files path holds.
    ScratchDir dir;
    fs::create_directories(dir.path() / "helm/peregrine/files");
    fs::create_directories(dir.path() / "tests/deploy/testdata");
    std::ofstream(dir.path() / "helm/peregrine/files/alerts.yaml") << mutated;
    fs::copy_file(AlertsTestFile(), dir.path() / "tests/deploy/testdata/alerts_test.yaml");
    const ProcessResult r =
        Run({"promtool", "test", "rules", (dir.path() / "tests/deploy/testdata/alerts_test.yaml").string()});
    INFO(r.out << r.err);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.out + r.err, Catch::Contains("alertname: " + m.alert));
  }
}

TEST_CASE("alerts use only exported metric names and carry severity and text", "[unit]") {
  const std::set<std::string> exported = ExportedMetricNames();
  const std::string runbooks = ReadText(SourceDir() / "docs/operations.md");
  const YAML::Node file = YAML::LoadFile(AlertsFile().string());
  const std::regex metric(R"(\bperegrine_[a-z_]+)");
  std::set<std::string> used;
  std::set<std::string> alerts;
  std::set<std::string> runbooked;
  for (const YAML::Node& group : file["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      const std::string name = rule["alert"].Scalar();
      alerts.insert(name);
      INFO(name);
      const std::string expr = rule["expr"].Scalar();
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric); it != std::sregex_iterator(); ++it) {
        used.insert(it->str());
      }
      const std::string severity = rule["labels"]["severity"].Scalar();
      CHECK((severity == "critical" || severity == "warning"));
      CHECK(!rule["annotations"]["summary"].Scalar().empty());
      CHECK(!rule["annotations"]["description"].Scalar().empty());
      // A runbook link points at the alert's own section of docs/operations.md.
      if (rule["annotations"]["runbook_url"]) {
        std::string anchor = name;
        for (char& c : anchor) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        CHECK_THAT(rule["annotations"]["runbook_url"].Scalar(), Catch::EndsWith("docs/operations.md#" + anchor));
        CHECK_THAT(runbooks, Catch::Contains("\n### " + name + "\n"));
        runbooked.insert(name);
      }
    }
  }
  for (const std::string& m : used) {
    INFO(m);
    CHECK(exported.count(m) == 1);
  }
  CHECK(alerts == std::set<std::string>{"PeregrineJobNotProgressing", "PeregrineStandbyPoolEmpty",
                                        "PeregrineRepeatedEvictions", "PeregrineControllerNoLeader",
                                        "PeregrineControllerMultipleLeaders", "PeregrineReconcileErrors",
                                        "PeregrineJobEttrLow", "PeregrineFailSlowUnmitigated",
                                        "PeregrineNodesOutOfService", "PeregrineAgentsDisconnected"});
  CHECK(runbooked == std::set<std::string>{"PeregrineStandbyPoolEmpty", "PeregrineJobEttrLow",
                                           "PeregrineFailSlowUnmitigated", "PeregrineNodesOutOfService",
                                           "PeregrineAgentsDisconnected"});
  // Conventions of the exported names themselves; the new series are among them.
  for (const char* m : {"peregrine_time_lost_seconds_total", "peregrine_failslow_mitigations_total",
                        "peregrine_failslow_open", "peregrine_job_agents", "peregrine_machine_inspection_problems",
                        "peregrine_kube_api_request_duration_seconds_bucket", "peregrine_job_ettr_ratio"}) {
    CHECK(exported.count(m) == 1);
  }
  for (const std::string& m : exported) {
    INFO(m);
    CHECK(m.rfind("peregrine_", 0) == 0);
    CHECK(m.find("_milliseconds") == std::string::npos);
  }
}

}  // namespace
}  // namespace peregrine
