// FNV-1a, 64-bit (Fowler, Noll, Vo): the one implementation of the non-cryptographic hash
// the tree uses for stable ids and digests (communicator ids in the NCCL ring format,
// diagnostic digests, the reference trainer's digest, codes of unknown names in offline
// analysis). Every call may continue from an earlier hash `h`, so a digest over several
// pieces is Fnv1aBytes(b, nb, Fnv1aBytes(a, na)).
//
// Header only, no dependencies (the NCCL interposer and the stand-in trainer include it
// too); pure, constexpr over string_view; thread-safe.
#ifndef PEREGRINE_BASE_FNV1A_H_
#define PEREGRINE_BASE_FNV1A_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace peregrine {

inline constexpr uint64_t kFnv1aOffsetBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

// The hash of `bytes`, continuing from `h`.
constexpr uint64_t Fnv1a(std::string_view bytes, uint64_t h = kFnv1aOffsetBasis) {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= kFnv1aPrime;
  }
  return h;
}

// The hash of n bytes at `data` (an object's representation), continuing from `h`.
inline uint64_t Fnv1aBytes(const void* data, size_t n, uint64_t h = kFnv1aOffsetBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnv1aPrime;
  }
  return h;
}

}  // namespace peregrine

#endif  // PEREGRINE_BASE_FNV1A_H_
