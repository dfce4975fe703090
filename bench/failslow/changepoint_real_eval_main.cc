// changepoint-real-eval: scores change-point methods on real, human-annotated series from
// the Turing Change Point Dataset (bench/data/tcpd, see its README for sources, licences
// and the tuning / held-out split) with the benchmark's metrics (F1 with a margin of 5
// samples against all annotators, segmentation covering; diagnosis/change_point_metrics.h).
//
// Methods (columns), all run in the same process on the same series:
//  - peregrine: FailSlowDetector with its defaults, --verify and --prob as `analyze steps`
//    runs it (its verified changes are the change points);
//  - zero: no change point at all;
//  - bocpd: TCPDBench's default_bocpd (Gaussian BOCPD, hazard 1/100, prior 0,1,1,1 on the
//    standardised series; diagnosis/change_point_eval.h).
// Rows: one per series, then the mean of each part (tuning, held-out).
//
//   changepoint-real-eval [--data=DIR] [--part=tuning|held-out|all] [--json]
//                         [--verify=F] [--prob=P] [--set=OPTION=VALUE ...]
// --set: a FailSlowDetectorOptions field by name (hazard, verify_after, max_before, ...;
// repeatable, applied after --verify and --prob), for sweeps on the tuning part only.
// DIR holds annotations.json, split.txt ("name part" lines) and <name>.json per series;
// the default is the source tree's bench/data/tcpd. Exit status 1 on bad flags or data.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diagnosis/change_point_eval.h"

namespace {

using Json = nlohmann::json;
using peregrine::ChangePointAnnotations;
using peregrine::ChangePointScore;

struct Flags {
  std::string data = PEREGRINE_TCPD_DIR;
  std::string part = "all";
  bool json = false;
  double verify = 0.10;
  double prob = 0.90;
  std::vector<std::pair<std::string, double>> sets;  // --set=NAME=VALUE, in order
};

struct Series {
  std::string name;
  std::string part;
  std::vector<double> values;
  ChangePointAnnotations annotations;
};

bool ReadFile(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

// Loads the series of the split; an error names the file and what is wrong.
bool Load(const Flags& flags, std::vector<Series>& out, std::string& error) {
  std::string text;
  const std::string split_path = flags.data + "/split.txt";
  if (!ReadFile(split_path, text)) {
    error = "cannot read " + split_path;
    return false;
  }
  std::string annotations_text;
  const std::string annotations_path = flags.data + "/annotations.json";
  if (!ReadFile(annotations_path, annotations_text)) {
    error = "cannot read " + annotations_path;
    return false;
  }
  const Json annotations = Json::parse(annotations_text, nullptr, /*allow_exceptions=*/false);
  if (!annotations.is_object()) {
    error = annotations_path + ": not a JSON object";
    return false;
  }
  std::istringstream lines(text);
  std::string line;
  int line_no = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Series s;
    if (!(fields >> s.name >> s.part) || (s.part != "tuning" && s.part != "held-out")) {
      error = split_path + ":" + std::to_string(line_no) + ": expected \"name tuning|held-out\"";
      return false;
    }
    if (flags.part != "all" && flags.part != s.part) continue;
    const std::string path = flags.data + "/" + s.name + ".json";
    std::string body;
    if (!ReadFile(path, body)) {
      error = "cannot read " + path;
      return false;
    }
    const Json d = Json::parse(body, nullptr, false);
    if (!d.is_object() || !d.contains("series") || !d["series"].is_array() || d["series"].empty() ||
        !d["series"][0].contains("raw") || !d["series"][0]["raw"].is_array()) {
      error = path + ": expected {\"series\": [{\"raw\": [...]}, ...]}";
      return false;
    }
    for (const Json& v : d["series"][0]["raw"]) {
      s.values.push_back(v.is_number() ? v.get<double>() : std::nan(""));
    }
    if (!annotations.contains(s.name) || !annotations[s.name].is_object()) {
      error = annotations_path + ": no annotations for " + s.name;
      return false;
    }
    for (const auto& [user, cps] : annotations[s.name].items()) {
      std::vector<int64_t> a;
      if (!cps.is_array()) {
        error = annotations_path + ": " + s.name + "/" + user + " is not a list";
        return false;
      }
      for (const Json& c : cps) {
        if (!c.is_number_integer()) {
          error = annotations_path + ": " + s.name + "/" + user + " holds a non-integer";
          return false;
        }
        a.push_back(c.get<int64_t>());
      }
      s.annotations.push_back(std::move(a));
    }
    out.push_back(std::move(s));
  }
  if (out.empty()) {
    error = "no series in " + split_path + " for part " + flags.part;
    return false;
  }
  return true;
}

bool ParseFlags(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      const size_t len = std::strlen(name);
      return arg.compare(0, len, name) == 0 ? arg.c_str() + len : nullptr;
    };
    if (const char* v = value("--data=")) {
      flags.data = v;
    } else if (const char* v = value("--part=")) {
      flags.part = v;
    } else if (arg == "--json") {
      flags.json = true;
    } else if (const char* v = value("--verify=")) {
      flags.verify = std::atof(v);
    } else if (const char* v = value("--prob=")) {
      flags.prob = std::atof(v);
    } else if (const char* v = value("--set=")) {
      const char* eq = std::strchr(v, '=');
      char* end = nullptr;
      const double number = eq == nullptr ? 0.0 : std::strtod(eq + 1, &end);
      if (eq == nullptr || end == eq + 1 || *end != '\0' || !std::isfinite(number)) {
        std::fprintf(stderr, "--set expects OPTION=NUMBER, got %s\n", v);
        return false;
      }
      flags.sets.emplace_back(std::string(v, eq), number);
    } else {
      std::fprintf(stderr,
                   "unknown flag %s\nusage: changepoint-real-eval [--data=DIR] "
                   "[--part=tuning|held-out|all] [--json] [--verify=F] [--prob=P] [--set=OPTION=VALUE ...]\n",
                   arg.c_str());
      return false;
    }
  }
  if (flags.part != "all" && flags.part != "tuning" && flags.part != "held-out") {
    std::fprintf(stderr, "--part must be tuning, held-out or all, got %s\n", flags.part.c_str());
    return false;
  }
  return true;
}

