// Fuzzes ParseCodeUpdateRequest (proto/api/code_update_request.h): the JSON body of a
// code update posted to the controller's HTTP API. A request that parses must serialize
// to JSON that parses back to the same request.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "proto/api/code_update_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto request = peregrine::ParseCodeUpdateRequest(text);
  if (!request.ok()) return 0;
  const std::string json = peregrine::CodeUpdateRequestToJson(*request);
  auto again = peregrine::ParseCodeUpdateRequest(json);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(peregrine::CodeUpdateRequestToJson(*again) == json);
  return 0;
}
