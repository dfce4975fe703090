#include "diagnosis/stack_parse.h"

#include <cctype>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace peregrine {
namespace {

absl::Status LineError(int line_no, absl::string_view line, absl::string_view what) {
  constexpr size_t kMaxQuoted = 160;
  std::string quoted(line.substr(0, kMaxQuoted));
  if (line.size() > kMaxQuoted) quoted += "...";
  return absl::InvalidArgumentError(
      absl::StrCat("line ", line_no, ": ", what, ": \"", quoted, "\""));
}

std::vector<absl::string_view> Lines(absl::string_view text) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  for (auto& l : lines) l = absl::StripSuffix(l, "\r");
  return lines;
}

bool ParseHex(absl::string_view s, uint64_t* out) {
  if (!absl::ConsumePrefix(&s, "0x") && !absl::ConsumePrefix(&s, "0X")) return false;
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return false;
    v = v * 16 + d;
  }
  *out = v;
  return true;
}

// "path:123" or "path:123:45" -> file, line. False if no trailing line number.
bool SplitFileLine(absl::string_view s, std::string* file, int* line) {
  s = absl::StripAsciiWhitespace(s);
  size_t colon = s.rfind(':');
  if (colon == absl::string_view::npos) return false;
  int n = 0;
  if (!absl::SimpleAtoi(s.substr(colon + 1), &n)) return false;
  absl::string_view head = s.substr(0, colon);
  // With a column ("file:39:14") the line is the second-to-last number.
  size_t colon2 = head.rfind(':');
  int n2 = 0;
  if (colon2 != absl::string_view::npos && absl::SimpleAtoi(head.substr(colon2 + 1), &n2)) {
    *file = std::string(head.substr(0, colon2));
    *line = n2;
  } else {
    *file = std::string(head);
    *line = n;
  }
  return !file->empty() && *line >= 0;
}

// "#12  rest" -> rest. False if not a frame-number prefix.
bool ConsumeFrameNumber(absl::string_view* s) {
  if (!absl::ConsumePrefix(s, "#")) return false;
  size_t i = 0;
  while (i < s->size() && std::isdigit(static_cast<unsigned char>((*s)[i]))) ++i;
  if (i == 0 || i == s->size() || (*s)[i] != ' ') return false;
  s->remove_prefix(i);
  *s = absl::StripLeadingAsciiWhitespace(*s);
  return true;
}

// Index of the '(' that opens the parenthesised group ending at s.back() == ')',
// scanning backwards and skipping quoted strings; npos when unbalanced.
size_t MatchingOpenParen(absl::string_view s) {
  int depth = 0;
  bool in_quote = false;
  for (size_t i = s.size(); i-- > 0;) {
    const char c = s[i];
    if (c == '"' && (i == 0 || s[i - 1] != '\\')) in_quote = !in_quote;
    if (in_quote) continue;
    if (c == ')') ++depth;
    if (c == '(') {
      if (--depth == 0) return i;
    }
  }
  return absl::string_view::npos;
}

// ---------------------------------------------------------------- gdb

absl::StatusOr<StackFrame> ParseGdbFrame(absl::string_view rest, int line_no,
                                         absl::string_view line) {
  StackFrame frame;
  if (absl::StartsWith(rest, "0x")) {
    size_t space = rest.find(' ');
    if (space == absl::string_view::npos || !ParseHex(rest.substr(0, space), &frame.address)) {
      return LineError(line_no, line, "malformed frame address");
    }
    rest.remove_prefix(space + 1);
    if (!absl::ConsumePrefix(&rest, "in ")) {
      return LineError(line_no, line, "expected 'in' after the frame address");
    }
  }
  // Suffix: " from MODULE" or " at FILE:LINE".
  size_t from = rest.rfind(" from ");
  if (from != absl::string_view::npos && from > 0 && rest[from - 1] == ')' &&
      rest.find(' ', from + 6) == absl::string_view::npos) {
    frame.module = std::string(rest.substr(from + 6));
    rest = rest.substr(0, from);
  } else {
    size_t at = rest.rfind(" at ");
    if (at != absl::string_view::npos && at > 0 && rest[at - 1] == ')' &&
        SplitFileLine(rest.substr(at + 4), &frame.file, &frame.line)) {
      rest = rest.substr(0, at);
    }
  }
  rest = absl::StripTrailingAsciiWhitespace(rest);
  if (!absl::EndsWith(rest, ")") && absl::StrContains(rest, "(")) {
    return LineError(line_no, line, "unbalanced parentheses in frame");
  }
  if (absl::EndsWith(rest, ")")) {
    size_t open = MatchingOpenParen(rest);
    if (open == absl::string_view::npos || open == 0) {
      return LineError(line_no, line, "unbalanced parentheses in frame");
    }
    rest = absl::StripTrailingAsciiWhitespace(rest.substr(0, open));
  }
  if (rest.empty()) return LineError(line_no, line, "frame without a function");
  frame.function = std::string(rest);
  return frame;
}

