// common.cuh: helpers shared by every fuseprof kernel source.
//
// Every .cu file includes it first. The sources include no system header: the loader
// (runtime.rs) replaces each `#include "NAME.cuh"` with the header's text before NVRTC compiles
// the file, so NVRTC needs no include path and the crate needs no CUDA install to build (nvcc
// compiles the files as they are). Element storage is raw 16-bit (`u16`); FP_BF16 picks how the
// bits are read. Conversions go through PTX `cvt`, available on every sm_80+ GPU.
#ifndef FUSEPROF_COMMON_CUH
#define FUSEPROF_COMMON_CUH

typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

#ifndef FP_BF16
#define FP_BF16 0
#endif

#define LOG2E_F 1.4426950408889634f

__device__ __forceinline__ float to_f32(u16 v) {
#if FP_BF16
    return __uint_as_float(((u32)v) << 16);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
#endif
}

__device__ __forceinline__ u16 from_f32(float f) {
    u16 v;
#if FP_BF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
#endif
    return v;
}

// Two floats to one 32-bit pair: `lo` in the low half (the lower address), `hi` in the high half.
// PTX puts its first source operand in the upper half.
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
#if FP_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

__device__ __forceinline__ float lo_f32(u32 v) { return to_f32((u16)(v & 0xffffu)); }
__device__ __forceinline__ float hi_f32(u32 v) { return to_f32((u16)(v >> 16)); }

// Eight 16-bit values in one 16-byte vector.
__device__ __forceinline__ void unpack8(const uint4 v, float f[8]) {
    f[0] = lo_f32(v.x); f[1] = hi_f32(v.x);
    f[2] = lo_f32(v.y); f[3] = hi_f32(v.y);
    f[4] = lo_f32(v.z); f[5] = hi_f32(v.z);
    f[6] = lo_f32(v.w); f[7] = hi_f32(v.w);
}

__device__ __forceinline__ uint4 pack8(const float f[8]) {
    uint4 v;
    v.x = pack2(f[0], f[1]);
    v.y = pack2(f[2], f[3]);
    v.z = pack2(f[4], f[5]);
    v.w = pack2(f[6], f[7]);
    return v;
}

// Read-only 16-byte load through the non-coherent path.
__device__ __forceinline__ uint4 ldg16(const u16* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

__device__ __forceinline__ void stg16(u16* p, uint4 v) {
    *reinterpret_cast<uint4*>(p) = v;
}

__device__ __forceinline__ float ldg_f32(const u16* p) { return to_f32(__ldg(p)); }

// Exact GELU, as torch.nn.functional.gelu(approximate='none'): 0.5 x (1 + erf(x / sqrt 2)).
__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// GELU with Phi(x) = 0.5 erfc(-x / sqrt 2) from Abramowitz & Stegun 7.1.26 (|error| < 3e-7 in
// Phi, float arithmetic): branch-free, one reciprocal and one exp2 on the special-function unit.
// Rounded to fp16 it is within one unit of the float64 GELU everywhere (erff costs twice the
// instructions and is the fused MLP's bottleneck at C = 96).
__device__ __forceinline__ float gelu_as(float x) {
    const float z = fabsf(x) * 0.70710678118654752f;
    float t;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(fmaf(0.3275911f, z, 1.f)));
    float p = fmaf(t, 0.5f * 1.061405429f, 0.5f * -1.453152027f);
    p = fmaf(t, p, 0.5f * 1.421413741f);
    p = fmaf(t, p, 0.5f * -0.284496736f);
    p = fmaf(t, p, 0.5f * 0.254829592f);
    p *= t;
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(-z * z * LOG2E_F));
    const float tail = p * e;  // Phi(-|x|)
    return x * (x >= 0.f ? 1.f - tail : tail);
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

#define NEG_INF __uint_as_float(0xff800000u)

#endif  // FUSEPROF_COMMON_CUH
