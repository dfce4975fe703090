#include "base/fnv1a.h"

#include <catch2/catch.hpp>
#include <string>

namespace peregrine {
namespace {

// The published FNV-1a 64 test vectors (Fowler/Noll/Vo).
static_assert(Fnv1a("") == 0xcbf29ce484222325ull);
static_assert(Fnv1a("a") == 0xaf63dc4c8601ec8cull);
static_assert(Fnv1a("foobar") == 0x85944171f73967e8ull);

TEST_CASE("FNV-1a 64 gives the published vectors, over strings and bytes alike", "[unit]") {
  CHECK(Fnv1a("") == 0xcbf29ce484222325ull);
  CHECK(Fnv1a("a") == 0xaf63dc4c8601ec8cull);
  CHECK(Fnv1a("foobar") == 0x85944171f73967e8ull);
  CHECK(Fnv1aBytes("foobar", 6) == 0x85944171f73967e8ull);
  CHECK(Fnv1aBytes(nullptr, 0) == kFnv1aOffsetBasis);
}

TEST_CASE("FNV-1a continues from an earlier hash: pieces hash like their concatenation", "[unit]") {
  CHECK(Fnv1a("bar", Fnv1a("foo")) == Fnv1a("foobar"));
  CHECK(Fnv1aBytes("bar", 3, Fnv1aBytes("foo", 3)) == 0x85944171f73967e8ull);
  const std::string with_nul("a\0b", 3);
  CHECK(Fnv1a(with_nul) == Fnv1aBytes(with_nul.data(), 3));
  CHECK(Fnv1a(with_nul) != Fnv1a("ab"));
}

}  // namespace
}  // namespace peregrine
