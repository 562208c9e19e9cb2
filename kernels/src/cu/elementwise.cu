// elementwise.cu: bias + residual add, bias + activation, and the zero-padding copy.
//
// bias_residual_vec: out[r, c] = x[r, c] + bias[c] + res[r, c] with 16-byte accesses: each thread
//   handles VPT vectors of 8 elements, all loads issued before the first use. Sums in fp32,
//   rounded once. Needs cols % 8 == 0 and 16-byte aligned pointers; `_scalar` takes anything.
// bias_act_vec: out = act(x + bias) with act 0 = identity, 1 = exact (erf) GELU; bias may be null.
//   Used after a cuBLASLt GEMM to give an exact-GELU epilogue.
// pad_copy_vec: dst[b, r, c] = src[b, r, c] inside the source extent, 0 outside: pads GEMM
//   operands to multiples of 8 (dst cols % 8 == 0).
#include "common.cuh"

// Vectors per thread and threads per block of the vector kernels (the Rust launcher uses the
// same values): 4 x 128 beat 2 x 256 by ~2% on [200704, 96] (H100); streaming cache hints on the
// loads and stores were no faster (commit e2b39b2 has them as EW_STREAM).
#define VPT 4
#define EW_THREADS 128

extern "C" __global__ void __launch_bounds__(EW_THREADS)
bias_residual_vec(const u16* __restrict__ x, const u16* __restrict__ bias,
                  const u16* __restrict__ res, u16* out, i64 n_vec, int cols_vec) {
    const i64 base = (i64)blockIdx.x * (blockDim.x * VPT) + threadIdx.x;
    uint4 xv[VPT], rv[VPT], bv[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const i64 i = base + (i64)k * blockDim.x;
        if (i < n_vec) {
            xv[k] = ldg16(x + i * 8);
            rv[k] = ldg16(res + i * 8);
            bv[k] = ldg16(bias + ((unsigned)i % (unsigned)cols_vec) * 8);  // host: n_vec < 2^31
        }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const i64 i = base + (i64)k * blockDim.x;
        if (i < n_vec) {
            float a[8], r[8], bb[8];
            unpack8(xv[k], a);
            unpack8(rv[k], r);
            unpack8(bv[k], bb);
#pragma unroll
            for (int e = 0; e < 8; ++e) a[e] = a[e] + bb[e] + r[e];
            stg16(out + i * 8, pack8(a));
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
bias_residual_scalar(const u16* __restrict__ x, const u16* __restrict__ bias,
                     const u16* __restrict__ res, u16* out, i64 n, int cols) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        out[i] = from_f32(ldg_f32(x + i) + ldg_f32(bias + i % cols) + ldg_f32(res + i));
    }
}

__device__ __forceinline__ float activate(float v, int act) { return act == 1 ? gelu_erf(v) : v; }

extern "C" __global__ void __launch_bounds__(EW_THREADS)
bias_act_vec(const u16* x, const u16* __restrict__ bias, u16* out, i64 n_vec, int cols_vec, int act) {
    const i64 base = (i64)blockIdx.x * (blockDim.x * VPT) + threadIdx.x;
    uint4 xv[VPT], bv[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const i64 i = base + (i64)k * blockDim.x;
        if (i < n_vec) {
            xv[k] = *reinterpret_cast<const uint4*>(x + i * 8);  // may alias out (in place)
            bv[k] = bias != nullptr ? ldg16(bias + ((unsigned)i % (unsigned)cols_vec) * 8) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const i64 i = base + (i64)k * blockDim.x;
        if (i < n_vec) {
            float a[8], bb[8];
            unpack8(xv[k], a);
            unpack8(bv[k], bb);
#pragma unroll
            for (int e = 0; e < 8; ++e) a[e] = activate(a[e] + bb[e], act);
            stg16(out + i * 8, pack8(a));
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
bias_act_scalar(const u16* x, const u16* __restrict__ bias, u16* out, i64 n, int cols, int act) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const float b = bias != nullptr ? ldg_f32(bias + i % cols) : 0.f;
        out[i] = from_f32(activate(to_f32(x[i]) + b, act));
    }
}

extern "C" __global__ void __launch_bounds__(256)
pad_copy_vec(const u16* __restrict__ src, u16* __restrict__ dst, i64 batch, int rows, int cols,
             i64 src_batch_stride, int ld_src, int rows_dst, int cols_dst) {
    const int cv = cols_dst / 8;
    const i64 n_vec = batch * rows_dst * cv;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n_vec; i += (i64)gridDim.x * blockDim.x) {
        const unsigned br = (unsigned)i / cv;  // host: n_vec < 2^31
        const int c0 = (int)((unsigned)i - br * cv) * 8;
        const unsigned b = br / rows_dst;
        const int r = (int)(br - b * rows_dst);
        const u16* s = src + (i64)b * src_batch_stride + (i64)r * ld_src;
        u32 w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int c = c0 + 2 * e;
            const u32 lo = (r < rows && c < cols) ? (u32)__ldg(s + c) : 0u;
            const u32 hi = (r < rows && c + 1 < cols) ? (u32)__ldg(s + c + 1) : 0u;
            w[e] = lo | (hi << 16);  // raw bits: the copy is exact for any dtype of 16 bits
        }
        stg16(dst + i * 8, make_uint4(w[0], w[1], w[2], w[3]));
    }
}
