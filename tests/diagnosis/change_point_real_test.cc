// Change points on real, human-annotated series: the committed TCPD subset
// (bench/data/tcpd, README there) scored with the benchmark's metrics.
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "diagnosis/change_point_eval.h"

namespace peregrine {
namespace {

struct Series {
  std::string name;
  std::string part;
  std::vector<double> values;
  ChangePointAnnotations annotations;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<Series> LoadTcpd() {
  const std::string dir = std::string(PEREGRINE_SOURCE_DIR) + "/bench/data/tcpd";
  const nlohmann::json annotations = nlohmann::json::parse(Slurp(dir + "/annotations.json"));
  std::istringstream split(Slurp(dir + "/split.txt"));
  std::vector<Series> out;
  std::string line;
  while (std::getline(split, line)) {
    if (line.empty() || line[0] == '#') continue;
    Series s;
    std::istringstream fields(line);
    fields >> s.name >> s.part;
    const nlohmann::json d = nlohmann::json::parse(Slurp(dir + "/" + s.name + ".json"));
    for (const nlohmann::json& v : d.at("series").at(0).at("raw")) {
      s.values.push_back(v.is_number() ? v.get<double>() : std::nan(""));
    }
    for (const auto& [user, cps] : annotations.at(s.name).items()) {
      s.annotations.push_back(cps.get<std::vector<int64_t>>());
    }
    out.push_back(std::move(s));
  }
  return out;
}

TEST_CASE("The baselines reproduce the TCPD benchmark's published default scores", "[unit]") {
  // default_bocpd and zero scores as published with TCPDBench
  // (analysis/output/scores/default_{f1,cover}_scores.json).
  struct Published {
    double bocpd_f1, bocpd_cover, zero_f1, zero_cover;
  };
  const std::map<std::string, Published> published = {
      {"businv", {0.27027027027027023, 0.4631013127482154, 0.5882352941176471, 0.46094765840220386}},
      {"children_per_woman", {0.6368286445012787, 0.7582579069741131, 0.5074626865671642, 0.42910563901060694}},
      {"co2_canada", {0.6192917054986021, 0.7164045125495759, 0.36097560975609755, 0.2775684153596538}},
      {"jfk_passengers", {0.43678160919540227, 0.5411780007432182, 0.723404255319149, 0.6298433048433048}},
  };
  int checked = 0;
  for (const Series& s : LoadTcpd()) {
    auto it = published.find(s.name);
    if (it == published.end()) continue;
    INFO(s.name);
    const int64_t n = static_cast<int64_t>(s.values.size());
    absl::StatusOr<std::vector<int64_t>> bocpd = GaussianBocpdChangePoints(s.values);
    REQUIRE(bocpd.ok());
    absl::StatusOr<ChangePointScore> b = ScoreChangePoints(s.annotations, *bocpd, n);
    absl::StatusOr<ChangePointScore> z = ScoreChangePoints(s.annotations, {}, n);
    REQUIRE(b.ok());
    REQUIRE(z.ok());
    CHECK(b->f1 == Approx(it->second.bocpd_f1).margin(1e-9));
    CHECK(b->cover == Approx(it->second.bocpd_cover).margin(1e-9));
    CHECK(z->f1 == Approx(it->second.zero_f1).margin(1e-9));
    CHECK(z->cover == Approx(it->second.zero_cover).margin(1e-9));
    ++checked;
  }
  CHECK(checked == 4);
}

TEST_CASE("On the real tuning series the detector beats the no-change predictor", "[unit]") {
  // Mean F1 (margin 5) and covering over the tuning part: the detector as `analyze steps`
  // runs it (defaults) must beat reporting nothing. Before the drift check it did not
  // (trends became chains of level shifts).
  double f1 = 0, cover = 0, zero_f1 = 0, zero_cover = 0;
  int count = 0;
  for (const Series& s : LoadTcpd()) {
    if (s.part != "tuning") continue;
    INFO(s.name);
    const int64_t n = static_cast<int64_t>(s.values.size());
    absl::StatusOr<std::vector<int64_t>> cps = PeregrineChangePoints(s.values);
    REQUIRE(cps.ok());
    absl::StatusOr<ChangePointScore> p = ScoreChangePoints(s.annotations, *cps, n);
    absl::StatusOr<ChangePointScore> z = ScoreChangePoints(s.annotations, {}, n);
    REQUIRE(p.ok());
    REQUIRE(z.ok());
    f1 += p->f1;
    cover += p->cover;
    zero_f1 += z->f1;
    zero_cover += z->cover;
    ++count;
  }
  REQUIRE(count == 16);
  INFO("detector F1 " << f1 / count << " cover " << cover / count << "; zero F1 " << zero_f1 / count
                      << " cover " << zero_cover / count);
  CHECK(f1 > zero_f1);
  CHECK(cover > zero_cover);
}

}  // namespace
}  // namespace peregrine