// --set=NAME=VALUE: a FailSlowDetectorOptions field by name (for sweeps on the tuning part).
bool SetOption(peregrine::FailSlowDetectorOptions& o, const std::string& name, double v) {
  const int i = static_cast<int>(v);
  if (name == "hazard") o.bocd.hazard = v;
  else if (name == "outlier_probability") o.bocd.outlier_probability = v;
  else if (name == "calibration_samples") o.bocd.calibration_samples = i;
  else if (name == "min_run_length") o.bocd.min_run_length = i;
  else if (name == "kappa0") o.bocd.kappa0 = v;
  else if (name == "alpha0") o.bocd.alpha0 = v;
  else if (name == "beta0") o.bocd.beta0 = v;
  else if (name == "verify_after") o.verify_after = i;
  else if (name == "verify_window") o.verify_window = i;
  else if (name == "min_before") o.min_before = i;
  else if (name == "max_before") o.max_before = i;
  else if (name == "trend_min_samples") o.trend_min_samples = i;
  else if (name == "trend_window") o.trend_window = i;
  else if (name == "trend_min_t") o.trend_min_t = v;
  else if (name == "trend_min_rise") o.trend_min_rise = v;
  else return false;
  return true;
}

constexpr const char* kMethods[] = {"peregrine", "zero", "bocpd"};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, flags)) return 1;
  std::vector<Series> series;
  std::string error;
  if (!Load(flags, series, error)) {
    std::fprintf(stderr, "changepoint-real-eval: %s\n", error.c_str());
    return 1;
  }
  peregrine::FailSlowDetectorOptions options;
  options.verify_threshold = flags.verify;
  options.bocd.report_threshold = flags.prob;
  for (const auto& [name, v] : flags.sets) {
    if (!SetOption(options, name, v)) {
      std::fprintf(stderr, "changepoint-real-eval: unknown option %s for --set\n", name.c_str());
      return 1;
    }
  }
  // part -> method -> sums; per-series rows.
  std::map<std::string, std::map<std::string, ChangePointScore>> sums;
  std::map<std::string, int> counts;
  Json rows = Json::array();
  if (!flags.json) {
    std::printf("%-20s %-8s %5s | %-13s | %-13s | %-13s\n", "series", "part", "n", "peregrine F1/cov",
                "zero F1/cov", "bocpd F1/cov");
  }
  for (const Series& s : series) {
    const int64_t n = static_cast<int64_t>(s.values.size());
    std::map<std::string, std::vector<int64_t>> predictions;
    absl::StatusOr<std::vector<int64_t>> p = peregrine::PeregrineChangePoints(s.values, options);
    absl::StatusOr<std::vector<int64_t>> b = peregrine::GaussianBocpdChangePoints(s.values);
    if (!p.ok() || !b.ok()) {
      std::fprintf(stderr, "changepoint-real-eval: %s: %s\n", s.name.c_str(),
                   std::string((!p.ok() ? p.status() : b.status()).message()).c_str());
      return 1;
    }
    predictions["peregrine"] = *p;
    predictions["zero"] = {};
    predictions["bocpd"] = *b;
    Json row = {{"series", s.name}, {"part", s.part}, {"n", n}};
    std::string line;
    ++counts[s.part];
    for (const char* m : kMethods) {
      absl::StatusOr<ChangePointScore> score = peregrine::ScoreChangePoints(s.annotations, predictions[m], n);
      if (!score.ok()) {
        std::fprintf(stderr, "changepoint-real-eval: %s: %s\n", s.name.c_str(),
                     std::string(score.status().message()).c_str());
        return 1;
      }
      ChangePointScore& sum = sums[s.part][m];
      sum.f1 += score->f1;
      sum.cover += score->cover;
      sum.precision += score->precision;
      sum.recall += score->recall;
      row[m] = {{"f1", score->f1}, {"cover", score->cover}, {"precision", score->precision},
                {"recall", score->recall}, {"locations", predictions[m]}};
      char cell[64];
      std::snprintf(cell, sizeof cell, " | %5.3f / %5.3f", score->f1, score->cover);
      line += cell;
    }
    rows.push_back(row);
    if (!flags.json) std::printf("%-20s %-8s %5lld%s\n", s.name.c_str(), s.part.c_str(), static_cast<long long>(n), line.c_str());
  }
  Json summary = Json::object();
  for (const auto& [part, by_method] : sums) {
    const double k = counts[part];
    std::string line;
    for (const char* m : kMethods) {
      const ChangePointScore& sum = by_method.at(m);
      summary[part][m] = {{"f1", sum.f1 / k}, {"cover", sum.cover / k}, {"series", counts[part]}};
      char cell[64];
      std::snprintf(cell, sizeof cell, " | %5.3f / %5.3f", sum.f1 / k, sum.cover / k);
      line += cell;
    }
    if (!flags.json) std::printf("%-20s %-8s %5d%s\n", ("mean " + part).c_str(), "", counts[part], line.c_str());
  }
  if (flags.json) {
    std::printf("%s\n", Json{{"series", rows}, {"mean", summary}}.dump(1).c_str());
  }
  return 0;
}
