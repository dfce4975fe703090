// peregrinectl analyze steps: files as users have them. The samples are built here, small,
// to the column layouts the tools document and write (none is a copy of a real run):
//  - PyTorch Lightning's CSVLogger metrics.csv: one column per logged key plus "epoch" and
//    "step", a row per logging call, empty cells for keys not logged in that call (the
//    validation rows), logged every log_every_n_steps = 50 steps (the default);
//  - a Hugging Face Trainer's trainer_state.json "log_history" written out with
//    pandas.DataFrame.to_csv: an unnamed index column first, then the keys in order of
//    appearance (loss, grad_norm, learning_rate, epoch, step, plus a step_time a callback
//    logs), logging_steps = 10, and the final train_runtime summary row without step_time;
//  - a Weights & Biases chart panel "Export CSV": "Step", then per run "<run> - <metric>" and
//    its "__MIN" / "__MAX" envelope columns;
//  - a W&B run history exported per rank and concatenated: "_runtime", "_timestamp",
//    "trainer/global_step", "train/fwd_bwd_ms", "rank_id" among other metrics.
// Then the rules: column mapping, header-less files, units, strides, duplicates, skipped
// rows, BOM/CRLF, JSON lines, and hostile input.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/analyze/step_times.h"
#include "tests/cli/analyze/analyze_test_util.h"

namespace peregrine {
namespace {

using analyze_test::Analyze;
using testing::TempDir;
using testing::WriteFile;

bool Has(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

// Every "onsetStep" anywhere in a report (robust to how the report nests them).
void CollectOnsets(const nlohmann::json& j, std::vector<int64_t>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "onsetStep" && it.value().is_number_integer()) out->push_back(it.value().get<int64_t>());
      CollectOnsets(it.value(), out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) CollectOnsets(v, out);
  }
}

// Deterministic small wobble in [-1, 1].
double Wobble(int i, int w) { return std::sin(0.7 * i + 1.3 * w) * std::cos(0.31 * i); }

StepTimesTable Parse(const std::string& text, const StepTableOptions& options = {}) {
  absl::StatusOr<StepTimesTable> t = ParseStepTimesCsv(text, "in.csv", options);
  INFO(t.status().message());
  REQUIRE(t.ok());
  return *t;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) absl::StrAppend(&s, x, "\n");
  return s;
}

