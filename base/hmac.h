// HMAC-SHA256 (RFC 2104 over SHA-256, by OpenSSL's libcrypto): the keyed digest that
// binds an agent's credential to its pod (controller/agent_credentials.h).
//
// HmacSha256Hex returns the 32-byte MAC as 64 lower-case hex characters. Any key length
// is accepted (RFC 2104: longer keys are hashed first); callers use 256-bit keys from
// base/secret_token.h. Thread-safe (no shared state). Errors: kInternal when libcrypto
// fails, which does not happen for valid inputs.
#ifndef PEREGRINE_BASE_HMAC_H_
#define PEREGRINE_BASE_HMAC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace peregrine {

absl::StatusOr<std::string> HmacSha256Hex(absl::string_view key, absl::string_view message);

}  // namespace peregrine

#endif  // PEREGRINE_BASE_HMAC_H_
