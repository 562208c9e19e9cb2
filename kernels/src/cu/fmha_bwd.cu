// fmha_bwd.cu: the backward pass of fmha_short.cu's attention over at most 64 tokens (Swin's
// 7x7 windows, N = 49): dq, dk, dv and the gradient of the additive term.
//
// fmha_bwd_window: one CTA of 4 warps per (batch, head). A window's whole score matrix fits on
// chip, so nothing of the forward is saved but its inputs: the probabilities are recomputed
// from q, k and the additive term in one pass (no running maximum), as FlashAttention
// recomputes them from its row statistics. Warp w owns query rows 16w..16w+15 for
//   S = q k^T (mma), P = softmax(scale S + add), dP = dO v^T (mma),
//   dS = P (dP - rowsum(P dP)), dq = scale dS k (mma, dS from registers),
// and, after P and dS are staged in shared memory (16-bit), key rows 16w..16w+15 for
//   dv = P^T dO, dk = scale dS^T q (mma, P^T and dS^T by transposed ldmatrix).
// The additive term's gradient is dS itself, summed over the batch entries that share a term
// (entry b adds term b % n_add) by fp32 atomics into dadd [n_add, H, N, N] (zeroed by the
// caller; null: not needed). Rows past N are zero-filled on load, so they contribute nothing.
//
// Layouts: qkv and dqkv [B*N, 3, H, D]; dout [B*N, H*D] (the forward's out); add [n_add, H,
// N, add_stride] in q's dtype or null (fmha_add_combine's tensor: -inf past N).
#include "fmha_sm80.cuh"

#define PROW (BLOCK_N + 8)  // staged P / dS row stride: 144 bytes, 16-byte aligned rows

// Start copying dO rows of (batch b, head h) into shared memory, rows at or past N zero-filled.
__device__ __forceinline__ void load_dout_async(u16 (*dst)[SROW], const u16* __restrict__ dout, int b, int h,
                                                int N, int H) {
#pragma unroll
    for (int it = 0; it < BLOCK_M * DCH / (NWARPS * 32); ++it) {
        const int i = it * NWARPS * 32 + threadIdx.x;
        const int r = i / DCH;
        const int c = i - r * DCH;
        const bool ok = r < N;
        const i64 t = (i64)b * N + (ok ? r : 0);
        cp_async16(&dst[r][c * 8], dout + (t * H + h) * HEAD_DIM + c * 8, ok);
    }
}

