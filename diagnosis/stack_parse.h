// Parsers for the text that stack-capture tools print, into plain structs:
//   py-spy dump      (Python stacks; "Process N: cmd", "Thread T (state): \"name\"",
//                     "    function (file:line)")
//   gdb -batch -ex 'thread apply all bt'
//                    ("Thread N (Thread 0x... (LWP T) \"name\"):", "#0  0x... in f (args)
//                     at file:line" / "... from lib")
//   eu-stack -p PID [-m] [-s]
//                    ("PID N - process", "TID T:", "#0  0x... function[ - module]",
//                     optional indented "file:line[:column]")
// Frames are innermost first. The parsers keep what the tools print (no normalisation:
// see stack_aggregation.h). Every error is kInvalidArgument and names the 1-based line
// number and its text. Tool chatter that is not part of a stack ("[New LWP ...]", "Using
// host libthread_db ...", "Python v3.11 (...)", "eu-stack: ..." warnings, "Arguments:" /
// "Locals:" blocks) is skipped.
//
// Pure functions; no I/O.
#ifndef PEREGRINE_DIAGNOSIS_STACK_PARSE_H_
#define PEREGRINE_DIAGNOSIS_STACK_PARSE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

struct StackFrame {
  std::string function;  // as printed ("demo::TrainStep(bool)", "forward"); "??" if unknown
  std::string file;      // source file if printed, else empty
  int line = 0;          // 0 if not printed
  std::string module;    // shared object / executable if printed
  uint64_t address = 0;  // program counter if printed, else 0
};

struct ThreadStack {
  int64_t thread_id = 0;    // LWP / TID / py-spy thread id (may be a pointer value)
  std::string thread_name;  // empty if not printed
  std::string state;        // py-spy "idle", "active", "active+gil"; empty otherwise
  std::vector<StackFrame> frames;  // innermost first
};

struct ProcessStack {
  int pid = 0;  // 0 if the text does not say
  std::string command;
  std::string tool;  // "py-spy", "gdb", "eu-stack"
  std::vector<ThreadStack> threads;
};

enum class StackTool { kPySpy, kGdb, kEuStack };
const char* StackToolName(StackTool tool);  // "py-spy", "gdb", "eu-stack"

// `py-spy dump --pid P` (also with --native, --locals, --subprocesses: one process per
// "Process N:" header). Fails when a frame or thread appears before its header, a header
// is malformed, or the text has no thread at all.
absl::StatusOr<std::vector<ProcessStack>> ParsePySpyDump(absl::string_view text);

// `gdb -batch -p PID -ex 'thread apply all bt'`. pid is taken from "[Inferior 1 (process
// N) detached]" when printed, else from `pid_hint`. Threads are returned as printed
// (gdb prints the highest thread number first). Fails on a malformed "#N" frame line, a
// frame before any "Thread" header, or no thread at all.
absl::StatusOr<ProcessStack> ParseGdbBacktrace(absl::string_view text, int pid_hint = 0);

// `eu-stack -p PID` with or without -m (module) and -s (source). Several "PID" blocks
// give several processes. Fails on malformed "PID"/"TID"/"#N" lines, frames before a
// "TID" header, or no thread at all.
absl::StatusOr<std::vector<ProcessStack>> ParseEuStack(absl::string_view text);

// Dispatch on the tool. For gdb the result has one process.
absl::StatusOr<std::vector<ProcessStack>> ParseStackText(StackTool tool, absl::string_view text,
                                                         int pid_hint = 0);

}  // namespace peregrine

#endif  // PEREGRINE_DIAGNOSIS_STACK_PARSE_H_
