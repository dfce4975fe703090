// The chart's Grafana dashboard (helm/peregrine/files/dashboard.json): it parses as a
// dashboard JSON model, every panel has a title and a Prometheus target on the
// ${datasource} variable, every PromQL expression of the dashboard and of the alert rules
// passes the real `promtool check rules` (each wrapped as a recording rule, with Grafana's
// variables substituted as Grafana would), every metric they name is one the controller
// exports (exported_metrics.h), and the chart renders the ConfigMap with the sidecar
// label only when grafana.dashboard.enabled is set (real helm).
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/deploy/chart_render.h"
#include "tests/deploy/deploy_tools.h"
#include "tests/deploy/exported_metrics.h"

namespace peregrine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path DashboardFile() { return SourceDir() / "helm/peregrine/files/dashboard.json"; }

json Dashboard() {
  json d = json::parse(ReadText(DashboardFile()), nullptr, /*allow_exceptions=*/false);
  REQUIRE_FALSE(d.is_discarded());
  return d;
}

// What Grafana substitutes before a query reaches Prometheus: a selected job and
// namespace, and the interval variables as durations.
std::string AsGrafanaSends(const std::string& expr) {
  return absl::StrReplaceAll(expr, {{"$__rate_interval", "2m"},
                                    {"$__range", "6h"},
                                    {"$__interval", "30s"},
                                    {"$namespace", "ml"},
                                    {"$job", "llm-7b"}});
}

std::vector<std::string> DashboardExprs(const json& d) {
  std::vector<std::string> exprs;
  for (const json& p : d.at("panels")) {
    for (const json& t : p.value("targets", json::array())) exprs.push_back(t.at("expr").get<std::string>());
  }
  return exprs;
}

std::vector<std::string> AlertExprs() {
  std::vector<std::string> exprs;
  const YAML::Node file = YAML::LoadFile((SourceDir() / "helm/peregrine/files/alerts.yaml").string());
  for (const YAML::Node& group : file["groups"]) {
    for (const YAML::Node& rule : group["rules"]) exprs.push_back(rule["expr"].Scalar());
  }
  return exprs;
}

std::set<std::string> MetricNames(const std::string& text) {
  static const std::regex metric(R"(\bperegrine_[a-z_]+)");
  std::set<std::string> used;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), metric); it != std::sregex_iterator(); ++it) {
    used.insert(it->str());
  }
  return used;
}

TEST_CASE("the dashboard is a Grafana dashboard whose panels each have a title and a Prometheus target", "[unit]") {
  const json d = Dashboard();
  CHECK(d.at("title") == "Peregrine");
  CHECK(d.at("schemaVersion").get<int>() >= 36);
  CHECK_FALSE(d.at("uid").get<std::string>().empty());
  // Template variables: the Prometheus data source, and namespace and job from label_values.
  std::set<std::string> vars;
  for (const json& v : d.at("templating").at("list")) {
    const std::string name = v.at("name");
    vars.insert(name);
    if (name == "datasource") {
      CHECK(v.at("type") == "datasource");
      CHECK(v.at("query") == "prometheus");
    } else {
      INFO(name);
      CHECK(v.at("type") == "query");
      CHECK(v.at("datasource").at("uid") == "${datasource}");
      CHECK_THAT(v.at("query").at("query").get<std::string>(), Catch::StartsWith("label_values(peregrine_"));
      CHECK_THAT(v.at("query").at("query").get<std::string>(), Catch::EndsWith(", " + name + ")"));
    }
  }
  CHECK(vars == std::set<std::string>{"datasource", "namespace", "job"});

  std::set<std::string> titles;
  std::set<int> ids;
  for (const json& p : d.at("panels")) {
    const std::string title = p.value("title", "");
    INFO("panel " << p.dump().substr(0, 200));
    CHECK_FALSE(title.empty());
    CHECK(titles.insert(title).second);  // titles are unique
    CHECK(ids.insert(p.at("id").get<int>()).second);
    CHECK(p.at("datasource").at("type") == "prometheus");
    CHECK(p.at("datasource").at("uid") == "${datasource}");
    REQUIRE(p.contains("targets"));
    REQUIRE_FALSE(p.at("targets").empty());
    for (const json& t : p.at("targets")) {
      CHECK_FALSE(t.at("expr").get<std::string>().empty());
      CHECK(t.at("datasource").at("uid") == "${datasource}");
    }
    const json& g = p.at("gridPos");
    CHECK(g.at("x").get<int>() + g.at("w").get<int>() <= 24);
  }
  // What the dashboard is for: one panel (at least) per subject.
  for (const char* want : {"Jobs by phase", "ETTR per job", "Incidents by kind", "Time lost by cause", "Fail-slow findings",
                           "Fail-slow mitigations", "Standby pool: desired vs ready", "Node health states", "Agents",
                           "Machine inspection problems", "Controller: leader", "Controller: reconciles",
                           "Controller: work queue depth", "Kubernetes API: p99 latency by verb", "Kubernetes API: errors"}) {
    INFO(want);
    CHECK(titles.count(want) == 1);
  }
  // Per-job panels follow the job and namespace variables.
  for (const std::string& expr : DashboardExprs(d)) {
    if (expr.find("peregrine_job_ettr_ratio") != std::string::npos ||
        expr.find("peregrine_time_lost_seconds_total") != std::string::npos) {
      CHECK_THAT(expr, Catch::Contains("namespace=~\"$namespace\", job=~\"$job\""));
    }
  }
}

