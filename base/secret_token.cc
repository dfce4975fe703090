#include "base/secret_token.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace peregrine {

absl::StatusOr<std::string> NewSecretToken() {
  uint8_t bytes[kSecretTokenBits / 8];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("getrandom failed: ", std::strerror(errno)));
    filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

bool SecretTokensEqual(absl::string_view presented, absl::string_view expected) {
  // Every byte of the longer string is visited and differences are OR-ed together.
  const size_t n = std::max(presented.size(), expected.size());
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char a = i < presented.size() ? static_cast<unsigned char>(presented[i]) : 0;
    const unsigned char b = i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0;
    diff |= static_cast<unsigned char>(a ^ b);
  }
  return diff == 0;
}

}  // namespace peregrine
