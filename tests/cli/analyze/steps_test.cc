// peregrinectl analyze steps: CSV parsing (long and wide, aliases, errors) and the report
// on a generated job where one worker slows down by 30% at a known step and another is
// persistently 20% slower than its peers.
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

// Deterministic N(0, 1) noise (splitmix64 + Box-Muller), the same on every platform.
class Noise {
 public:
  explicit Noise(uint64_t seed) : state_(seed) {}
  double Gaussian() {
    const double u1 = (static_cast<double>(Next() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = (static_cast<double>(Next() >> 11) + 0.5) / 9007199254740992.0;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

constexpr int kWorkers = 8;
constexpr int64_t kFirstStep = 1000;
constexpr int kSteps = 300;
constexpr int64_t kSlowdownStep = 1200;  // worker 3 is 30% slower from here on
constexpr int kSlowWorker = 5;           // 20% slower throughout

// Step time of worker w at step s, in seconds: 1.5 s with 1.5% noise, a checkpoint save
// (3x) every 100 steps on every worker.
std::vector<std::vector<double>> GenerateJob() {
  Noise noise(20240611);
  std::vector<std::vector<double>> t(kWorkers, std::vector<double>(kSteps));
  for (int i = 0; i < kSteps; ++i) {
    const int64_t step = kFirstStep + i;
    for (int w = 0; w < kWorkers; ++w) {
      double base = 1.5;
      if (w == kSlowWorker) base *= 1.2;
      if (w == 3 && step >= kSlowdownStep) base *= 1.3;
      if (step % 100 == 50) base *= 3.0;
      t[w][i] = base * (1.0 + 0.015 * noise.Gaussian());
    }
  }
  return t;
}

std::string LongCsv(const std::vector<std::vector<double>>& t, bool milliseconds) {
  std::string csv = milliseconds ? "# exported from our dashboards\nIteration,Rank,iter_ms,loss\n"
                                 : "host,step,seconds\n";
  // Rows grouped by step, workers in reverse order: the parser must not rely on order.
  for (int i = 0; i < kSteps; ++i) {
    for (int w = kWorkers - 1; w >= 0; --w) {
      if (milliseconds) {
        absl::StrAppendFormat(&csv, "%d,%d,%.3f,2.%02d\n", kFirstStep + i, w, 1000.0 * t[w][i], i % 100);
      } else {
        absl::StrAppendFormat(&csv, "node-%02d,%d,%.6f\n", w, kFirstStep + i, t[w][i]);
      }
    }
  }
  return csv;
}

std::string WideCsv(const std::vector<std::vector<double>>& t) {
  std::string csv = "step";
  for (int w = 0; w < kWorkers; ++w) absl::StrAppend(&csv, ",gpu", w);
  csv += "\n";
  for (int i = 0; i < kSteps; ++i) {
    absl::StrAppend(&csv, kFirstStep + i);
    for (int w = 0; w < kWorkers; ++w) absl::StrAppendFormat(&csv, ",%.6f", t[w][i]);
    csv += "\n";
  }
  return csv;
}

void CheckJobReport(const nlohmann::json& j, const std::string& prefix) {
  INFO(j.dump(2));
  REQUIRE(j["workers"].size() == kWorkers);
  CHECK(j["persistentlySlow"] == nlohmann::json::array({absl::StrCat(prefix, kSlowWorker)}));
  CHECK(j["withSlowdowns"] == nlohmann::json::array({absl::StrCat(prefix, 3)}));
  for (int w = 0; w < kWorkers; ++w) {
    const nlohmann::json& wj = j["workers"][w];
    REQUIRE(wj["worker"] == absl::StrCat(prefix, w));
    CHECK(wj["firstStep"] == kFirstStep);
    CHECK(wj["lastStep"] == kFirstStep + kSteps - 1);
    CHECK(wj["stats"]["count"] == kSteps);
    const auto& episodes = wj["changes"]["slowdowns"];
    if (w == 3) {
      REQUIRE(episodes.size() == 1);
      CHECK(std::abs(episodes[0]["onsetStep"].get<int64_t>() - kSlowdownStep) <= 3);
      CHECK(episodes[0]["endStep"].is_null());
      CHECK(episodes[0]["severity"].get<double>() == Approx(0.30).margin(0.04));
      CHECK_FALSE(wj["persistentlySlow"].get<bool>());
    } else {
      CHECK(episodes.empty());
    }
    if (w == kSlowWorker) {
      CHECK(wj["persistentlySlow"].get<bool>());
      CHECK(wj["ratioToPeers"].get<double>() == Approx(1.2).margin(0.02));
    } else {
      CHECK_FALSE(wj["persistentlySlow"].get<bool>());
      CHECK(wj["ratioToPeers"].get<double>() == Approx(1.0).margin(0.02));
    }
  }
}

TEST_CASE("analyze steps: a 30% slowdown and a persistently slow worker, long CSV", "[unit]") {
  TempDir dir;
  const auto job = GenerateJob();
  WriteFile(dir.Path("steps.csv"), LongCsv(job, false));
  analyze_test::Result r = Analyze({"steps", dir.Path("steps.csv"), "--json"});
  const nlohmann::json j = r.Json();
  CHECK(j["format"] == "long");
  CHECK(j["unit"] == "s");
  CHECK(j["medianOfMedians"].get<double>() == Approx(1.5).margin(0.02));
  CheckJobReport(j, "node-0");

  // The text report says the same for people.
  analyze_test::Result text = Analyze({"steps", dir.Path("steps.csv")});
  REQUIRE(text.code == 0);
  CHECK(text.out.find("node-05") != std::string::npos);
  CHECK(text.out.find("PERSISTENTLY SLOW") != std::string::npos);
  CHECK(text.out.find("node-03: SLOWDOWN from step 12") != std::string::npos);
  CHECK(text.out.find("summary: persistently slow: node-05; slowdowns: node-03") != std::string::npos);
  CHECK(text.out.find("persistently slow = median z > 3.00 and median excess over the step median > +5.0%") != std::string::npos);
}

TEST_CASE("analyze steps: aliases, milliseconds and the wide layout give the same report", "[unit]") {
  TempDir dir;
  const auto job = GenerateJob();
  WriteFile(dir.Path("ms.csv"), LongCsv(job, true));
  const nlohmann::json ms = Analyze({"steps", dir.Path("ms.csv"), "--json"}).Json();
  // Milliseconds are converted: 1.5 s steps read best in seconds, and the notes say so.
  CHECK(ms["unit"] == "s");
  CHECK(ms["medianOfMedians"].get<double>() == Approx(1.5).margin(0.02));
  CHECK(ms.dump().find("times converted from ms to s") != std::string::npos);
  CheckJobReport(ms, "");

  WriteFile(dir.Path("wide.csv"), WideCsv(job));
  const nlohmann::json wide = Analyze({"steps", dir.Path("wide.csv"), "--json"}).Json();
  CHECK(wide["format"] == "wide");
  CheckJobReport(wide, "gpu");
  // Forcing the layout the auto-detection found changes nothing.
  const nlohmann::json forced = Analyze({"steps", dir.Path("wide.csv"), "--format", "wide", "--json"}).Json();
  CHECK(forced["workers"] == wide["workers"]);
}

TEST_CASE("analyze steps: --verify and --prob reach the detector", "[unit]") {
  TempDir dir;
  WriteFile(dir.Path("steps.csv"), LongCsv(GenerateJob(), false));
  // A 30% slowdown fails a 50% verification threshold.
  const nlohmann::json strict = Analyze({"steps", dir.Path("steps.csv"), "--verify", "0.5", "--json"}).Json();
  CHECK(strict["withSlowdowns"].empty());
  CHECK(Analyze({"steps", dir.Path("steps.csv"), "--prob", "1.5"}).code == 2);
  CHECK(Analyze({"steps", dir.Path("steps.csv"), "--verify", "abc"}).code == 2);
  CHECK(Analyze({"steps", dir.Path("steps.csv"), "--format", "tall"}).code == 2);
  CHECK(Analyze({"steps", dir.Path("steps.csv"), "--bogus", "1"}).code == 2);
}

TEST_CASE("analyze steps: parser details", "[unit]") {
  // Quoted fields, tab delimiter, gaps in the wide layout, no step column.
  absl::StatusOr<StepTimesTable> t =
      ParseStepTimesCsv("\"worker a\"\t\"worker b\"\n1.0\t2.0\n1.1\t\n1.2\t2.2\n", "w.tsv");
  REQUIRE(t.ok());
  REQUIRE(t->workers.size() == 2);
  CHECK(t->workers[0].worker == "worker a");
  CHECK(t->workers[0].steps == std::vector<int64_t>{0, 1, 2});
  CHECK(t->workers[1].steps == std::vector<int64_t>{0, 2});
  CHECK(t->workers[1].times == std::vector<double>{2.0, 2.2});
  // Long rows out of order are sorted by step.
  absl::StatusOr<StepTimesTable> l =
      ParseStepTimesCsv("Rank,Step,Duration_ms\n0,3,30\n0,1,10\n1,2,20\n0,2,20\n", "l.csv");
  REQUIRE(l.ok());
  CHECK(l->format == StepTableFormat::kLong);
  CHECK(l->unit == "s");  // converted from the column's milliseconds
  CHECK(l->source_unit == "ms");
  CHECK(l->workers[0].steps == std::vector<int64_t>{1, 2, 3});
  REQUIRE(l->workers[0].times.size() == 3);
  CHECK(l->workers[0].times[0] == Approx(0.010));
  CHECK(l->workers[0].times[2] == Approx(0.030));
}

TEST_CASE("analyze steps: malformed input names the file, line and problem", "[unit]") {
  TempDir dir;
  struct Case {
    const char* name;
    std::string text;
    const char* format;
    std::vector<std::string> expected;  // substrings of the error
    bool strict_only;                   // without --strict the bad row is skipped and others read
  };
  const std::string binary("\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0>\0\x01\0\0\0", 24);
  const std::vector<Case> cases = {
      {"empty.csv", "", "auto", {"empty.csv: empty file"}, false},
      {"blank.csv", "\n  \n\t\n", "auto", {"blank.csv: empty file"}, false},
      {"binary.csv", binary, "auto", {"binary.csv: binary data"}, false},
      {"notime.csv", "worker,step,loss\na,1,1.0\n", "long", {"notime.csv:1:", "time column", "worker, step, loss"}, false},
      {"nolong.csv", "a,b\n1,2\n", "long", {"nolong.csv:1:", "time column", "--time-col"}, false},
      {"nan.csv", "worker,step,seconds\na,1,1.0\na,2,fast\n", "auto", {"nan.csv:3:", "'seconds'", "not a number: 'fast'"}, true},
      {"neg.csv", "worker,step,seconds\na,1,-1.0\n", "auto", {"neg.csv:2:", ">= 0"}, false},
      {"inf.csv", "step,a\n1,inf\n", "auto", {"inf.csv:2:", "finite"}, false},
      {"step.csv", "worker,step,seconds\na,one,1.0\n", "auto", {"step.csv:2:", "not an integer step: 'one'"}, false},
      {"fields.csv", "worker,step,seconds\na,1\n", "auto", {"fields.csv:2:", "expected 3 fields", "found 2"}, false},
      {"dup.csv", "worker,step,seconds\na,1,1.0\nb,1,1.0\na,1,1.1\n", "auto", {"dup.csv:4:", "appears twice", "line 2"}, true},
      {"header.csv", "worker,step,seconds\n", "auto", {"header.csv:1:", "no data rows"}, false},
      {"numbers.csv", "1.0,2.0\n1.1,2.1\n", "auto", {"numbers.csv:1:", "header line", "--time-col 3"}, false},
      {"quote.csv", "worker,step,seconds\n\"a,1,1.0\n", "auto", {"quote.csv:2:", "unterminated"}, false},
      {"dupcol.csv", "step,a,a\n1,1,1\n", "auto", {"dupcol.csv:1:", "'a' appears twice"}, false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    WriteFile(dir.Path(c.name), c.text);
    // Without --strict a file whose every row is bad is an error too, quoting the first.
    analyze_test::Result lenient = Analyze({"steps", dir.Path(c.name), "--format", c.format});
    CHECK(lenient.code == (c.strict_only ? 0 : 1));
    for (const std::string& e : c.expected) {
      INFO(lenient.err);
      if (!c.strict_only) CHECK(lenient.err.find(e) != std::string::npos);
    }
    analyze_test::Result r = Analyze({"steps", dir.Path(c.name), "--format", c.format, "--strict"});
    CHECK(r.code == 1);
    CHECK(r.out.empty());
    for (const std::string& e : c.expected) {
      INFO(r.err);
      CHECK(r.err.find(e) != std::string::npos);
    }
  }
  analyze_test::Result missing = Analyze({"steps", dir.Path("does-not-exist.csv")});
  CHECK(missing.code == 1);
  CHECK(missing.err.find("does-not-exist.csv: cannot open") != std::string::npos);
  CHECK(Analyze({"steps"}).code == 2);
  CHECK(Analyze({"steps", dir.path()}).code == 1);  // a directory
}

}  // namespace
}  // namespace peregrine
