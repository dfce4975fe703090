#include "base/hmac.h"

#include <catch2/catch.hpp>
#include <string>

namespace peregrine {
namespace {

// RFC 4231 test vectors for HMAC-SHA-256.
TEST_CASE("HmacSha256Hex matches the RFC 4231 test vectors", "[unit]") {
  // Test case 1: key = 20 bytes of 0x0b, data = "Hi There".
  CHECK(*HmacSha256Hex(std::string(20, '\x0b'), "Hi There") ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: key = "Jefe", data = "what do ya want for nothing?".
  CHECK(*HmacSha256Hex("Jefe", "what do ya want for nothing?") ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 6: a 131-byte key (hashed first), data = "Test Using Larger Than Block-Size Key - Hash Key First".
  CHECK(*HmacSha256Hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First") ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("HmacSha256Hex depends on the key and on every byte of the message", "[unit]") {
  const std::string a = *HmacSha256Hex("key", "default/job/uid/pod-0");
  CHECK(a.size() == 64);
  CHECK(a != *HmacSha256Hex("key", "default/job/uid/pod-1"));
  CHECK(a != *HmacSha256Hex("kez", "default/job/uid/pod-0"));
  CHECK(a == *HmacSha256Hex("key", "default/job/uid/pod-0"));
  CHECK(HmacSha256Hex("", "").ok());
}

}  // namespace
}  // namespace peregrine
