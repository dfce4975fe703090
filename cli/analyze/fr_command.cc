#include "cli/analyze/fr_command.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "cli/analyze/input_file.h"
#include "cli/analyze/rank_ranges.h"

namespace peregrine {
namespace {

using Json = nlohmann::ordered_json;

Json Optional(const std::optional<int64_t>& v) { return v ? Json(*v) : Json(nullptr); }

// A status message without the "PATH: " it starts with (the report names the path).
std::string Reason(const absl::Status& status, const std::string& path) {
  absl::string_view m = status.message();
  absl::ConsumePrefix(&m, path + ": ");
  return std::string(m);
}

}  // namespace

std::optional<int> FrRankFromFileName(absl::string_view name, absl::string_view prefix) {
  for (absl::string_view suffix : {".gz", ".pkl", ".pickle"}) absl::ConsumeSuffix(&name, suffix);
  absl::string_view digits;
  if (!prefix.empty()) {
    if (!absl::ConsumePrefix(&name, prefix)) return std::nullopt;
    digits = name;
  } else {
    size_t start = name.size();
    while (start > 0 && absl::ascii_isdigit(static_cast<unsigned char>(name[start - 1]))) --start;
    digits = name.substr(start);
  }
  if (digits.empty() || digits.size() > 9) return std::nullopt;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int rank = 0;
  if (!absl::SimpleAtoi(digits, &rank)) return std::nullopt;
  return rank;
}

absl::StatusOr<FrDirectory> LoadFlightRecorderDirectory(const std::string& dir, absl::string_view prefix) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return absl::NotFoundError(absl::StrCat(dir, ": no such directory"));
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory (give the directory of the per-rank dumps)"));
  }
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) paths.push_back(it->path());
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  std::sort(paths.begin(), paths.end());

  FrDirectory result;
  std::map<int, std::string> seen;
  for (const fs::path& path : paths) {
    const std::string name = path.filename().string();
    std::optional<int> rank = FrRankFromFileName(name, prefix);
    if (!rank) {
      result.skipped.push_back(
          {path.string(), prefix.empty() ? std::string("no rank number at the end of the file name")
                                         : absl::StrCat("the name is not '", prefix, "' followed by a rank number")});
      continue;
    }
    if (auto it = seen.find(*rank); it != seen.end()) {
      result.skipped.push_back({path.string(), absl::StrCat("rank ", *rank, " already read from ", it->second)});
      continue;
    }
    absl::StatusOr<std::string> bytes = ReadAnalysisInput(path.string());
    if (!bytes.ok()) {
      result.skipped.push_back({path.string(), Reason(bytes.status(), path.string())});
      continue;
    }
    absl::StatusOr<FrDump> dump = ParseFlightRecorderDump(*bytes, path.string());
    if (!dump.ok()) {
      result.skipped.push_back({path.string(), Reason(dump.status(), path.string())});
      continue;
    }
    seen[*rank] = path.string();
    result.dumps.push_back(FrRankDump{*rank, *std::move(dump)});
  }
  std::sort(result.dumps.begin(), result.dumps.end(),
            [](const FrRankDump& a, const FrRankDump& b) { return a.rank < b.rank; });
  return result;
}

void RenderFrText(const FrDirectory& files, const FrReport& r, const std::string& dir, std::ostream& out) {
  out << dir << ": " << files.dumps.size() << " flight recorder dump(s)";
  if (!r.ranks.empty()) out << ", ranks " << RankRanges(r.ranks);
  if (!r.versions.empty()) out << ", version " << absl::StrJoin(r.versions, ", ");
  out << "\n";
  for (const FrSkippedFile& s : files.skipped) out << "skipped " << s.path << ": " << s.reason << "\n";
  for (const FrRankDump& d : files.dumps) {
    if (d.dump.skipped_entries > 0) out << "rank " << d.rank << ": " << d.dump.skipped_entries << " entry(ies) skipped\n";
    for (const std::string& n : d.dump.notes) out << "  rank " << d.rank << ": " << n << "\n";
  }
  if (r.groups.empty()) out << "\nno process group has entries\n";
  for (const FrGroupReport& g : r.groups) {
    out << "\nprocess group " << g.name;
    if (!g.desc.empty()) out << " (" << g.desc << ")";
    out << ", ranks " << RankRanges(g.ranks) << "\n";
    if (g.stuck_seq) {
      out << "  stuck collective: " << g.stuck_op << " (collective seq " << *g.stuck_seq << "), " << g.stuck_detail
          << "\n";
      out << "  waiting ranks: " << (g.waiting_ranks.empty() ? "none" : RankRanges(g.waiting_ranks)) << "\n";
      out << "  missing ranks: " << (g.missing_ranks.empty() ? "none" : RankRanges(g.missing_ranks)) << "\n";
    } else {
      out << "  stuck collective: none\n";
    }
    if (!g.no_dump_ranks.empty()) out << "  ranks without a dump: " << RankRanges(g.no_dump_ranks) << "\n";
    out << "  mismatches: " << (g.mismatches.empty() ? "none" : "") << "\n";
    for (const FrMismatch& m : g.mismatches) {
      out << "    collective seq " << m.seq << ": " << m.field << " " << m.found << " on ranks " << RankRanges(m.ranks)
          << ", " << m.expected << " on ranks " << RankRanges(m.expected_ranks) << "\n";
    }
    if (!g.p2p_findings.empty()) {
      out << "  p2p:\n";
      for (const std::string& f : g.p2p_findings) out << "    " << f << "\n";
    }
    out << "  last collective per rank:\n";
    for (const FrRankInGroup& s : g.rank_states) {
      out << "    rank " << s.rank << ": ";
      if (!s.has_dump) {
        out << "no dump\n";
        continue;
      }
      if (s.last_seq) {
        out << "seq " << *s.last_seq << " " << s.last_profiling_name << " " << FrStateName(*s.last_state);
      } else {
        out << "no collective in this group";
      }
      if (!s.pending_elsewhere.empty()) out << "; pending in " << s.pending_elsewhere;
      out << "\n";
    }
    out << "  verdict: " << FrVerdictName(g.verdict) << ": " << g.explanation << "\n";
  }
}

