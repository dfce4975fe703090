#include "cli/analyze/stack_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cli/analyze/input_file.h"
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

// The line number of a stack_parse error ("line 12: ..."), if it names one.
std::optional<int> ErrorLine(const absl::Status& status) {
  absl::string_view m = status.message();
  if (!absl::ConsumePrefix(&m, "line ")) return std::nullopt;
  const size_t colon = m.find(':');
  int line = 0;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(m.substr(0, colon), &line) || line < 1) {
    return std::nullopt;
  }
  return line;
}

// Replaces the 1-based line `line_no` of `text` by spaces; false when there is no such line
// or it is already blank.
bool BlankLine(std::string* text, int line_no) {
  size_t start = 0;
  for (int i = 1; i < line_no; ++i) {
    start = text->find('\n', start);
    if (start == std::string::npos) return false;
    ++start;
  }
  size_t end = text->find('\n', start);
  if (end == std::string::npos) end = text->size();
  bool changed = false;
  for (size_t i = start; i < end; ++i) {
    if ((*text)[i] != ' ' && (*text)[i] != '\r') {
      (*text)[i] = ' ';
      changed = true;
    }
  }
  return changed;
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
  constexpr size_t kMaxWarnings = 5;
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
  // Skip the lines the parser rejects (blanked, so later line numbers hold), one at a
  // time, while they stay a small part of the file.
  int non_blank = 0;
  for (const TextLine& l : SplitLines(body)) non_blank += !absl::StripAsciiWhitespace(l.text).empty();
  std::optional<absl::Status> first_error;
  while (true) {
    absl::StatusOr<std::vector<ProcessStack>> processes = ParseStackText(*tool, body);
    if (processes.ok()) {
      int frames = 0;
      for (const ProcessStack& p : *processes) {
        for (const ThreadStack& t : p.threads) frames += static_cast<int>(t.frames.size());
      }
      if (first_error && frames == 0) return *first_error;
      file.processes = std::move(*processes);
      return file;
    }
    const absl::Status error = WithPath(processes.status(), path);
    if (!first_error) first_error = error;
    std::optional<int> line_no = ErrorLine(processes.status());
    if (!line_no || 4 * (file.skipped_lines + 1) > non_blank) return *first_error;
    if (!BlankLine(&body, *line_no)) return *first_error;
    ++file.skipped_lines;
    if (file.warnings.size() < kMaxWarnings) file.warnings.push_back(absl::StrCat(error.message(), " (line skipped)"));
  }
}

absl::StatusOr<StackDirectory> LoadStackDirectory(const std::string& dir) {
  constexpr size_t kMaxWarnings = 20;
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
  StackDirectory out;
  std::optional<absl::Status> first_error;
  auto warn = [&](std::string w) {
    if (out.warnings.size() < kMaxWarnings) out.warnings.push_back(std::move(w));
  };
  for (const std::string& path : paths) {
    absl::StatusOr<RankStackFile> file = [&]() -> absl::StatusOr<RankStackFile> {
      std::error_code size_ec;
      const auto size = fs::file_size(path, size_ec);
      if (size_ec) return absl::InvalidArgumentError(absl::StrCat(path, ": ", size_ec.message()));
      if (size > kMaxFileBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": ", size, " bytes is too large for a stack dump (limit ", kMaxFileBytes, ")"));
      }
      absl::StatusOr<std::string> text = ReadAnalysisInput(path, kMaxFileBytes);  // gzip inflated
      if (!text.ok()) return text.status();
      return ParseRankStackText(*text, path);
    }();
    if (!file.ok()) {
      if (!first_error) first_error = file.status();
      ++out.skipped_files;
      warn(absl::StrCat(file.status().message(), " (file skipped)"));
      continue;
    }
    out.skipped_lines += file->skipped_lines;
    for (const std::string& w : file->warnings) warn(w);
    if (file->skipped_lines > static_cast<int>(file->warnings.size())) {
      warn(absl::StrCat(path, ": ", file->skipped_lines, " line(s) skipped in all"));
    }
    out.files.push_back(std::move(*file));
  }
  if (out.files.empty()) {
    if (paths.size() == 1) return *first_error;
    return absl::InvalidArgumentError(absl::StrCat("no readable stack file among ", paths.size(), " in ", dir,
                                                   "; the first: ", first_error->message()));
  }
  std::stable_sort(out.files.begin(), out.files.end(),
                   [](const RankStackFile& a, const RankStackFile& b) { return a.rank < b.rank; });
  return out;
}

}  // namespace peregrine
