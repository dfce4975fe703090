#include "tests/testing/captured_run.h"

#include <sstream>

namespace peregrine::testing {

CapturedRun RunCaptured(const std::function<int(std::ostream& out, std::ostream& err)>& tool) {
  std::ostringstream out, err;
  CapturedRun run;
  run.code = tool(out, err);
  run.out = out.str();
  run.err = err.str();
  return run;
}

}  // namespace peregrine::testing
