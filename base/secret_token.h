// Secret tokens: 256-bit random secrets (local mode's agent key, from which the per-pod
// agent credentials and the per-job data-channel tokens are derived) and the
// constant-time comparison every presented credential or token goes through. NewSecretToken draws 256 bits from the kernel's CSPRNG (getrandom(2)) and
// returns them as 64 lower-case hex characters; SecretTokensEqual compares a presented
// token with the expected one in time that depends only on their lengths (no early exit
// on the first differing byte, so timing does not reveal a matching prefix).
//
// Thread-safe. Errors: NewSecretToken returns kInternal when the kernel gives no random
// bytes (it never falls back to a weaker generator).
#ifndef PEREGRINE_BASE_SECRET_TOKEN_H_
#define PEREGRINE_BASE_SECRET_TOKEN_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

inline constexpr int kSecretTokenBits = 256;

absl::StatusOr<std::string> NewSecretToken();

bool SecretTokensEqual(absl::string_view presented, absl::string_view expected);

}  // namespace peregrine

#endif  // PEREGRINE_BASE_SECRET_TOKEN_H_
