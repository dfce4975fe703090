// Fuzzes JobStatusFromJson (controller/status_json.h): the job status JSON that
// peregrinectl reads from the controller. A status that parses must serialize to JSON
// that parses back, and serializing that gives the same text (a fixpoint).
#include <cstddef>
#include <cstdint>
#include <string>

#include "controller/status_json.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto status = peregrine::JobStatusFromJson(peregrine::fuzz::AsString(data, size));
  if (!status.ok()) return 0;
  const std::string json = peregrine::JobStatusToJson(*status);
  auto again = peregrine::JobStatusFromJson(json);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(peregrine::JobStatusToJson(*again) == json);
  return 0;
}
