// Secret tokens: 256 bits from the kernel in hex, all different; the comparison is exact
// whatever the lengths and contents.
#include "base/secret_token.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

namespace peregrine {
namespace {

TEST_CASE("secret tokens: 64 hex characters (256 bits), never repeated", "[unit]") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::string> t = NewSecretToken();
    REQUIRE(t.ok());
    REQUIRE(t->size() == static_cast<size_t>(kSecretTokenBits / 4));
    CHECK(t->find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(*t);
  }
  CHECK(seen.size() == 1000);
}

TEST_CASE("secret tokens compare equal only when identical", "[unit]") {
  CHECK(SecretTokensEqual("abc", "abc"));
  CHECK(SecretTokensEqual("", ""));
  CHECK_FALSE(SecretTokensEqual("abc", "abd"));
  CHECK_FALSE(SecretTokensEqual("abc", "ab"));
  CHECK_FALSE(SecretTokensEqual("ab", "abc"));
  CHECK_FALSE(SecretTokensEqual("", "abc"));
  CHECK_FALSE(SecretTokensEqual(std::string("ab\0c", 4), "ab"));  // bytes past a NUL count
}

}  // namespace
}  // namespace peregrine