void RenderFrJson(const FrDirectory& files, const FrReport& r, const std::string& dir, std::ostream& out) {
  Json skipped = Json::array();
  for (const FrSkippedFile& s : files.skipped) skipped.push_back(Json{{"path", s.path}, {"reason", s.reason}});
  Json dumps = Json::array();
  for (const FrRankDump& d : files.dumps) {
    dumps.push_back(Json{{"rank", d.rank},
                         {"path", d.dump.source},
                         {"version", d.dump.version},
                         {"commLibVersion", d.dump.comm_lib_version},
                         {"entries", d.dump.entries.size()},
                         {"skippedEntries", d.dump.skipped_entries},
                         {"notes", d.dump.notes}});
  }
  Json groups = Json::array();
  for (const FrGroupReport& g : r.groups) {
    Json mismatches = Json::array();
    for (const FrMismatch& m : g.mismatches) {
      mismatches.push_back(Json{{"seq", m.seq},
                                {"field", m.field},
                                {"expected", m.expected},
                                {"expectedRanks", m.expected_ranks},
                                {"found", m.found},
                                {"ranks", m.ranks}});
    }
    Json states = Json::array();
    for (const FrRankInGroup& s : g.rank_states) {
      states.push_back(Json{{"rank", s.rank},
                            {"hasDump", s.has_dump},
                            {"lastSeq", Optional(s.last_seq)},
                            {"lastOp", s.last_profiling_name},
                            {"lastState", s.last_state ? Json(std::string(FrStateName(*s.last_state))) : Json(nullptr)},
                            {"pendingElsewhere", s.pending_elsewhere}});
    }
    Json stuck = nullptr;
    if (g.stuck_seq) stuck = Json{{"seq", *g.stuck_seq}, {"op", g.stuck_op}, {"detail", g.stuck_detail}};
    groups.push_back(Json{{"name", g.name},
                          {"desc", g.desc},
                          {"ranks", g.ranks},
                          {"verdict", std::string(FrVerdictName(g.verdict))},
                          {"explanation", g.explanation},
                          {"stuckCollective", stuck},
                          {"waitingRanks", g.waiting_ranks},
                          {"missingRanks", g.missing_ranks},
                          {"noDumpRanks", g.no_dump_ranks},
                          {"mismatches", mismatches},
                          {"p2p", g.p2p_findings},
                          {"rankStates", states}});
  }
  Json j{{"command", "fr"},  {"dir", dir},         {"ranks", r.ranks},     {"versions", r.versions},
         {"dumps", dumps},   {"skippedFiles", skipped}, {"groups", groups}};
  out << j.dump(2) << "\n";
}

int RunFlightRecorderAnalysis(const AnalyzeArgs& args, absl::string_view usage, std::ostream& out,
                              std::ostream& err) {
  std::string prefix;
  const FlagTable flags = {{"prefix", [&prefix](const std::string& flag,
                                                const std::string& value) -> std::optional<std::string> {
                              if (value.empty()) return absl::StrCat("--", flag, ": needs a non-empty file name prefix");
                              prefix = value;
                              return std::nullopt;
                            }}};
  if (!ApplyAnalysisArgs(args, "fr", "DIR", flags, usage, err)) return 2;
  const std::string& dir = args.operands[0];
  absl::StatusOr<FrDirectory> files = LoadFlightRecorderDirectory(dir, prefix);
  if (!files.ok()) {
    err << "peregrinectl analyze fr: " << files.status().message() << "\n";
    return 1;
  }
  if (files->dumps.empty()) {
    err << "peregrinectl analyze fr: " << dir << ": no flight recorder dump could be read\n";
    for (const FrSkippedFile& s : files->skipped) err << "  " << s.path << ": " << s.reason << "\n";
    return 1;
  }
  const FrReport report = AnalyzeFlightRecorder(files->dumps);
  (args.json ? RenderFrJson : RenderFrText)(*files, report, dir, out);
  return 0;
}

}  // namespace peregrine
