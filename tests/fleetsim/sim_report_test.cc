#include "fleetsim/sim_report.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"

namespace peregrine::fleetsim {
namespace {

SimResult Peregrine() {
  SimResult r;
  r.policy = "peregrine";
  r.wall_s = 86400;
  r.kept_s = 86400 - 3600;
  r.ettr = r.kept_s / r.wall_s;
  r.goodput = 0.95;
  r.lost.detection_s = 720;
  r.lost.diagnosis_s = 360;
  r.lost.restart_s = 1080;
  r.lost.redo_s = 720;
  r.lost.checkpoint_s = 720;  // 3,600 s in all
  r.faults = 12;
  r.fail_stops = 10;
  r.fail_slows = 2;
  r.evictions = 11;
  r.false_evictions = 1;
  r.restarts = 10;
  r.standby_exhaustions = 1;
  r.recoveries = 10;
  r.recovery_s = 1500;
  r.decisions = 4242;
  r.failslow_findings = 3;
  r.failslow_localized = 3;
  r.failslow_compute = 2;
  r.failslow_communication = 1;
  r.failslow_confirmed = 2;
  r.failslow_s2_plans = 0;
  r.failslow_s4 = 1;
  r.sim_cpu_s = 0.25;
  return r;
}

SimResult Requeue() {
  SimResult r;
  r.policy = "requeue-disk-30min";
  r.wall_s = 86400;
  r.kept_s = 86400 - 4 * 3600;
  r.ettr = r.kept_s / r.wall_s;
  r.goodput = r.ettr;
  r.lost.detection_s = 300;
  r.lost.restart_s = 7200;
  r.lost.redo_s = 4500;
  r.lost.waiting_s = 2400;  // 14,400 s in all
  r.faults = 10;
  r.fail_stops = 10;
  r.evictions = 10;
  r.restarts = 10;
  r.recoveries = 10;
  r.recovery_s = 21300;
  return r;
}

SimResult NoRecoveries() {
  SimResult r;
  r.policy = "oracle";
  r.wall_s = 86400;
  r.kept_s = 86400;
  r.ettr = 1;
  r.goodput = 1;
  return r;
}

JobShape Shape() {
  JobShape s;
  s.gpus = 1024;
  s.gpus_per_machine = 8;
  s.days = 1;
  s.step_time_s = 10;
  s.seed = 7;
  return s;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST_CASE("report table: one row per policy with hours by cause, counts and ratios to the first row", "[unit]") {
  const std::string table = FormatResultsTable(Shape(), {Peregrine(), Requeue(), NoRecoveries()});
  const std::vector<std::string> lines = Lines(table);
  REQUIRE(lines.size() == 6);  // job, header, three rows, legend
  CHECK(lines[0] == "job: 1024 GPUs on 128 machines (8 per machine), 1 days, step 10 s, seed 7");
  CHECK(lines[1].rfind("policy", 0) == 0);
  // Every row is as wide as the header: the columns line up.
  for (int i = 2; i <= 4; ++i) CHECK(lines[i].size() == lines[1].size());

  const std::vector<std::string> peregrine = absl::StrSplit(lines[2], ' ', absl::SkipEmpty());
  const std::vector<std::string> expected_peregrine = {
      "peregrine", "0.9583", "0.9500", "1.00", "|", "0.20", "0.10", "0.30", "0.20", "0.00",
      "0.20", "0.00", "|", "11", "1", "10", "1", "150.0", "|", "1.0000", "1.00",
      "|", "3", "2", "1", "0", "1"};
  CHECK(peregrine == expected_peregrine);

  const std::vector<std::string> requeue = absl::StrSplit(lines[3], ' ', absl::SkipEmpty());
  const std::vector<std::string> expected_requeue = {
      "requeue-disk-30min", "0.8333", "0.8333", "4.00", "|", "0.08", "0.00", "2.00", "1.25",
      "0.00", "0.00", "0.67", "|", "10", "0", "10", "0", "2130.0", "|", "0.8696", "4.00",
      "|", "-", "-", "-", "-", "-"};  // a baseline has no fail-slow findings
  CHECK(requeue == expected_requeue);

  const std::vector<std::string> oracle = absl::StrSplit(lines[4], ' ', absl::SkipEmpty());
  CHECK(oracle[17] == "-");  // no recoveries: no mean
  CHECK(oracle[19] == "1.0435");
  CHECK(oracle[20] == "0.00");
  CHECK(lines[5].find("first row's (peregrine)") != std::string::npos);
  CHECK(lines[5].find("oracle of the fault list") != std::string::npos);
}

TEST_CASE("report table: a first row that lost nothing gives no time-lost ratio, and no results says so", "[unit]") {
  const std::vector<std::string> lines =
      Lines(FormatResultsTable(Shape(), {NoRecoveries(), Requeue()}));
  REQUIRE(lines.size() == 5);
  const std::vector<std::string> requeue = absl::StrSplit(lines[3], ' ', absl::SkipEmpty());
  CHECK(requeue[20] == "-");
  CHECK(requeue[19] == "0.8333");
  CHECK(FormatResultsTable(Shape(), {}).find("(no results)") != std::string::npos);
}

TEST_CASE("report JSON: the job, the cost model and every result field, in a fixed key order", "[unit]") {
  CostModel costs;
  costs.requeue_s = 1234;
  costs.machine_return_s = 60;
  const std::string text = FormatResultsJson(Shape(), costs, {Peregrine(), NoRecoveries()});
  CHECK(text.back() == '\n');
  const nlohmann::ordered_json doc = nlohmann::ordered_json::parse(text);

  std::vector<std::string> top;
  for (const auto& [key, value] : doc.items()) top.push_back(key);
  CHECK(top == std::vector<std::string>{"job", "costs", "results"});

  const auto& job = doc["job"];
  CHECK(job["gpus"] == 1024);
  CHECK(job["gpus_per_machine"] == 8);
  CHECK(job["machines"] == 128);
  CHECK(job["days"] == 1.0);
  CHECK(job["step_time_s"] == 10.0);
  CHECK(job["seed"] == 7);

  const auto& c = doc["costs"];
  CHECK(c.size() == 13);  // every CostModel field
  CHECK(c["requeue_s"] == 1234.0);
  CHECK(c["machine_return_s"] == 60.0);
  CHECK(c["failstop_detection_s"] == costs.failstop_detection_s);
  CHECK(c["disk_checkpoint_interval_s"] == costs.disk_checkpoint_interval_s);
  CHECK(c["memory_checkpoint_interval_s"] == costs.memory_checkpoint_interval_s);

  REQUIRE(doc["results"].size() == 2);
  const auto& p = doc["results"][0];
  std::vector<std::string> keys;
  for (const auto& [key, value] : p.items()) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{
                    "policy", "wall_s", "kept_s", "ettr", "goodput", "lost", "faults",
                    "fail_stops", "fail_slows", "evictions", "false_evictions", "restarts",
                    "standby_exhaustions", "recoveries", "recovery_s", "mean_recovery_s",
                    "failslow", "decisions", "sim_cpu_s", "ettr_vs_first", "lost_vs_first"});
  const SimResult want = Peregrine();
  CHECK(p["policy"] == "peregrine");
  CHECK(p["kept_s"] == want.kept_s);
  CHECK(p["ettr"] == want.ettr);
  CHECK(p["goodput"] == 0.95);
  CHECK(p["lost"]["detection_s"] == 720.0);
  CHECK(p["lost"]["diagnosis_s"] == 360.0);
  CHECK(p["lost"]["restart_s"] == 1080.0);
  CHECK(p["lost"]["redo_s"] == 720.0);
  CHECK(p["lost"]["slowdown_s"] == 0.0);
  CHECK(p["lost"]["checkpoint_s"] == 720.0);
  CHECK(p["lost"]["waiting_s"] == 0.0);
  CHECK(p["lost"]["total_s"] == 3600.0);
  CHECK(p["faults"] == 12);
  CHECK(p["fail_stops"] == 10);
  CHECK(p["fail_slows"] == 2);
  CHECK(p["evictions"] == 11);
  CHECK(p["false_evictions"] == 1);
  CHECK(p["restarts"] == 10);
  CHECK(p["standby_exhaustions"] == 1);
  CHECK(p["recoveries"] == 10);
  CHECK(p["recovery_s"] == 1500.0);
  CHECK(p["mean_recovery_s"] == 150.0);
  CHECK(p["failslow"] == nlohmann::ordered_json{{"findings", 3},   {"localized", 3}, {"compute", 2},
                                                {"communication", 1}, {"confirmed", 2}, {"s2_plans", 0},
                                                {"s4_replacements", 1}});
  CHECK(p["decisions"] == 4242);
  CHECK(p["sim_cpu_s"] == 0.25);
  CHECK(p["ettr_vs_first"] == 1.0);
  CHECK(p["lost_vs_first"] == 1.0);

  const auto& o = doc["results"][1];
  CHECK(o["mean_recovery_s"].is_null());
  CHECK(o["lost_vs_first"] == 0.0);
  CHECK(o["ettr_vs_first"].get<double>() == Approx(1 / want.ettr));
}

TEST_CASE("report JSON: the same results give the same text", "[unit]") {
  const std::vector<SimResult> results = {Peregrine(), Requeue()};
  CHECK(FormatResultsJson(Shape(), CostModel{}, results) ==
        FormatResultsJson(Shape(), CostModel{}, results));
  const auto doc = nlohmann::json::parse(FormatResultsJson(Shape(), CostModel{}, {}));
  CHECK(doc["results"].empty());
}

}  // namespace
}  // namespace peregrine::fleetsim