TEST_CASE("analyze steps: a Lightning CSVLogger metrics.csv with sampled steps", "[unit]") {
  // 4 ranks' metrics.csv files concatenated with a rank column; steps 49, 99, ... (every 50th);
  // a validation row (empty step time) after every 20 training rows; rank 2 is 30% slower
  // from step 6049 (row 120 of 200).
  std::string csv = "epoch,rank,step,train_loss,train_step_time_ms,val_loss\n";
  for (int i = 0; i < 200; ++i) {
    const int64_t step = 49 + 50 * i;
    for (int r = 0; r < 4; ++r) {
      double ms = 412.0 * (1.0 + 0.01 * Wobble(i, r));
      if (r == 2 && step >= 6049) ms *= 1.3;
      absl::StrAppendFormat(&csv, "%d,%d,%d,%.4f,%.3f,\n", i / 20, r, step, 2.5 - 0.001 * i, ms);
      if (i % 20 == 19) absl::StrAppendFormat(&csv, "%d,%d,%d,,,%.4f\n", i / 20, r, step, 2.4 - 0.001 * i);
    }
  }
  TempDir dir;
  WriteFile(dir.Path("metrics.csv"), csv);
  // No time alias: named with --time-col; its unit comes from its name.
  StepTableOptions options;
  options.time_column = "train_step_time_ms";
  const StepTimesTable t = Parse(csv, options);
  REQUIRE(t.workers.size() == 4);
  // A name with a time word and a unit is found without the flag too.
  CHECK(Parse(csv).workers[3].times == t.workers[3].times);
  CHECK(t.unit == "s");
  CHECK(t.source_unit == "ms");
  CHECK(t.step_stride == 50);
  CHECK(t.step_gaps == 0);
  CHECK(t.workers[0].steps.front() == 49);
  CHECK(t.workers[0].steps.back() == 49 + 50 * 199);
  CHECK(t.workers[0].times.front() == Approx(0.412).epsilon(0.02));
  CHECK(t.skipped_rows == 40);  // the validation rows
  CHECK(Has(Joined(t.warnings), "40 row(s) skipped: in.csv:79: column 'train_step_time_ms' is empty"));
  CHECK(Has(Joined(t.warnings), "steps advance by 50"));

  analyze_test::Result r = Analyze({"steps", dir.Path("metrics.csv"), "--time-col", "train_step_time_ms", "--json"});
  const nlohmann::json j = r.Json();
  INFO(r.out);
  CHECK(j["unit"] == "ms");  // 0.41 s reads best in ms
  CHECK_FALSE(Has(r.out, "times converted"));  // written in ms, reported in ms
  CHECK(Has(r.out, "steps advance by 50"));
  // The slowdown's onset is a step number as written (6049), not a row index (120).
  std::vector<int64_t> onsets;
  CollectOnsets(j, &onsets);
  REQUIRE_FALSE(onsets.empty());
  for (int64_t onset : onsets) {
    CHECK(onset % 50 == 49);
    CHECK(std::abs(onset - 6049) <= 150);
  }
  // Before, --time-col did not exist and the file was refused.
  analyze_test::Result text = Analyze({"steps", dir.Path("metrics.csv"), "--time-col", "5"});
  REQUIRE(text.code == 0);
  CHECK(Has(text.out, "times in ms"));
}

TEST_CASE("analyze steps: a Hugging Face Trainer log_history written by pandas to_csv", "[unit]") {
  std::string csv = ",loss,grad_norm,learning_rate,epoch,step,step_time\n";
  int row = 0;
  for (int i = 1; i <= 60; ++i) {
    absl::StrAppendFormat(&csv, "%d,%.4f,%.3f,%.3e,%.2f,%d,%.5f\n", row++, 2.0 - 0.01 * i, 1.0 + 0.1 * Wobble(i, 0),
                          5e-5 * (1 - i / 61.0), i / 30.0, 10 * i, 0.215 * (1 + 0.01 * Wobble(i, 1)));
  }
  absl::StrAppendFormat(&csv, "%d,,,,2.0,600,\n", row);  // the summary row (train_runtime... dropped here)
  const StepTimesTable t = Parse(csv);
  CHECK(t.format == StepTableFormat::kLong);
  REQUIRE(t.workers.size() == 1);
  CHECK(t.workers[0].worker == "in.csv");  // no worker column: one series named after the file
  CHECK(t.workers[0].steps.size() == 60);
  CHECK(t.step_stride == 10);
  CHECK(t.skipped_rows == 1);
  CHECK(t.unit == "s");
  CHECK(Has(Joined(t.warnings), "no worker column"));
  CHECK(Has(Joined(t.warnings), "in.csv:62: column 'step_time' is empty"));
}

TEST_CASE("analyze steps: a W&B chart CSV export ignores the __MIN/__MAX envelope columns", "[unit]") {
  std::string csv = "\"Step\"";
  for (int r = 0; r < 3; ++r) {
    absl::StrAppendFormat(&csv, ",\"rank%d - train/step_time\",\"rank%d - train/step_time__MIN\","
                                "\"rank%d - train/step_time__MAX\"", r, r, r);
  }
  csv += "\n";
  for (int i = 0; i < 40; ++i) {
    absl::StrAppend(&csv, 100 * i);
    for (int r = 0; r < 3; ++r) {
      const double v = 812 + r + Wobble(i, r);
      absl::StrAppendFormat(&csv, ",%.2f,%.2f,%.2f", v, v - 3, v + 3);
    }
    csv += "\n";
  }
  StepTableOptions options;
  options.unit = "ms";
  const StepTimesTable t = Parse(csv, options);
  CHECK(t.format == StepTableFormat::kWide);
  REQUIRE(t.workers.size() == 3);
  CHECK(t.workers[1].worker == "rank1 - train/step_time");
  CHECK(t.step_stride == 100);
  CHECK(t.unit == "s");
  CHECK(t.workers[0].times[0] == Approx(0.812).epsilon(0.01));
  CHECK(Has(Joined(t.warnings), "ignored 6 min/max envelope column(s)"));
  // Without --unit a wide table keeps the numbers as written and says so.
  const StepTimesTable raw = Parse(csv);
  CHECK(raw.unit.empty());
  CHECK(raw.workers[0].times[0] == Approx(812).epsilon(0.01));
  CHECK(Has(Joined(raw.warnings), "--unit"));
}

