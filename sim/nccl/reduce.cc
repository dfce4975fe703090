#include "sim/nccl/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace peregrine::simnccl {

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x7fffffu;
  const int exp = static_cast<int>((x >> 23) & 0xffu);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant != 0 ? 0x200u : 0u));
  const int e = exp - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      float v = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -v : v;
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t FloatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float Bfloat16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

namespace {

struct Half {
  uint16_t bits;
};
struct Bf16 {
  uint16_t bits;
};

template <typename T>
struct Codec {
  using Compute = T;
  static Compute Load(T v) { return v; }
  static T Store(Compute v) { return v; }
};
template <>
struct Codec<Half> {
  using Compute = float;
  static float Load(Half v) { return HalfToFloat(v.bits); }
  static Half Store(float v) { return Half{FloatToHalf(v)}; }
};
template <>
struct Codec<Bf16> {
  using Compute = float;
  static float Load(Bf16 v) { return Bfloat16ToFloat(v.bits); }
  static Bf16 Store(float v) { return Bf16{FloatToBfloat16(v)}; }
};

template <typename C>
C Add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <typename C>
C Mul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<C>(static_cast<U>(static_cast<W>(static_cast<U>(a)) *
                                         static_cast<W>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

template <typename T>
void ReduceTyped(T* dst, const T* src, size_t n, ncclRedOp_t op) {
  using K = Codec<T>;
  using C = typename K::Compute;
  switch (op) {
    case ncclSum:
    case ncclAvg:
      for (size_t i = 0; i < n; ++i) dst[i] = K::Store(Add<C>(K::Load(dst[i]), K::Load(src[i])));
      break;
    case ncclProd:
      for (size_t i = 0; i < n; ++i) dst[i] = K::Store(Mul<C>(K::Load(dst[i]), K::Load(src[i])));
      break;
    case ncclMax:
      for (size_t i = 0; i < n; ++i) {
        C a = K::Load(dst[i]), b = K::Load(src[i]);
        dst[i] = K::Store(b > a ? b : a);
      }
      break;
    case ncclMin:
      for (size_t i = 0; i < n; ++i) {
        C a = K::Load(dst[i]), b = K::Load(src[i]);
        dst[i] = K::Store(b < a ? b : a);
      }
      break;
    default:
      break;
  }
}

template <typename T>
void DivideTyped(T* dst, size_t n, int divisor) {
  using K = Codec<T>;
  using C = typename K::Compute;
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) {
      dst[i] = K::Store(static_cast<C>(static_cast<int64_t>(K::Load(dst[i])) / divisor));
    } else if constexpr (std::is_integral_v<C>) {
      dst[i] = K::Store(static_cast<C>(static_cast<uint64_t>(K::Load(dst[i])) /
                                       static_cast<uint64_t>(divisor)));
    } else {
      dst[i] = K::Store(static_cast<C>(K::Load(dst[i]) / static_cast<C>(divisor)));
    }
  }
}

template <typename T>
void CorruptTyped(T* dst, size_t n) {
  using K = Codec<T>;
  using C = typename K::Compute;
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_integral_v<C>) {
      dst[i] = K::Store(Add<C>(K::Load(dst[i]), C{1}));
    } else {
      dst[i] = K::Store(static_cast<C>(K::Load(dst[i]) * static_cast<C>(1.001)));
    }
  }
}

template <typename T>
void NanTyped(T* dst, size_t n) {
  using K = Codec<T>;
  using C = typename K::Compute;
  if constexpr (!std::is_integral_v<C>) {
    for (size_t i = 0; i < n; ++i) dst[i] = K::Store(std::numeric_limits<C>::quiet_NaN());
  }
}

template <template <typename> class F, typename... Args>
void Dispatch(ncclDataType_t type, void* p, Args... args) {
  switch (type) {
    case ncclInt8: F<int8_t>::Run(static_cast<int8_t*>(p), args...); break;
    case ncclUint8: F<uint8_t>::Run(static_cast<uint8_t*>(p), args...); break;
    case ncclInt32: F<int32_t>::Run(static_cast<int32_t*>(p), args...); break;
    case ncclUint32: F<uint32_t>::Run(static_cast<uint32_t*>(p), args...); break;
    case ncclInt64: F<int64_t>::Run(static_cast<int64_t*>(p), args...); break;
    case ncclUint64: F<uint64_t>::Run(static_cast<uint64_t*>(p), args...); break;
    case ncclFloat16: F<Half>::Run(static_cast<Half*>(p), args...); break;
    case ncclFloat32: F<float>::Run(static_cast<float*>(p), args...); break;
    case ncclFloat64: F<double>::Run(static_cast<double*>(p), args...); break;
    case ncclBfloat16: F<Bf16>::Run(static_cast<Bf16*>(p), args...); break;
    default: break;
  }
}

template <typename T>
struct ReduceF {
  static void Run(T* dst, const void* src, size_t n, ncclRedOp_t op) {
    ReduceTyped<T>(dst, static_cast<const T*>(src), n, op);
  }
};
template <typename T>
struct DivideF {
  static void Run(T* dst, size_t n, int divisor) { DivideTyped<T>(dst, n, divisor); }
};
template <typename T>
struct CorruptF {
  static void Run(T* dst, size_t n) { CorruptTyped<T>(dst, n); }
};
template <typename T>
struct NanF {
  static void Run(T* dst, size_t n) { NanTyped<T>(dst, n); }
};

}  // namespace

size_t DataTypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

bool IsFloatingType(ncclDataType_t type) {
  return type == ncclFloat16 || type == ncclFloat32 || type == ncclFloat64 ||
         type == ncclBfloat16;
}

bool IsSupportedOp(ncclRedOp_t op) {
  return op == ncclSum || op == ncclProd || op == ncclMax || op == ncclMin || op == ncclAvg;
}

void ReduceInto(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op) {
  Dispatch<ReduceF>(type, dst, src, count, op);
}

void DivideBy(void* dst, size_t count, ncclDataType_t type, int divisor) {
  Dispatch<DivideF>(type, dst, count, divisor);
}

void PoisonWithNan(void* data, size_t count, ncclDataType_t type) {
  Dispatch<NanF>(type, data, count);
}

void Corrupt(void* data, size_t count, ncclDataType_t type) {
  Dispatch<CorruptF>(type, data, count);
}

}  // namespace peregrine::simnccl
