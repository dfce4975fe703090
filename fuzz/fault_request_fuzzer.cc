// Fuzzes ParseFaultRequest (proto/api/fault_request.h): the JSON body of a fault
// injection posted to the controller's HTTP API. A request that parses must serialize
// to JSON that parses back to the same request.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_check.h"
#include "proto/api/fault_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto request = peregrine::ParseFaultRequest(peregrine::fuzz::AsString(data, size));
  if (!request.ok()) return 0;
  const std::string json = peregrine::FaultRequestToJson(*request);
  auto again = peregrine::ParseFaultRequest(json);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(peregrine::FaultRequestToJson(*again) == json);
  return 0;
}
