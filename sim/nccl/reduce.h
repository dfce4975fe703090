// Element-wise kernels of the stand-in NCCL (internal to sim/nccl): reductions for every
// supported ncclDataType_t and ncclRedOp_t, the average's final division, and the
// nan/corrupt fault perturbations. Host memory only; pure functions; thread-safe.
//
// Supported types: int8, uint8, int32, uint32, int64, uint64, float16, float32, float64,
// bfloat16 (fp8 types are rejected by DataTypeSize returning 0). float16/bfloat16 reduce
// in float and round to nearest even per step. Signed integer sum/prod wrap around.
#ifndef PEREGRINE_SIM_NCCL_REDUCE_H_
#define PEREGRINE_SIM_NCCL_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "nccl.h"

namespace peregrine::simnccl {

// Bytes per element; 0 for unsupported types.
size_t DataTypeSize(ncclDataType_t type);
bool IsFloatingType(ncclDataType_t type);
bool IsSupportedOp(ncclRedOp_t op);

// dst[i] = op(dst[i], src[i]) for i < count. ncclAvg reduces as a sum.
void ReduceInto(void* dst, const void* src, size_t count, ncclDataType_t type, ncclRedOp_t op);
// dst[i] /= divisor (the final step of ncclAvg; integer types truncate).
void DivideBy(void* dst, size_t count, ncclDataType_t type, int divisor);
// NaN into every element (floating types only; integers unchanged).
void PoisonWithNan(void* data, size_t count, ncclDataType_t type);
// A silent data corruption: floating values scaled by (1 + 1e-3), integers + 1.
void Corrupt(void* data, size_t count, ncclDataType_t type);

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBfloat16(float f);
float Bfloat16ToFloat(uint16_t b);

}  // namespace peregrine::simnccl

#endif  // PEREGRINE_SIM_NCCL_REDUCE_H_
