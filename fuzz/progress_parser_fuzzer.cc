// Fuzzes ParseProgressLine (agent/progress_parser.h): the "[peregrine] step=..." lines
// the agent reads from training output. Every line of the input is tried.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/progress_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  while (true) {
    const size_t end = text.find('\n');
    (void)peregrine::ParseProgressLine(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return 0;
}
