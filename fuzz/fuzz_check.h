// Helpers shared by the fuzz targets of fuzz/.
//
// FUZZ_CHECK(cond): a property every input must keep (e.g. a parsed value serializes
// to text that parses back to the same value). On violation it prints the condition
// and aborts, which libFuzzer and the replay driver both report as a crash. Stateless;
// thread-compatible.
#ifndef PEREGRINE_FUZZ_FUZZ_CHECK_H_
#define PEREGRINE_FUZZ_FUZZ_CHECK_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

namespace peregrine::fuzz {

inline std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

}  // namespace peregrine::fuzz

#endif  // PEREGRINE_FUZZ_FUZZ_CHECK_H_