// "Thread 2 (Thread 0x7f.. (LWP 6104) "name"):" / "Thread 1 (process 123):"
absl::StatusOr<ThreadStack> ParseGdbThreadHeader(absl::string_view line, int line_no) {
  ThreadStack thread;
  absl::string_view s = line;
  if (!absl::ConsumePrefix(&s, "Thread ") || !absl::EndsWith(s, ":")) {
    return LineError(line_no, line, "malformed gdb thread header");
  }
  int64_t id = 0;
  for (absl::string_view key : {"(LWP ", "(process ", "(Thread "}) {
    size_t pos = s.find(key);
    if (pos == absl::string_view::npos) continue;
    absl::string_view num = s.substr(pos + key.size());
    size_t end = num.find_first_of(") ");
    if (end == absl::string_view::npos) continue;
    uint64_t hex = 0;
    if (absl::SimpleAtoi(num.substr(0, end), &id) ||
        (ParseHex(num.substr(0, end), &hex) && (id = static_cast<int64_t>(hex), true))) {
      break;
    }
  }
  if (id == 0) return LineError(line_no, line, "gdb thread header without a thread id");
  thread.thread_id = id;
  size_t q1 = s.find('"');
  size_t q2 = s.rfind('"');
  if (q1 != absl::string_view::npos && q2 > q1) {
    thread.thread_name = std::string(s.substr(q1 + 1, q2 - q1 - 1));
  }
  return thread;
}

}  // namespace

const char* StackToolName(StackTool tool) {
  switch (tool) {
    case StackTool::kPySpy: return "py-spy";
    case StackTool::kGdb: return "gdb";
    case StackTool::kEuStack: return "eu-stack";
  }
  return "unknown";
}

absl::StatusOr<ProcessStack> ParseGdbBacktrace(absl::string_view text, int pid_hint) {
  ProcessStack process;
  process.tool = "gdb";
  process.pid = pid_hint;
  const std::vector<absl::string_view> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    absl::string_view line = lines[i];
    if (absl::StartsWith(line, "Thread ") && absl::EndsWith(line, ":")) {
      absl::StatusOr<ThreadStack> thread = ParseGdbThreadHeader(line, line_no);
      if (!thread.ok()) return thread.status();
      process.threads.push_back(*std::move(thread));
      continue;
    }
    if (absl::StartsWith(line, "#")) {
      absl::string_view rest = line;
      if (!ConsumeFrameNumber(&rest)) return LineError(line_no, line, "malformed frame number");
      if (process.threads.empty()) {
        return LineError(line_no, line, "frame before any 'Thread' header");
      }
      absl::StatusOr<StackFrame> frame = ParseGdbFrame(rest, line_no, line);
      if (!frame.ok()) return frame.status();
      process.threads.back().frames.push_back(*std::move(frame));
      continue;
    }
    absl::string_view s = line;
    if (absl::ConsumePrefix(&s, "[Inferior ")) {
      size_t pos = s.find("(process ");
      if (pos != absl::string_view::npos) {
        absl::string_view num = s.substr(pos + 9);
        int pid = 0;
        if (absl::SimpleAtoi(num.substr(0, num.find(')')), &pid)) process.pid = pid;
      }
    }
    // Everything else is gdb chatter.
  }
  if (process.threads.empty()) {
    return absl::InvalidArgumentError(
        "no 'Thread N (...):' header found: not `thread apply all bt` output");
  }
  return process;
}