TEST_CASE("analyze steps: extra columns and no step-like name: --worker-col --step-col --time-col", "[unit]") {
  // A W&B history export per rank, concatenated: nothing is named like a step or a time alias.
  std::string csv = "_runtime,_timestamp,trainer/global_step,train/loss,train/fwd_bwd_ms,rank_id,tokens_per_sec\n";
  for (int i = 0; i < 50; ++i) {
    for (int r = 0; r < 2; ++r) {
      absl::StrAppendFormat(&csv, "%.1f,%.3f,%d,%.3f,%.2f,%d,%d\n", 3.1 * i, 1.7e9 + 3.1 * i, 1000 + i, 3.0 - 0.01 * i,
                            88.0 + Wobble(i, r), r, 52000 + i);
    }
  }
  TempDir dir;
  WriteFile(dir.Path("wandb.csv"), csv);
  // Names, any case, and indexes.
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--worker-col", "RANK_ID", "--step-col", "trainer/global_step", "--time-col",
                                 "train/fwd_bwd_ms"},
        std::vector<std::string>{"--worker-col", "6", "--step-col", "3", "--time-col", "5"}}) {
    std::vector<std::string> args = {"steps", dir.Path("wandb.csv"), "--json"};
    args.insert(args.end(), flags.begin(), flags.end());
    analyze_test::Result r = Analyze(args);
    const nlohmann::json j = r.Json();
    REQUIRE(j["workers"].size() == 2);
    CHECK(j["format"] == "long");
    CHECK(j["unit"] == "ms");
    CHECK(j["workers"][0]["firstStep"] == 1000);
    CHECK(j["workers"][0]["lastStep"] == 1049);
  }
  // --unit overrides the name's unit.
  StepTableOptions options;
  options.worker_column = "rank_id";
  options.step_column = "trainer/global_step";
  options.time_column = "train/fwd_bwd_ms";
  options.unit = "us";
  CHECK(Parse(csv, options).workers[0].times[0] == Approx(88e-6).epsilon(0.02));
  // Unknown columns: the error lists the header's columns.
  analyze_test::Result bad = Analyze({"steps", dir.Path("wandb.csv"), "--time-col", "step_time"});
  CHECK(bad.code == 1);
  CHECK(Has(bad.err, "wandb.csv:1: --time-col 'step_time': no such column; the header's columns: _runtime, "
                     "_timestamp, trainer/global_step"));
  analyze_test::Result far = Analyze({"steps", dir.Path("wandb.csv"), "--time-col", "9"});
  CHECK(far.code == 1);
  CHECK(Has(far.err, "--time-col 9: no such column; there are 7"));
  // Flag values are checked.
  CHECK(Analyze({"steps", dir.Path("wandb.csv"), "--unit", "hours"}).code == 2);
  CHECK(Analyze({"steps", dir.Path("wandb.csv"), "--time-col", ""}).code == 2);
  // Without the step column, rows are numbered per worker in file order, and the notes say so.
  options.step_column.clear();
  const StepTimesTable numbered = Parse(csv, options);
  CHECK(numbered.steps_numbered);
  CHECK(numbered.workers[1].steps.front() == 0);
  CHECK(numbered.workers[1].steps.back() == 49);
  CHECK(Has(Joined(numbered.warnings), "no step column: each worker's rows are numbered 0, 1, 2"));
}

