// PEREGRINE_CHECK(cond) << "context": crash loudly when an internal invariant breaks.
// Debian's Abseil (20220623) predates absl/log, so this is the project's CHECK.
// Never use it on external input: that gets an absl::Status.
#ifndef PEREGRINE_DIAGNOSIS_CHECK_H_
#define PEREGRINE_DIAGNOSIS_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace peregrine::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": CHECK failed: " << condition << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", stream_.str().c_str());
    std::fflush(stderr);
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace peregrine::internal

#define PEREGRINE_CHECK(condition)                                                   \
  if (__builtin_expect(!!(condition), 1)) {                                          \
  } else /* NOLINT */                                                                \
    ::peregrine::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#endif  // PEREGRINE_DIAGNOSIS_CHECK_H_