// ---------------------------------------------------------------- eu-stack

absl::StatusOr<std::vector<ProcessStack>> ParseEuStack(absl::string_view text) {
  std::vector<ProcessStack> processes;
  const std::vector<absl::string_view> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    absl::string_view line = lines[i];
    if (absl::StripAsciiWhitespace(line).empty() || absl::StartsWith(line, "eu-stack:")) {
      continue;
    }
    absl::string_view s = line;
    if (absl::ConsumePrefix(&s, "PID ")) {
      ProcessStack process;
      process.tool = "eu-stack";
      size_t end = s.find(' ');
      if (!absl::SimpleAtoi(s.substr(0, end), &process.pid)) {
        return LineError(line_no, line, "malformed PID line");
      }
      // The tail (" - process" / " - core") names the target kind, not the command.
      processes.push_back(std::move(process));
      continue;
    }
    if (absl::ConsumePrefix(&s, "TID ")) {
      ThreadStack thread;
      if (!absl::ConsumeSuffix(&s, ":") || !absl::SimpleAtoi(s, &thread.thread_id)) {
        return LineError(line_no, line, "malformed TID line");
      }
      if (processes.empty()) {
        // `eu-stack -p` always starts with a PID line; a bare TID is from `-1`-less output
        // of a single thread, so open an anonymous process.
        processes.emplace_back().tool = "eu-stack";
      }
      processes.back().threads.push_back(std::move(thread));
      continue;
    }
    if (absl::StartsWith(line, "#")) {
      absl::string_view rest = line;
      if (!ConsumeFrameNumber(&rest)) return LineError(line_no, line, "malformed frame number");
      if (processes.empty() || processes.back().threads.empty()) {
        return LineError(line_no, line, "frame before any 'TID' line");
      }
      StackFrame frame;
      size_t space = rest.find(' ');
      if (!ParseHex(rest.substr(0, space), &frame.address)) {
        return LineError(line_no, line, "malformed frame address");
      }
      rest = space == absl::string_view::npos ? absl::string_view()
                                              : absl::StripLeadingAsciiWhitespace(
                                                    rest.substr(space + 1));
      if (absl::ConsumePrefix(&rest, "- ")) {
        frame.module = std::string(rest);
        rest = {};
      } else {
        size_t dash = rest.rfind(" - ");
        if (dash != absl::string_view::npos &&
            rest.find(' ', dash + 3) == absl::string_view::npos) {
          frame.module = std::string(rest.substr(dash + 3));
          rest = rest.substr(0, dash);
        }
      }
      frame.function = rest.empty() ? "??" : std::string(rest);
      processes.back().threads.back().frames.push_back(std::move(frame));
      continue;
    }
    if (absl::StartsWith(line, "    ")) {  // -s source line of the previous frame
      if (processes.empty() || processes.back().threads.empty() ||
          processes.back().threads.back().frames.empty()) {
        return LineError(line_no, line, "source line before any frame");
      }
      StackFrame& frame = processes.back().threads.back().frames.back();
      if (!SplitFileLine(line, &frame.file, &frame.line)) {
        return LineError(line_no, line, "malformed source location (want file:line)");
      }
      continue;
    }
    return LineError(line_no, line, "unexpected line in eu-stack output");
  }
  bool any_thread = false;
  for (const auto& p : processes) any_thread |= !p.threads.empty();
  if (!any_thread) return absl::InvalidArgumentError("no 'TID N:' thread found in eu-stack output");
  return processes;
}

// ---------------------------------------------------------------- py-spy

