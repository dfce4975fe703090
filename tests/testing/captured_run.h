// Runs a command-line tool that is a function over two output streams (peregrinectl's
// RunPeregrinectl, analyze's RunAnalyze) and keeps its exit code and what it wrote, so a
// test can assert on both. Thread-compatible; the tool runs on the caller's thread.
#ifndef PEREGRINE_TESTS_TESTING_CAPTURED_RUN_H_
#define PEREGRINE_TESTS_TESTING_CAPTURED_RUN_H_

#include <functional>
#include <ostream>
#include <string>

namespace peregrine::testing {

struct CapturedRun {
  int code = -1;    // the tool's return value
  std::string out;  // what it wrote to its output stream
  std::string err;  // and to its error stream
};

// Calls `tool(out, err)` with two string streams and returns what it left in them.
CapturedRun RunCaptured(const std::function<int(std::ostream& out, std::ostream& err)>& tool);

}  // namespace peregrine::testing

#endif  // PEREGRINE_TESTS_TESTING_CAPTURED_RUN_H_