// Rows row0 + g and row0 + g + 8 of one gradient (which: 0 q, 1 k, 2 v) times mul, 4-byte stores.
__device__ __forceinline__ void store_grad(const float (*acc)[4], float mul, u16* __restrict__ dqkv, int which,
                                           int b, int h, int N, int H, int row0, int g, int tq) {
    const int ra = row0 + g;
    const int rb = row0 + g + 8;
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 8; ++j) {
        const int col = j * 8 + 2 * tq;
        if (ra < N) {
            u16* p = dqkv + ((((i64)b * N + ra) * 3 + which) * H + h) * HEAD_DIM + col;
            *reinterpret_cast<u32*>(p) = pack2(acc[j][0] * mul, acc[j][1] * mul);
        }
        if (rb < N) {
            u16* p = dqkv + ((((i64)b * N + rb) * 3 + which) * H + h) * HEAD_DIM + col;
            *reinterpret_cast<u32*>(p) = pack2(acc[j][2] * mul, acc[j][3] * mul);
        }
    }
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Dynamic shared memory: q, k, v, dO tiles (64 rows of SROW) and the P, dS tiles (64 rows of PROW).
extern "C" __global__ void __launch_bounds__(NWARPS * 32)
    fmha_bwd_window(const u16* __restrict__ qkv, const u16* __restrict__ dout, const u16* __restrict__ add,
                    u16* __restrict__ dqkv, float* __restrict__ dadd, int B, int N, int H, int n_add,
                    int add_stride, float scale) {
    extern __shared__ __align__(16) u16 smem[];
    u16(*Qs)[SROW] = reinterpret_cast<u16(*)[SROW]>(smem);
    u16(*Ks)[SROW] = Qs + BLOCK_M;
    u16(*Vs)[SROW] = Ks + BLOCK_N;
    u16(*Ds)[SROW] = Vs + BLOCK_N;
    u16(*Ps)[PROW] = reinterpret_cast<u16(*)[PROW]>(Ds + BLOCK_M);
    u16(*Ss)[PROW] = Ps + BLOCK_M;

    const int h = blockIdx.x % H;
    const int b = blockIdx.x / H;
    if (b >= B) return;  // uniform for the whole CTA
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const int mat = lane >> 3;
    const int wrow = warp * 16;

    load_tile_async(Qs, qkv, 0, b, h, N, H, 0);
    load_tile_async(Ks, qkv, 1, b, h, N, H, 0);
    load_tile_async(Vs, qkv, 2, b, h, N, H, 0);
    load_dout_async(Ds, dout, b, h, N, H);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    const int r0 = wrow + g;
    const int r1 = wrow + g + 8;
    const bool ok0 = r0 < N;
    const bool ok1 = r1 < N;
    const i64 term = (i64)(b % n_add) * H + h;
    const u16* a0 = (add != nullptr && ok0) ? add + (term * N + r0) * add_stride : nullptr;
    const u16* a1 = (add != nullptr && ok1) ? add + (term * N + r1) * add_stride : nullptr;
    const float scale_log2 = scale * LOG2E_F;

    // S = q k^T for this warp's 16 rows and the 64 keys, then the logits in the log2 domain.
    u32 qa[HEAD_DIM / 16][4];
    load_a_frags(qa, Qs, wrow, g, tq);
    float p[BLOCK_N / 8][4];
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        p[j][0] = 0.f; p[j][1] = 0.f; p[j][2] = 0.f; p[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
            const u32 b0 = *reinterpret_cast<const u32*>(&Ks[j * 8 + g][kk * 16 + 2 * tq]);
            const u32 b1 = *reinterpret_cast<const u32*>(&Ks[j * 8 + g][kk * 16 + 2 * tq + 8]);
            mma16816(p[j], qa[kk], b0, b1);
        }
    }
    float m0 = NEG_INF, m1 = NEG_INF;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int c = j * 8 + 2 * tq + e;
            float x0 = NEG_INF, x1 = NEG_INF;
            if (c < N) {
                x0 = p[j][e] * scale_log2 + (a0 != nullptr ? ldg_f32(a0 + c) * LOG2E_F : 0.f);
                x1 = p[j][2 + e] * scale_log2 + (a1 != nullptr ? ldg_f32(a1 + c) * LOG2E_F : 0.f);
            }
            p[j][e] = x0;
            p[j][2 + e] = x1;
            m0 = fmaxf(m0, x0);
            m1 = fmaxf(m1, x1);
        }
    }
    m0 = quad_max(m0);
    m1 = quad_max(m1);
    // A row masked everywhere (-inf throughout) has no probability: 0, not NaN.
    if (m0 == NEG_INF) m0 = 0.f;
    if (m1 == NEG_INF) m1 = 0.f;
    float l0 = 0.f, l1 = 0.f;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        p[j][0] = exp2f(p[j][0] - m0);
        p[j][1] = exp2f(p[j][1] - m0);
        p[j][2] = exp2f(p[j][2] - m1);
        p[j][3] = exp2f(p[j][3] - m1);
        l0 += p[j][0] + p[j][1];
        l1 += p[j][2] + p[j][3];
    }
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f;
    const float inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        p[j][0] *= inv0; p[j][1] *= inv0;
        p[j][2] *= inv1; p[j][3] *= inv1;
    }

    // dP = dO v^T, then dS = P (dP - rowsum(P dP)) in place.
    u32 da[HEAD_DIM / 16][4];
    load_a_frags(da, Ds, wrow, g, tq);
    float ds[BLOCK_N / 8][4];
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        ds[j][0] = 0.f; ds[j][1] = 0.f; ds[j][2] = 0.f; ds[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
            const u32 b0 = *reinterpret_cast<const u32*>(&Vs[j * 8 + g][kk * 16 + 2 * tq]);
            const u32 b1 = *reinterpret_cast<const u32*>(&Vs[j * 8 + g][kk * 16 + 2 * tq + 8]);
            mma16816(ds[j], da[kk], b0, b1);
        }
    }
    float d0 = 0.f, d1 = 0.f;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        d0 += p[j][0] * ds[j][0] + p[j][1] * ds[j][1];
        d1 += p[j][2] * ds[j][2] + p[j][3] * ds[j][3];
    }
    d0 = quad_sum(d0);
    d1 = quad_sum(d1);
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        ds[j][0] = p[j][0] * (ds[j][0] - d0);
        ds[j][1] = p[j][1] * (ds[j][1] - d0);
        ds[j][2] = p[j][2] * (ds[j][2] - d1);
        ds[j][3] = p[j][3] * (ds[j][3] - d1);
    }

    // The additive term's gradient: dS, summed over the batch entries sharing the term.
    if (dadd != nullptr) {
        float* g0 = ok0 ? dadd + (term * N + r0) * N : nullptr;
        float* g1 = ok1 ? dadd + (term * N + r1) * N : nullptr;
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = j * 8 + 2 * tq + e;
                if (c < N) {
                    if (g0 != nullptr) atomicAdd(g0 + c, ds[j][e]);
                    if (g1 != nullptr) atomicAdd(g1 + c, ds[j][2 + e]);
                }
            }
        }
    }

    // P and dS to shared memory (16-bit) for the key-major products below.
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        const int c = j * 8 + 2 * tq;
        *reinterpret_cast<u32*>(&Ps[r0][c]) = pack2(p[j][0], p[j][1]);
        *reinterpret_cast<u32*>(&Ps[r1][c]) = pack2(p[j][2], p[j][3]);
        *reinterpret_cast<u32*>(&Ss[r0][c]) = pack2(ds[j][0], ds[j][1]);
        *reinterpret_cast<u32*>(&Ss[r1][c]) = pack2(ds[j][2], ds[j][3]);
    }

    // dq = scale dS k: the dS accumulators are the A operand (as P is for P v in the forward).
    float acc[HEAD_DIM / 8][4];
    zero_acc(acc);
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        u32 sa[4];
        sa[0] = pack2(ds[2 * kk][0], ds[2 * kk][1]);
        sa[1] = pack2(ds[2 * kk][2], ds[2 * kk][3]);
        sa[2] = pack2(ds[2 * kk + 1][0], ds[2 * kk + 1][1]);
        sa[3] = pack2(ds[2 * kk + 1][2], ds[2 * kk + 1][3]);
        const int key = kk * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
        for (int dt = 0; dt < HEAD_DIM / 16; ++dt) {
            u32 kb[4];
            ldmatrix_x4_trans(kb, smem_addr(&Ks[key][dt * 16 + (mat >> 1) * 8]));
            mma16816(acc[2 * dt], sa, kb[0], kb[1]);
            mma16816(acc[2 * dt + 1], sa, kb[2], kb[3]);
        }
    }
    store_grad(acc, scale, dqkv, 0, b, h, N, H, wrow, g, tq);
    __syncthreads();  // every warp's P and dS rows are staged

    // dv = P^T dO and dk = scale dS^T q for keys wrow..wrow+15: the A operands are 16 x 16
    // blocks of P^T and dS^T, read transposed from the staged rows (query-major).
    float dv[HEAD_DIM / 8][4];
    zero_acc(dv);
    zero_acc(acc);
