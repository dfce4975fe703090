// Fuzzes the inputs of `peregrinectl analyze nccl` as the command reads them: gzip
// (InflateGzip, cli/analyze/input_file.h, capped small so a bomb ends quickly) when the
// bytes start with its magic, then ParseNcclTrace (cli/analyze/nccl_trace.h), which detects
// the format itself: Peregrine's JSON lines, NCCL_DEBUG=INFO text logs behind any launcher
// prefix, and Kineto (PyTorch profiler) Chrome-trace JSON; then the cross-rank comparison
// (FindNcclDesync, nccl_desync.h) over the streams it yields.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "cli/analyze/input_file.h"
#include "cli/analyze/nccl_desync.h"
#include "cli/analyze/nccl_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string inflated;
  if (peregrine::LooksLikeGzip(bytes)) {
    absl::StatusOr<std::string> text = peregrine::InflateGzip(bytes, "fuzz", 1 << 20);
    if (!text.ok()) return 0;
    inflated = *std::move(text);
    bytes = inflated;
  }
  absl::StatusOr<peregrine::NcclTrace> trace = peregrine::ParseNcclTrace(bytes, "fuzz");
  if (trace.ok()) (void)peregrine::FindNcclDesync(trace->streams);
  return 0;
}
