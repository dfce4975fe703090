#include "cli/analyze/text_input.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace peregrine::analyze_internal {

std::vector<TextLine> SplitLines(absl::string_view text) {
  std::vector<TextLine> lines;
  int number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back({++number, line});
    start = end + 1;
  }
  return lines;
}

absl::Status CheckText(absl::string_view text, absl::string_view source) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": empty file"));
  }
  const absl::string_view head = text.substr(0, 64 * 1024);
  if (size_t nul = head.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": binary data (NUL byte at offset ", nul, "); expected text"));
  }
  // Control bytes other than tab, CR, LF, form feed and ESC (colour codes) are not text.
  size_t control = 0;
  size_t first = absl::string_view::npos;
  for (size_t i = 0; i < head.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(head[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != 0x1b) {
      ++control;
      if (first == absl::string_view::npos) first = i;
    }
  }
  if (control > 0 && control * 100 >= head.size()) {
    const auto [line, column] = LineColumnOf(text, first);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s:%d: binary data (control byte 0x%02x at column %d, %d such bytes); expected text",
        source, line, static_cast<unsigned char>(head[first]), column, control));
  }
  return absl::OkStatus();
}

std::string Excerpt(absl::string_view s) {
  std::string out;
  for (char c : s.substr(0, 60)) {
    const unsigned char u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7f) ? '?' : c;
  }
  if (s.size() > 60) out += "...";
  return out;
}

std::pair<int, int> LineColumnOf(absl::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, static_cast<int>(offset - line_start) + 1};
}

}  // namespace peregrine::analyze_internal