#pragma unroll
    for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
        const int qrow = kk * 16 + (mat >> 1) * 8 + (lane & 7);
        const int kcol = wrow + (mat & 1) * 8;
        u32 pa[4], sa[4];
        ldmatrix_x4_trans(pa, smem_addr(&Ps[qrow][kcol]));
        ldmatrix_x4_trans(sa, smem_addr(&Ss[qrow][kcol]));
        const int q = kk * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
        for (int dt = 0; dt < HEAD_DIM / 16; ++dt) {
            u32 ob[4], qb[4];
            ldmatrix_x4_trans(ob, smem_addr(&Ds[q][dt * 16 + (mat >> 1) * 8]));
            mma16816(dv[2 * dt], pa, ob[0], ob[1]);
            mma16816(dv[2 * dt + 1], pa, ob[2], ob[3]);
            ldmatrix_x4_trans(qb, smem_addr(&Qs[q][dt * 16 + (mat >> 1) * 8]));
            mma16816(acc[2 * dt], sa, qb[0], qb[1]);
            mma16816(acc[2 * dt + 1], sa, qb[2], qb[3]);
        }
    }
    store_grad(acc, scale, dqkv, 1, b, h, N, H, wrow, g, tq);
    store_grad(dv, 1.f, dqkv, 2, b, h, N, H, wrow, g, tq);
}
