// Fuzzes the stack dump parsers (diagnosis/stack_parse.h): py-spy dump, gdb backtrace
// and eu-stack text captured from training processes. The first byte picks the tool
// (and the gdb pid hint); the rest is the dump.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "diagnosis/stack_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static constexpr peregrine::StackTool kTools[] = {
      peregrine::StackTool::kPySpy, peregrine::StackTool::kGdb, peregrine::StackTool::kEuStack};
  const peregrine::StackTool tool = kTools[data[0] % 3];
  const int pid_hint = data[0] / 3;
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)peregrine::ParseStackText(tool, text, pid_hint);
  return 0;
}
