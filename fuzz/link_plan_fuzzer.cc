// Fuzzes ParseLinkRoundsPlan (diagnosis/link_plan.h): the link-validation plan text the
// agent receives in a p2p_rounds diagnostic. The first byte is the rank count (0..255);
// the rest is the plan. A plan that parses must format to text that parses back to the
// same plan (FormatLinkRoundsPlan is documented as the parser's inverse).
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "diagnosis/link_plan.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int ranks = data[0];
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto plan = peregrine::ParseLinkRoundsPlan(text, ranks);
  if (!plan.ok()) return 0;
  const std::string formatted = peregrine::FormatLinkRoundsPlan(*plan);
  auto again = peregrine::ParseLinkRoundsPlan(formatted, ranks);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(peregrine::FormatLinkRoundsPlan(*again) == formatted);
  return 0;
}
