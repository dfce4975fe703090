// Element kernels of the stand-in NCCL: half/bfloat16 conversions and reductions.
#include <cmath>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "sim/nccl/reduce.h"

namespace peregrine::simnccl {
namespace {

TEST_CASE("float16 and bfloat16 conversions round to nearest even", "[unit]") {
  CHECK(FloatToHalf(1.0f) == 0x3c00);
  CHECK(FloatToHalf(-2.0f) == 0xc000);
  CHECK(FloatToHalf(65504.0f) == 0x7bff);
  CHECK(FloatToHalf(65536.0f) == 0x7c00);          // overflow -> inf
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(FloatToHalf(0.1f) == 0x2e66);
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie -> even
  CHECK(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  CHECK(HalfToFloat(0x3555) == Approx(0.333251953125f));
  CHECK(HalfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(FloatToBfloat16(1.0f) == 0x3f80);
  CHECK(FloatToBfloat16(3.140625f) == 0x4049);
  CHECK(FloatToBfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie -> even
  CHECK(Bfloat16ToFloat(0xc000) == -2.0f);
  for (int v = -2048; v <= 2048; ++v) {
    REQUIRE(HalfToFloat(FloatToHalf(static_cast<float>(v))) == static_cast<float>(v));
  }
}

TEST_CASE("reductions and average and fault perturbations per type", "[unit]") {
  std::vector<int8_t> a = {100, -100, 5}, b = {100, -100, -7};
  ReduceInto(a.data(), b.data(), 3, ncclInt8, ncclSum);  // wraps around
  CHECK(a == std::vector<int8_t>{-56, 56, -2});
  std::vector<uint32_t> u = {3, 9}, v = {7, 2};
  ReduceInto(u.data(), v.data(), 2, ncclUint32, ncclMax);
  CHECK(u == std::vector<uint32_t>{7, 9});
  std::vector<int64_t> s = {-7, 9};
  DivideBy(s.data(), 2, ncclInt64, 2);
  CHECK(s == std::vector<int64_t>{-3, 4});
  std::vector<double> d = {1.5, 2.0}, e = {-3.0, 4.0};
  ReduceInto(d.data(), e.data(), 2, ncclFloat64, ncclProd);
  CHECK(d == std::vector<double>{-4.5, 8.0});
  std::vector<uint16_t> h = {FloatToHalf(1.5f)}, g = {FloatToHalf(2.25f)};
  ReduceInto(h.data(), g.data(), 1, ncclFloat16, ncclMin);
  CHECK(HalfToFloat(h[0]) == 1.5f);
  std::vector<float> f = {1.0f, 2.0f};
  Corrupt(f.data(), 2, ncclFloat32);
  CHECK(f[0] == Approx(1.001f));
  PoisonWithNan(f.data(), 2, ncclFloat32);
  CHECK(std::isnan(f[1]));
  std::vector<int32_t> i = {4};
  PoisonWithNan(i.data(), 1, ncclInt32);
  CHECK(i[0] == 4);
  Corrupt(i.data(), 1, ncclInt32);
  CHECK(i[0] == 5);
  CHECK(DataTypeSize(ncclFloat8e4m3) == 0);
  CHECK_FALSE(IsSupportedOp(static_cast<ncclRedOp_t>(7)));
}

}  // namespace
}  // namespace peregrine::simnccl
