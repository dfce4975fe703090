// Fuzzes ParseNcclTrace (cli/analyze/nccl_trace.h): the inputs of `peregrinectl analyze
// nccl`, which detects the format itself: Peregrine's JSONL ring dump, NCCL_DEBUG=INFO
// text logs and Kineto (PyTorch profiler) Chrome-trace JSON.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "cli/analyze/nccl_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)peregrine::ParseNcclTrace(absl::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  return 0;
}