absl::StatusOr<std::vector<ProcessStack>> ParsePySpyDump(absl::string_view text) {
  std::vector<ProcessStack> processes;
  const std::vector<absl::string_view> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    absl::string_view line = lines[i];
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::string_view s = line;
    if (absl::ConsumePrefix(&s, "Process ")) {
      ProcessStack process;
      process.tool = "py-spy";
      size_t colon = s.find(':');
      if (colon == absl::string_view::npos || !absl::SimpleAtoi(s.substr(0, colon), &process.pid)) {
        return LineError(line_no, line, "malformed 'Process PID: command' header");
      }
      process.command = std::string(absl::StripAsciiWhitespace(s.substr(colon + 1)));
      processes.push_back(std::move(process));
      continue;
    }
    if (absl::ConsumePrefix(&s, "Thread ")) {
      if (processes.empty()) return LineError(line_no, line, "thread before any 'Process' header");
      ThreadStack thread;
      size_t space = s.find(' ');
      absl::string_view id = s.substr(0, space);
      uint64_t hex = 0;
      if (ParseHex(id, &hex)) {
        thread.thread_id = static_cast<int64_t>(hex);
      } else if (!absl::SimpleAtoi(id, &thread.thread_id)) {
        return LineError(line_no, line, "malformed thread id");
      }
      absl::string_view tail = space == absl::string_view::npos ? absl::string_view()
                                                                : s.substr(space + 1);
      if (!absl::ConsumePrefix(&tail, "(")) {
        return LineError(line_no, line, "thread header without '(state)'");
      }
      size_t close = tail.find(')');
      if (close == absl::string_view::npos) return LineError(line_no, line, "unterminated state");
      thread.state = std::string(tail.substr(0, close));
      tail.remove_prefix(close + 1);
      if (absl::ConsumePrefix(&tail, ": \"") && absl::ConsumeSuffix(&tail, "\"")) {
        thread.thread_name = std::string(tail);
      } else if (!tail.empty()) {
        return LineError(line_no, line, "malformed thread name");
      }
      processes.back().threads.push_back(std::move(thread));
      continue;
    }
    if (absl::StartsWith(line, "        ")) {  // Arguments:/Locals: blocks (--locals)
      if (processes.empty() || processes.back().threads.empty() ||
          processes.back().threads.back().frames.empty()) {
        return LineError(line_no, line, "locals before any frame");
      }
      continue;
    }
    if (absl::StartsWith(line, "    ")) {
      if (processes.empty() || processes.back().threads.empty()) {
        return LineError(line_no, line, "frame before any 'Thread' header");
      }
      absl::string_view f = absl::StripAsciiWhitespace(line);
      StackFrame frame;
      if (absl::EndsWith(f, ")")) {
        size_t open = f.rfind(" (");
        if (open == absl::string_view::npos) return LineError(line_no, line, "malformed frame");
        absl::string_view where = f.substr(open + 2, f.size() - open - 3);
        if (!SplitFileLine(where, &frame.file, &frame.line)) frame.module = std::string(where);
        f = f.substr(0, open);
      }
      if (f.empty()) return LineError(line_no, line, "frame without a function");
      frame.function = std::string(f);
      processes.back().threads.back().frames.push_back(std::move(frame));
      continue;
    }
    if (absl::StartsWith(line, "Python v") || absl::StartsWith(line, "Error:")) continue;
    return LineError(line_no, line, "unexpected line in py-spy dump output");
  }
  bool any_thread = false;
  for (const auto& p : processes) any_thread |= !p.threads.empty();
  if (!any_thread) return absl::InvalidArgumentError("no 'Thread' found in py-spy dump output");
  return processes;
}

absl::StatusOr<std::vector<ProcessStack>> ParseStackText(StackTool tool, absl::string_view text,
                                                         int pid_hint) {
  switch (tool) {
    case StackTool::kPySpy:
      return ParsePySpyDump(text);
    case StackTool::kEuStack:
      return ParseEuStack(text);
    case StackTool::kGdb: {
      absl::StatusOr<ProcessStack> p = ParseGdbBacktrace(text, pid_hint);
      if (!p.ok()) return p.status();
      return std::vector<ProcessStack>{*std::move(p)};
    }
  }
  return absl::InvalidArgumentError("unknown stack tool");
}

}  // namespace peregrine
