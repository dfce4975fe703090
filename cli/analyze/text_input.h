// Helpers shared by the analyze parsers (internal to controller/analyze): line splitting
// with 1-based numbers, and the check that rejects binary input before parsing.
// Pure functions; no I/O.
#ifndef PEREGRINE_CLI_ANALYZE_TEXT_INPUT_H_
#define PEREGRINE_CLI_ANALYZE_TEXT_INPUT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace peregrine::analyze_internal {

struct TextLine {
  int number = 0;          // 1-based
  absl::string_view text;  // without the line terminator ("\n" or "\r\n")
};

// Every line of `text`; a final line without a terminator is included.
std::vector<TextLine> SplitLines(absl::string_view text);

// kInvalidArgument "SOURCE: empty file" for empty or whitespace-only text, and
// "SOURCE: binary data (NUL byte at offset N); expected text" / "... (byte 0xNN at line L
// is not text)" when the first 64 KiB hold a NUL or mostly non-text control bytes.
absl::Status CheckText(absl::string_view text, absl::string_view source);

// At most 60 characters of `s`, printable, for error messages.
std::string Excerpt(absl::string_view s);

// 1-based line and column of byte `offset` in `text`.
std::pair<int, int> LineColumnOf(absl::string_view text, size_t offset);

}  // namespace peregrine::analyze_internal

#endif  // PEREGRINE_CLI_ANALYZE_TEXT_INPUT_H_
