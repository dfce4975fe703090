// Fuzzes ParseByteQuantity (controller/job_parser.h): Kubernetes-style byte quantities
// ("64Mi", "1G", "512") from the job spec. Any text gives a value or an error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "controller/job_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)peregrine::ParseByteQuantity(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