TEST_CASE("analyze steps: a header-less file needs the columns by index", "[unit]") {
  TempDir dir;
  std::string csv;
  for (int i = 0; i < 40; ++i) {
    for (int r = 0; r < 2; ++r) absl::StrAppendFormat(&csv, "%d,%d,%.4f\n", r, i, 0.5 + 0.001 * Wobble(i, r));
  }
  WriteFile(dir.Path("bare.csv"), csv);
  analyze_test::Result refused = Analyze({"steps", dir.Path("bare.csv")});
  CHECK(refused.code == 1);
  CHECK(Has(refused.err, "bare.csv:1: no header line: the first line is data"));
  CHECK(Has(refused.err, "--worker-col 1 --step-col 2 --time-col 3"));
  const nlohmann::json j =
      Analyze({"steps", dir.Path("bare.csv"), "--worker-col", "1", "--step-col", "2", "--time-col", "3", "--unit", "s",
               "--json"})
          .Json();
  REQUIRE(j["workers"].size() == 2);
  CHECK(j["workers"][0]["stats"]["count"] == 40);  // the first line is data, not a header
  CHECK(j["unit"] == "ms");
  // Two columns: one series, steps and times.
  StepTableOptions options;
  options.step_column = "1";
  options.time_column = "2";
  const StepTimesTable two = Parse("0,1.5\n1,1.6\n2,1.4\n", options);
  REQUIRE(two.workers.size() == 1);
  CHECK(two.workers[0].steps == std::vector<int64_t>{0, 1, 2});
  CHECK(two.unit.empty());  // "column 2" names no unit
}

TEST_CASE("analyze steps: duplicate rows are dropped with a warning, not fatal", "[unit]") {
  const std::string csv =
      "worker,step,seconds\n"
      "a,1,1.0\n"
      "b,1,2.0\n"
      "a,2,1.1\n"
      "a,2,1.1\n"    // exact duplicate of line 4
      "b,1,2.5\n"    // conflicting with line 3: line 3's time is kept
      "a,2,1.1\n"    // exact again
      "b,2,2.1\n";
  const StepTimesTable t = Parse(csv);
  CHECK(t.duplicate_rows == 3);
  CHECK(t.conflicting_rows == 1);
  CHECK(t.workers[0].times == std::vector<double>{1.0, 1.1});
  CHECK(t.workers[1].times == std::vector<double>{2.0, 2.1});
  const std::string w = Joined(t.warnings);
  CHECK(Has(w, "2 exact duplicate row(s) dropped (same worker, step and time): line 5 repeats line 4; line 7 repeats "
               "line 4"));
  CHECK(Has(w, "1 conflicting duplicate row(s) dropped"));
  CHECK(Has(w, "line 6 has worker 'b' step 1 with time 2.5, line 3 had 2"));
  StepTableOptions strict;
  strict.strict = true;
  absl::StatusOr<StepTimesTable> s = ParseStepTimesCsv(csv, "in.csv", strict);
  REQUIRE_FALSE(s.ok());
  CHECK(Has(std::string(s.status().message()), "in.csv:5: worker 'a' step 2 appears twice (first on line 4)"));
  // Wide rows repeating a step: the same rules per row.
  const StepTimesTable wide = Parse("step,a,b\n1,1.0,2.0\n1,1.0,2.0\n1,1.0,9.0\n2,1.1,2.1\n");
  CHECK(wide.duplicate_rows == 2);
  CHECK(wide.conflicting_rows == 1);
  CHECK(wide.workers[1].times == std::vector<double>{2.0, 2.1});
}

