// fmha.cuh: what every attention kernel shares (fmha_short.cu, fmha_long.cu, fmha_sm90.cu).
//
// Every kernel computes, per (batch b, head h),
//   out[t, h*D + :] = softmax(scale * q k^T + bias[h] + mask[b % n_mask]) v,
// reading q/k/v straight from the QKV linear's output layout [tokens, 3, heads, D] and writing
// [tokens, heads*D], so neither the permute before attention nor the transpose after remains.
// Tensor cores accumulate in fp32; the softmax runs in fp32 registers in the log2 domain
// (scores times scale * log2 e, then 2^x); bias and mask are added in fp32.
//
// Compile-time: HEAD_DIM (32 or 64: one module per head dim), FP_BF16 (common.cuh).
#ifndef FUSEPROF_FMHA_CUH
#define FUSEPROF_FMHA_CUH
#include "common.cuh"

#ifndef HEAD_DIM
#define HEAD_DIM 32
#endif

#define BLOCK_M 64  // query rows of a 4-warp tile (the short kernels' whole sequence)
#define BLOCK_N 64  // keys per block of the online softmax
#define NWARPS 4

// The parameters of fmha_fwd_short, fmha_fwd_long and the sm_90 kernels:
// qkv [B*N, 3, H, D]; out [B*N, H*D]; bias [H, N, N] or null; mask [n_mask, N or 1, N] or null,
// batch b using entry b % n_mask (mask_row_stride N: per-query rows; 0: one key row);
// scale_log2 = scale * log2 e; n_qblocks: query blocks per (batch, head).
#define FMHA_PARAMS                                                                                   \
    const u16 *__restrict__ qkv, u16 *__restrict__ out, const u16 *__restrict__ bias,                \
        const u16 *__restrict__ mask, int B, int N, int H, int n_mask, int mask_row_stride,          \
        float scale_log2, int n_qblocks

__device__ __forceinline__ float ex2_approx(float x) {  // 2^x; ex2.approx.ftz(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The additive value of key c times log2 e: the key-padding mask (or 0), -inf past N.
__device__ __forceinline__ float key_add(const u16* __restrict__ kp, int c, int N) {
    if (c >= N) return NEG_INF;
    return kp != nullptr ? ldg_f32(kp + c) * LOG2E_F : 0.f;
}

#endif  // FUSEPROF_FMHA_CUH
