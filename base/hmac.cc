#include "base/hmac.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "absl/strings/escaping.h"

namespace peregrine {

absl::StatusOr<std::string> HmacSha256Hex(absl::string_view key, absl::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  // HMAC() with a null output buffer would use a static one; ours is on the stack, so
  // concurrent calls share nothing. A zero-length key is passed as a non-null pointer.
  static const unsigned char kEmpty = 0;
  const unsigned char* key_bytes = key.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(key.data());
  const unsigned char* msg_bytes =
      message.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(message.data());
  if (HMAC(EVP_sha256(), key_bytes, static_cast<int>(key.size()), msg_bytes, message.size(), mac, &mac_len) ==
          nullptr ||
      mac_len != 32) {
    return absl::InternalError("HMAC-SHA256 failed in libcrypto");
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(mac), mac_len));
}

}  // namespace peregrine