TEST_CASE("analyze steps: unreadable rows are skipped and counted with their reasons", "[unit]") {
  std::string csv = "worker,step,seconds\n";
  for (int i = 0; i < 20; ++i) absl::StrAppendFormat(&csv, "a,%d,1.0\n", i);
  csv += "a,20,fast\n"       // line 22: not a number
         "a,21\n"            // line 23: missing cell
         "a,22,-3\n"         // line 24: negative
         "a,23,nan\n"        // line 25: not finite
         ",24,1.0\n"         // line 26: no worker
         "a,1e99999,1.0\n"   // line 27: not an integer step
         "a,26,1e99999\n"    // line 28: out of range
         "a,27,\"1.0\n"      // line 29: unterminated quote
         "a,28,1.0,extra\n"  // line 30: too many fields
         "a,29,1.";          // line 31: truncated last line (still a number)
  const StepTimesTable t = Parse(csv);
  CHECK(t.skipped_rows == 9);
  CHECK(t.workers[0].steps.size() == 21);
  const std::string w = Joined(t.warnings);
  INFO(w);
  CHECK(Has(w, "9 row(s) skipped: in.csv:22: column 'seconds': not a number: 'fast'; in.csv:23: expected 3 fields"));
  CHECK(Has(w, "in.csv:24: column 'seconds': a time must be finite, >= 0 and below 1e15, got '-3'"));
  CHECK(Has(w, "(and 4 more)"));
  // Nothing usable left: an error quoting the first reason.
  absl::StatusOr<StepTimesTable> none = ParseStepTimesCsv("worker,step,seconds\na,1,x\na,2,y\n", "in.csv");
  REQUIRE_FALSE(none.ok());
  CHECK(Has(std::string(none.status().message()),
            "in.csv: no usable step time: 2 row(s) and 0 cell(s) could not be read; first: in.csv:2: column "
            "'seconds': not a number: 'x'"));
  // Wide: a bad cell skips that cell only.
  const StepTimesTable wide = Parse("step,a,b\n1,1.0,2.0\n2,oops,2.1\nthree,1,1\n4,1.2,2.2\n");
  CHECK(wide.skipped_cells == 1);
  CHECK(wide.skipped_rows == 1);
  CHECK(wide.workers[0].steps == std::vector<int64_t>{1, 4});
  CHECK(wide.workers[1].steps == std::vector<int64_t>{1, 2, 4});
}

TEST_CASE("analyze steps: strides, gaps and irregular steps", "[unit]") {
  std::string csv = "rank,iteration,time_ms\n";
  for (int64_t s : {0, 10, 20, 30, 50, 60, 70, 100, 110}) {
    absl::StrAppendFormat(&csv, "0,%d,5\n1,%d,5\n", s, s);
  }
  const StepTimesTable t = Parse(csv);
  CHECK(t.step_stride == 10);
  CHECK(t.step_gaps == 4);  // 30->50 and 70->100, on both workers
  CHECK(t.workers[0].steps == std::vector<int64_t>{0, 10, 20, 30, 50, 60, 70, 100, 110});
  CHECK(Has(Joined(t.warnings), "4 gap(s) where consecutive logged steps are not 10 apart"));
  const StepTimesTable every = Parse("rank,step,seconds\n0,5,1\n0,6,1\n0,7,1\n");
  CHECK(every.step_stride == 1);
  CHECK(every.warnings.empty());
  const StepTimesTable irregular = Parse("rank,step,seconds\n0,1,1\n0,3,1\n0,7,1\n0,8,1\n0,20,1\n");
  CHECK(irregular.step_stride == 0);
  CHECK(Has(Joined(irregular.warnings), "irregular"));
}