TEST_CASE("promtool check rules accepts every PromQL expression of the dashboard and the alerts", "[integration]") {
  std::vector<std::string> exprs = DashboardExprs(Dashboard());
  const size_t dashboard_exprs = exprs.size();
  for (const std::string& e : AlertExprs()) exprs.push_back(e);
  REQUIRE(dashboard_exprs >= 15);
  // Each expression as a recording rule, in a rule file of its own making.
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "groups" << YAML::Value << YAML::BeginSeq << YAML::BeginMap << YAML::Key << "name"
      << YAML::Value << "peregrine-dashboard-check" << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
  for (size_t i = 0; i < exprs.size(); ++i) {
    const std::string sent = AsGrafanaSends(exprs[i]);
    INFO(exprs[i]);
    CHECK(sent.find('$') == std::string::npos);  // no variable Grafana would not fill
    out << YAML::BeginMap << YAML::Key << "record" << YAML::Value << absl::StrCat("peregrine_check:expr_", i) << YAML::Key
        << "expr" << YAML::Value << sent << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  ScratchDir dir;
  const fs::path rules = dir.path() / "exprs.yaml";
  std::ofstream(rules) << out.c_str();
  const ProcessResult r = Run({"promtool", "check", "rules", rules.string()});
  INFO(out.c_str() << "\n" << r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains(absl::StrCat("SUCCESS: ", exprs.size(), " rules found")));

  // The check itself: a broken expression is refused.
  std::ofstream(rules) << "groups:\n- name: g\n  rules:\n  - record: peregrine_check:bad\n    expr: sum by (job (peregrine_jobs)\n";
  const ProcessResult bad = Run({"promtool", "check", "rules", rules.string()});
  CHECK(bad.exit_code != 0);
}

TEST_CASE("the dashboard and the alerts use only metrics the controller exports", "[unit]") {
  const std::set<std::string> exported = ExportedMetricNames();
  std::string all;
  for (const std::string& e : DashboardExprs(Dashboard())) all += e + "\n";
  for (const json& v : Dashboard().at("templating").at("list")) {
    if (v.contains("definition")) all += v.at("definition").get<std::string>() + "\n";
  }
  for (const std::string& e : AlertExprs()) all += e + "\n";
  const std::set<std::string> used = MetricNames(all);
  CHECK(used.size() >= 20);
  for (const std::string& m : used) {
    INFO(m);
    CHECK(exported.count(m) == 1);
  }
}

TEST_CASE("helm renders the dashboard ConfigMap with the sidecar label only when enabled", "[integration]") {
  Helm helm;
  for (const YAML::Node& cm : OfKind(helm.Render(), "ConfigMap")) {
    CHECK_FALSE(cm["metadata"]["labels"]["grafana_dashboard"]);
  }
  const std::vector<YAML::Node> on = helm.Render({"--set", "grafana.dashboard.enabled=true"});
  const YAML::Node cm = One(on, "ConfigMap");
  CHECK(cm["metadata"]["name"].Scalar() == "peregrine-dashboard");
  CHECK(cm["metadata"]["namespace"].Scalar() == kNamespace);
  CHECK(cm["metadata"]["labels"]["grafana_dashboard"].Scalar() == "1");
  CHECK_FALSE(cm["metadata"]["annotations"]);
  // The data is the dashboard file, whole.
  const json data = json::parse(cm["data"]["peregrine.json"].Scalar());
  CHECK(data == Dashboard());

  // Labels, the folder annotation and the namespace come from the values.
  const YAML::Node custom = One(helm.Render({"--set", "grafana.dashboard.enabled=true", "--set",
                                             "grafana.dashboard.annotations.grafana_folder=Training", "--set",
                                             "grafana.dashboard.namespace=monitoring", "--set",
                                             "grafana.dashboard.labels.team=ml"}),
                                "ConfigMap");
  CHECK(custom["metadata"]["namespace"].Scalar() == "monitoring");
  CHECK(custom["metadata"]["annotations"]["grafana_folder"].Scalar() == "Training");
  CHECK(custom["metadata"]["labels"]["team"].Scalar() == "ml");
  CHECK(custom["metadata"]["labels"]["grafana_dashboard"].Scalar() == "1");
  CHECK(helm.Lint({"--set", "grafana.dashboard.enabled=true"}).exit_code == 0);
}

}  // namespace
}  // namespace peregrine
