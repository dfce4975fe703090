#include "cli/analyze/stack_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cli/analyze/text_input.h"

namespace peregrine {
namespace {

using analyze_internal::SplitLines;
using analyze_internal::TextLine;

constexpr size_t kMaxFileBytes = 64u << 20;

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "rank: 3", "Rank=3", "RANK : 3" -> 3.
std::optional<int> RankHeader(absl::string_view line) {
  absl::string_view s = absl::StripAsciiWhitespace(line);
  if (s.size() < 5 || !absl::EqualsIgnoreCase(s.substr(0, 4), "rank")) return std::nullopt;
  s = absl::StripLeadingAsciiWhitespace(s.substr(4));
  if (s.empty() || (s[0] != ':' && s[0] != '=')) return std::nullopt;
  s = absl::StripAsciiWhitespace(s.substr(1));
  int rank = 0;
  if (!AllDigits(s) || !absl::SimpleAtoi(s, &rank)) return std::nullopt;
  return rank;
}

// "line 12: what" from stack_parse -> "PATH:12: what"; anything else -> "PATH: what".
absl::Status WithPath(const absl::Status& status, absl::string_view path) {
  absl::string_view m = status.message();
  if (absl::ConsumePrefix(&m, "line ")) {
    const size_t colon = m.find(':');
    if (colon != absl::string_view::npos && AllDigits(m.substr(0, colon))) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", m));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", status.message()));
}

}  // namespace

absl::StatusOr<StackTool> DetectStackTool(absl::string_view text, absl::string_view source) {
  bool gdb = false, pyspy = false;
  for (const TextLine& l : SplitLines(text)) {
    const absl::string_view s = absl::StripTrailingAsciiWhitespace(l.text);
    if ((absl::StartsWith(s, "PID ") && absl::EndsWith(s, " - process")) ||
        (absl::StartsWith(s, "TID ") && absl::EndsWith(s, ":") && AllDigits(s.substr(4, s.size() - 5)))) {
      return StackTool::kEuStack;
    }
    if (absl::StartsWith(s, "Thread ") && (absl::StrContains(s, "(Thread 0x") || absl::StrContains(s, "(LWP "))) {
      gdb = true;
    }
    if (absl::StartsWith(s, "[Inferior ") || absl::StartsWith(s, "#0  0x")) gdb = true;
    if (absl::StartsWith(s, "Process ")) {
      const size_t colon = s.find(':');
      if (colon != absl::string_view::npos && AllDigits(s.substr(8, colon - 8))) pyspy = true;
    }
    if (absl::StartsWith(s, "Thread ") &&
        (absl::StrContains(s, " (idle)") || absl::StrContains(s, " (active") ||
         absl::StrContains(s, " (gil)"))) {
      pyspy = true;
    }
  }
  if (gdb) return StackTool::kGdb;
  if (pyspy) return StackTool::kPySpy;
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": not a stack dump: no py-spy ('Process N:' / 'Thread N (idle):'), gdb ('Thread N "
              "(Thread 0x... (LWP N))') or eu-stack ('PID N - process' / 'TID N:') header found"));
}

std::optional<int> RankFromFileName(absl::string_view file_name) {
  const std::string lower = absl::AsciiStrToLower(file_name);
  // Rule 2: "rank" [-_.] digits.
  for (size_t pos = lower.find("rank"); pos != std::string::npos; pos = lower.find("rank", pos + 1)) {
    size_t i = pos + 4;
    if (i < lower.size() && (lower[i] == '-' || lower[i] == '_' || lower[i] == '.')) ++i;
    size_t j = i;
    while (j < lower.size() && absl::ascii_isdigit(static_cast<unsigned char>(lower[j]))) ++j;
    int rank = 0;
    if (j > i && j - i <= 9 && absl::SimpleAtoi(absl::string_view(lower).substr(i, j - i), &rank)) {
      return rank;
    }
  }
  // Rule 3: the last run of digits.
  size_t end = lower.size();
  while (end > 0 && !absl::ascii_isdigit(static_cast<unsigned char>(lower[end - 1]))) --end;
  if (end == 0) return std::nullopt;
  size_t start = end;
  while (start > 0 && absl::ascii_isdigit(static_cast<unsigned char>(lower[start - 1]))) --start;
  int rank = 0;
  if (end - start > 9 || !absl::SimpleAtoi(absl::string_view(lower).substr(start, end - start), &rank)) {
    return std::nullopt;
  }
  return rank;
}

absl::StatusOr<RankStackFile> ParseRankStackText(absl::string_view text, absl::string_view path) {
  if (absl::Status s = analyze_internal::CheckText(text, path); !s.ok()) return s;
  RankStackFile file;
  file.path = std::string(path);
  // Rule 1: a "rank: N" line among the first 5; blanked (not removed) so line numbers hold.
  std::string body(text);
  bool from_header = false;
  int seen = 0;
  for (const TextLine& l : SplitLines(text)) {
    if (absl::StripAsciiWhitespace(l.text).empty()) continue;
    if (++seen > 5) break;
    if (std::optional<int> rank = RankHeader(l.text)) {
      file.rank = *rank;
      file.rank_rule = "header line";
      from_header = true;
      const size_t offset = static_cast<size_t>(l.text.data() - text.data());
      body.replace(offset, l.text.size(), std::string(l.text.size(), ' '));
      break;
    }
  }
  if (!from_header) {
    const std::string base = std::filesystem::path(std::string(path)).filename().string();
    std::optional<int> rank = RankFromFileName(base);
    if (!rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": cannot tell the rank: name the file rank-N.txt (or rank_N.log, stack.N.txt) "
                "or add a line 'rank: N' at the top"));
    }
    file.rank = *rank;
    file.rank_rule = absl::StrContains(absl::AsciiStrToLower(base), "rank") ? "file name (rank-N)"
                                                                            : "file name (last number)";
  }
  absl::StatusOr<StackTool> tool = DetectStackTool(body, path);
  if (!tool.ok()) return tool.status();
  file.tool = *tool;
  absl::StatusOr<std::vector<ProcessStack>> processes = ParseStackText(*tool, body);
  if (!processes.ok()) return WithPath(processes.status(), path);
  file.processes = std::move(*processes);
  return file;
}

absl::StatusOr<std::vector<RankStackFile>> LoadStackDirectory(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  }
  std::vector<std::string> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    paths.push_back(it->path().string());
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat(dir, ": cannot list: ", ec.message()));
  if (paths.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": no stack files (one per rank expected)"));
  }
  std::sort(paths.begin(), paths.end());
  std::vector<RankStackFile> files;
  for (const std::string& path : paths) {
    std::error_code size_ec;
    const auto size = fs::file_size(path, size_ec);
    if (size_ec) return absl::InvalidArgumentError(absl::StrCat(path, ": ", size_ec.message()));
    if (size > kMaxFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", size, " bytes is too large for a stack dump (limit ", kMaxFileBytes, ")"));
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open"));
    std::stringstream ss;
    ss << in.rdbuf();
    absl::StatusOr<RankStackFile> file = ParseRankStackText(ss.str(), path);
    if (!file.ok()) return file.status();
    files.push_back(std::move(*file));
  }
  std::stable_sort(files.begin(), files.end(),
                   [](const RankStackFile& a, const RankStackFile& b) { return a.rank < b.rank; });
  return files;
}

}  // namespace peregrine