TEST_CASE("analyze steps: BOM, CRLF, TSV, semicolons, JSON lines and units", "[unit]") {
  const StepTimesTable bom = Parse("\xEF\xBB\xBFworker,step,seconds\r\na,1,0.5\r\na,2,0.6\r\n");
  REQUIRE(bom.workers.size() == 1);
  CHECK(bom.workers[0].worker == "a");
  CHECK(bom.workers[0].times == std::vector<double>{0.5, 0.6});
  const StepTimesTable tsv = Parse("host\tstep\tduration_ms\nh1\t1\t250\n");
  CHECK(tsv.workers[0].times[0] == Approx(0.25));
  const StepTimesTable semi = Parse("host;step;Iter Time (min)\nh1;1;2\n");
  CHECK(semi.workers[0].times[0] == Approx(120.0));
  CHECK(semi.source_unit == "min");
  StepTableOptions ns;
  ns.unit = "ns";
  CHECK(Parse("host,step,elapsed\nh1,1,2500000\n", ns).workers[0].times[0] == Approx(0.0025));
  // JSON lines, keys as aliases or named; a bad line is skipped.
  const StepTimesTable jl = Parse(
      "{\"rank\": 1, \"step\": 3, \"time\": 0.25}\n{\"rank\": 0, \"step\": 3, \"time\": 0.5}\n"
      "{\"rank\": 0, \"step\": 4, \"time\": 0.5}\nnot json\n[1,2]\n{\"rank\": 0, \"step\": 5}\n");
  REQUIRE(jl.workers.size() == 2);
  CHECK(jl.workers[0].worker == "0");
  CHECK(jl.workers[0].steps == std::vector<int64_t>{3, 4});
  CHECK(jl.skipped_rows == 3);
  CHECK(Has(Joined(jl.warnings), "in.csv:4: not JSON: not json; in.csv:5: not a JSON object: [1,2]; in.csv:6: no key 'time'"));
  StepTableOptions keys;
  keys.worker_column = "host";
  keys.time_column = "dt_us";
  const StepTimesTable named = Parse("{\"host\": \"n1\", \"iter\": 9, \"dt_us\": 1500}\n", keys);
  CHECK(named.workers[0].times[0] == Approx(0.0015));
  CHECK(named.workers[0].steps[0] == 9);
  keys.time_column = "3";
  CHECK_FALSE(ParseStepTimesCsv("{\"host\": \"n1\", \"iter\": 9, \"dt_us\": 1500}\n", "in.csv", keys).ok());
  // Integral float steps (pandas writes 1200.0) are steps; 1.5 is not.
  CHECK(Parse("rank,step,seconds\n0,1200.0,1\n").workers[0].steps[0] == 1200);
  CHECK(Parse("rank,step,seconds\n0,1.5,1\n0,2,1\n").skipped_rows == 1);
}

TEST_CASE("analyze steps: hostile input never crashes and names the line", "[unit]") {
  const std::vector<std::string> inputs = {
      std::string("worker,step,seconds\n") + std::string(100000, 'a') + ",1,1\n",
      "worker,step,seconds\n\"\"\"\",1,1\n",
      "\"worker,step,seconds\n",
      "worker,step,seconds\na,9223372036854775807,1\na,-9223372036854775808,1\n",
      "worker,step,seconds\na,1,1\n\n\n#\n   \na,2,1",
      "{\"rank\":1e999999,\"step\":1,\"time\":1}\n",
      "{\"rank\":{\"x\":1},\"step\":1,\"time\":1}\n{\n",
      "step\n1\n2\n",
      ",,,\n,,,\n",
      "worker,step,seconds\n\xff\xfe,1,1\n",
  };
  for (const std::string& in : inputs) {
    INFO(in.substr(0, 80));
    for (bool strict : {false, true}) {
      StepTableOptions o;
      o.strict = strict;
      absl::StatusOr<StepTimesTable> t = ParseStepTimesCsv(in, "h.csv", o);
      if (!t.ok()) CHECK(Has(std::string(t.status().message()), "h.csv"));
    }
  }
  // The extreme steps are read exactly.
  const StepTimesTable big = Parse(inputs[3]);
  CHECK(big.workers[0].steps.front() == INT64_MIN);
  CHECK(big.workers[0].steps.back() == INT64_MAX);
}

}  // namespace
}  // namespace peregrine
