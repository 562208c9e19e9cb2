// fmha_sm80.cuh: a warp's 16 query rows in the mma.sync attention kernels (fmha_short.cu,
// fmha_long.cu).
//
// Tiles of 64 rows sit in shared memory with rows padded to SROW elements (16 bytes more than
// a row, so ldmatrix and the fragment loads are free of bank conflicts), loaded by cp.async with
// rows past N zero-filled. A warp owns 16 query rows: their Q fragments (A operand of q k^T),
// the fp32 O accumulators in the mma.sync C layout (o[j][0, 1]: row g, columns 8j + 2tq + {0, 1};
// o[j][2, 3]: row g + 8), and the running max and sum of rows g and g + 8 (g = lane / 4,
// tq = lane % 4). The output is normalised, staged in the warp's own (consumed) Q rows and
// written with 16-byte stores.
#ifndef FUSEPROF_FMHA_SM80_CUH
#define FUSEPROF_FMHA_SM80_CUH
#include "fmha.cuh"
#include "mma_sm80.cuh"

#define SROW (HEAD_DIM + 8)  // shared-memory row stride in elements: +16 bytes against bank conflicts
#define DCH (HEAD_DIM / 8)    // 16-byte chunks per row

// Start copying rows [row0, row0 + 64) of q, k or v (which = 0, 1, 2) of (batch b, head h) into
// shared memory; rows at or past N are zero-filled so padded keys and values stay finite.
__device__ __forceinline__ void load_tile_async(u16 (*dst)[SROW], const u16* __restrict__ qkv, int which,
                                                int b, int h, int N, int H, int row0) {
#pragma unroll
    for (int it = 0; it < BLOCK_M * DCH / (NWARPS * 32); ++it) {
        const int i = it * NWARPS * 32 + threadIdx.x;
        const int r = i / DCH;
        const int c = i - r * DCH;
        const int row = row0 + r;
        const bool ok = row < N;
        const i64 t = (i64)b * N + (ok ? row : 0);
        cp_async16(&dst[r][c * 8], qkv + ((t * 3 + which) * H + h) * HEAD_DIM + c * 8, ok);
    }
}

struct WarpState {
    u32 qa[HEAD_DIM / 16][4];
    float o[HEAD_DIM / 8][4];
    float m0, m1, l0, l1;
};

// A-operand fragments (q k^T) of the 16 rows srow.. of Qs.
__device__ __forceinline__ void load_a_frags(u32 (*qa)[4], const u16 (*Qs)[SROW], int srow, int g, int tq) {
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        qa[kk][0] = *reinterpret_cast<const u32*>(&Qs[srow + g][kk * 16 + 2 * tq]);
        qa[kk][1] = *reinterpret_cast<const u32*>(&Qs[srow + g + 8][kk * 16 + 2 * tq]);
        qa[kk][2] = *reinterpret_cast<const u32*>(&Qs[srow + g][kk * 16 + 2 * tq + 8]);
        qa[kk][3] = *reinterpret_cast<const u32*>(&Qs[srow + g + 8][kk * 16 + 2 * tq + 8]);
    }
}

__device__ __forceinline__ void zero_acc(float (*o)[4]) {
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 8; ++j) {
        o[j][0] = 0.f; o[j][1] = 0.f; o[j][2] = 0.f; o[j][3] = 0.f;
    }
}

__device__ __forceinline__ void load_q_frags(WarpState& st, const u16 (*Qs)[SROW], int wrow, int g, int tq) {
    load_a_frags(st.qa, Qs, wrow, g, tq);
    zero_acc(st.o);
    st.m0 = NEG_INF; st.m1 = NEG_INF;
    st.l0 = 0.f; st.l1 = 0.f;
}

// Normalise and store one 16-row tile: staged in its own (consumed) Q rows srow.., then 16-byte
// stores to out[t, h*D : (h+1)*D] for its rows row0.. that are < N. o, l0, l1: the tile's
// accumulators and (per-thread partial) softmax sums of rows g and g + 8.
__device__ __forceinline__ void store_tile(const float (*o)[4], float l0, float l1, u16 (*Qs)[SROW], int srow,
                                           u16* __restrict__ out, int b, int h, int N, int H, int row0, int g,
                                           int tq, int lane) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.f / l0;
    const float inv1 = 1.f / l1;
    __syncwarp();
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 8; ++j) {
        *reinterpret_cast<u32*>(&Qs[srow + g][j * 8 + 2 * tq]) = pack2(o[j][0] * inv0, o[j][1] * inv0);
        *reinterpret_cast<u32*>(&Qs[srow + g + 8][j * 8 + 2 * tq]) = pack2(o[j][2] * inv1, o[j][3] * inv1);
    }
    __syncwarp();
#pragma unroll
    for (int i = lane; i < 16 * DCH; i += 32) {
        const int r = i / DCH;
        const int c = i - r * DCH;
        const int row = row0 + r;
        if (row < N) {
            const i64 t = (i64)b * N + row;
            stg16(out + (t * H + h) * HEAD_DIM + c * 8, *reinterpret_cast<const uint4*>(&Qs[srow + r][c * 8]));
        }
    }
}

// This warp's 16 rows (staged at wrow, query rows q0 + wrow..).
__device__ __forceinline__ void store_rows(WarpState& st, u16 (*Qs)[SROW], u16* __restrict__ out, int b,
                                           int h, int N, int H, int q0, int wrow, int g, int tq, int lane) {
    store_tile(st.o, st.l0, st.l1, Qs, wrow, out, b, h, N, H, q0 + wrow, g, tq, lane);
}

#endif  // FUSEPROF_FMHA_SM80_CUH
