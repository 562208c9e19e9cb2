// fmha_sm90.cuh: the warpgroup side of the Hopper attention kernels (fmha_sm90.cu).
//
// A CTA is two warpgroups (256 threads); each owns 64 query rows. S = Q K^T is a chain of
// m64nNk16 wgmma with Q and K read from 128-byte-swizzled shared tiles; the softmax runs in
// registers, where a warp's share of S has the mma.sync C layout (s[4j + 0, 1]: row g, keys
// 8j + 2tq + {0, 1}; s[4j + 2, 3]: row g + 8); O += P V takes P from registers and V from shared
// memory. Here: the per-thread state, the block step (S, online softmax, P V) with its shape
// dispatch, the persistent item cursor and the output store.
#ifndef FUSEPROF_FMHA_SM90_CUH
#define FUSEPROF_FMHA_SM90_CUH
#include "fmha.cuh"
#include "wgmma_sm90.cuh"

#define WG_THREADS 256
#define WG_TILE 8192  // bytes of one 64-row x 64-column tile
#define WG_BM 128     // query rows per item: two warpgroups x 64
// Minimum resident CTAs per SM asked of the compiler: 2 caps registers at 128 (S and O
// accumulators are 32 each, P 16).
#define WG_MIN_BLOCKS 2

struct WgState {
    float o[32];  // O accumulators: o[4j + 0, 1] row g, columns 8j + 2tq + {0, 1}; o[4j + 2, 3] row g + 8
    float m0, m1, l0, l1;  // running max (log2 units, scaled) and partial sums of rows g, g + 8
};

// S = Q K^T for this warpgroup's 64 rows and NK keys (16, 32 or 64), issued and committed, not
// waited for: four k16 steps over head_dim, each 32 bytes along a 128-byte-swizzled row (a
// descriptor step of 2). qd, kd: descriptors of the Q and K tiles. s is cleared first; the
// first k-step ignores the accumulators anyway (scale-d = 0).
template <int NK>
__device__ __forceinline__ void wg_s_issue(float* s, u64 qd, u64 kd) {
#pragma unroll
    for (int i = 0; i < NK / 2; ++i) s[i] = 0.f;
    wg_fence_acc<NK / 2>(s);
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < HEAD_DIM / 16; ++t) wgmma_ss<NK>(s, wg_desc_add(qd, t * 2), wg_desc_add(kd, t * 2), t);
    wgmma_commit();
}

// The maxima of rows g and g + 8 of this warp's 16 over NK scores in s (the mma.sync C layout:
// s[4j + 0, 1] row g, keys 8j + 2tq + {0, 1}; s[4j + 2, 3] row g + 8), across the row's four
// lanes. kadd_on: the scores are first scaled and given their per-key terms kadd, in place.
template <int NK>
__device__ __forceinline__ void wg_row_max(float* s, const float* kadd, float scale_log2, int tq, bool kadd_on,
                                           float& bm0, float& bm1) {
    bm0 = NEG_INF;
    bm1 = NEG_INF;
#pragma unroll
    for (int j = 0; j < NK / 8; ++j) {
        if (kadd_on) {
            const float2 ka = *reinterpret_cast<const float2*>(&kadd[j * 8 + 2 * tq]);
            s[4 * j + 0] = fmaf(s[4 * j + 0], scale_log2, ka.x);
            s[4 * j + 1] = fmaf(s[4 * j + 1], scale_log2, ka.y);
            s[4 * j + 2] = fmaf(s[4 * j + 2], scale_log2, ka.x);
            s[4 * j + 3] = fmaf(s[4 * j + 3], scale_log2, ka.y);
        }
        bm0 = fmaxf(bm0, fmaxf(s[4 * j + 0], s[4 * j + 1]));
        bm1 = fmaxf(bm1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
    bm0 = fmaxf(bm0, __shfl_xor_sync(0xffffffffu, bm0, 1));
    bm0 = fmaxf(bm0, __shfl_xor_sync(0xffffffffu, bm0, 2));
    bm1 = fmaxf(bm1, __shfl_xor_sync(0xffffffffu, bm1, 1));
    bm1 = fmaxf(bm1, __shfl_xor_sync(0xffffffffu, bm1, 2));
}

// The online softmax of a block's S (complete in s) and O += P V issued and committed, not
// waited for (vd: the V tile's descriptor). KADD: add the block's per-key terms kadd (the
// key-padding mask, -inf past N); without them the scale folds into the exponent's FFMA. keep:
// what o and l are scaled by when a row's max is still -inf (0 on an item's first block, which
// also clears the previous item's state, else 1). pre_pv(): run before P V is issued (the wait
// for the V tile, which has a barrier of its own so that S need not wait for it).
template <int NK, bool KADD, class PrePv>
__device__ __forceinline__ void wg_softmax_pv(WgState& st, float* s, u64 vd, const float* kadd, float scale_log2,
                                              int tq, float keep, PrePv&& pre_pv) {
    wg_fence_acc<NK / 2>(s);
    // Online softmax on rows g and g + 8 of this warp's 16.
    float bm0, bm1;
    wg_row_max<NK>(s, kadd, scale_log2, tq, KADD, bm0, bm1);
    if (!KADD) {  // raw maxima; scale_log2 > 0
        bm0 *= scale_log2;
        bm1 *= scale_log2;
    }
    const float n0 = fmaxf(st.m0, bm0), n1 = fmaxf(st.m1, bm1);
    // A row whose terms are all -inf so far keeps m = -inf, is scaled by `keep` and subtracts 0
    // (its l and o stay 0).
    const float a0 = n0 == NEG_INF ? keep : ex2_approx(st.m0 - n0);
    const float a1 = n1 == NEG_INF ? keep : ex2_approx(st.m1 - n1);
    st.m0 = n0;
    st.m1 = n1;
    const float sub0 = n0 == NEG_INF ? 0.f : n0, sub1 = n1 == NEG_INF ? 0.f : n1;
    st.l0 *= a0;
    st.l1 *= a1;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        st.o[4 * j + 0] *= a0; st.o[4 * j + 1] *= a0;
        st.o[4 * j + 2] *= a1; st.o[4 * j + 3] *= a1;
    }
#pragma unroll
    for (int j = 0; j < NK / 8; ++j) {
        if (KADD) {
            s[4 * j + 0] = ex2_approx(s[4 * j + 0] - sub0);
            s[4 * j + 1] = ex2_approx(s[4 * j + 1] - sub0);
            s[4 * j + 2] = ex2_approx(s[4 * j + 2] - sub1);
            s[4 * j + 3] = ex2_approx(s[4 * j + 3] - sub1);
        } else {
            s[4 * j + 0] = ex2_approx(fmaf(s[4 * j + 0], scale_log2, -sub0));
            s[4 * j + 1] = ex2_approx(fmaf(s[4 * j + 1], scale_log2, -sub0));
            s[4 * j + 2] = ex2_approx(fmaf(s[4 * j + 2], scale_log2, -sub1));
            s[4 * j + 3] = ex2_approx(fmaf(s[4 * j + 3], scale_log2, -sub1));
        }
        st.l0 += s[4 * j + 0] + s[4 * j + 1];
        st.l1 += s[4 * j + 2] + s[4 * j + 3];
    }
    // O += P V: one k16 step per 16 keys (2 row groups = 2048 bytes each).
    u32 pa[NK / 16][4];
#pragma unroll
    for (int kk = 0; kk < NK / 16; ++kk) {
        pa[kk][0] = pack2(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = pack2(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = pack2(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = pack2(s[8 * kk + 6], s[8 * kk + 7]);
    }
    pre_pv();
    wg_fence_acc<32>(st.o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NK / 16; ++kk) wgmma_rs_tb(st.o, pa[kk], wg_desc_add(vd, kk * 128));
    wgmma_commit();
}

// One whole block: S, wait, softmax, P V, wait. mid(): run while S is in flight (the producer's
// work, so that the other warps of its warpgroup do not wait for it at the first wgmma);
// pre_pv: see wg_softmax_pv.
template <int NK, bool KADD, class Mid, class PrePv>
__device__ __forceinline__ void wg_block(WgState& st, u64 qd, u64 kd, u64 vd, const float* kadd, float scale_log2,
                                         int tq, float keep, Mid&& mid, PrePv&& pre_pv) {
    float s[NK / 2];
    wg_s_issue<NK>(s, qd, kd);
    mid();
    wgmma_wait0();
    wg_softmax_pv<NK, KADD>(st, s, vd, kadd, scale_log2, tq, keep, pre_pv);
    wgmma_wait0();
    wg_fence_acc<32>(st.o);
}

template <int V>
struct WgInt {
    static constexpr int value = V;
};

// Call f(WgInt<NK>, WgInt<KADD>) with the shape of a block holding `keys` keys < N: NK 16 / 32
// for a short last block (ViT's last block holds 5 keys: an m64n16 S and one P V step instead
// of the whole 64), else 64; KADD 1 when the per-key terms apply (a key mask, keys past N, or a
// scale the folded exponent cannot take).
template <class F>
__device__ __forceinline__ void wg_dispatch(int keys, bool masked, float scale_log2, F&& f) {
    if (keys <= 16) {
        f(WgInt<16>(), WgInt<1>());
    } else if (keys <= 32) {
        f(WgInt<32>(), WgInt<1>());
    } else if (keys < BLOCK_N || masked || !(scale_log2 > 0.f)) {
        f(WgInt<64>(), WgInt<1>());
    } else {
        f(WgInt<64>(), WgInt<0>());
    }
}

// The `keep` factor of a block (0 on an item's first block, which starts the rows afresh).
__device__ __forceinline__ float wg_start_block(WgState& st, bool first) {
    if (first) {
        st.m0 = NEG_INF;
        st.m1 = NEG_INF;
    }
    return first ? 0.f : 1.f;
}

// Where the CTA is in its item sequence: key block kb of item (b, h, qb). next() steps one key
// block; past the last one it moves gridDim.x items on (gq, gh, gb: gridDim.x in the same radix).
struct WgCursor {
    int kb, qb, h, b;
    // This CTA's first item, and gridDim.x in (qb, h, b) radix (gq, gh, gb).
    __device__ __forceinline__ static WgCursor first(int nq, int H, int& gq, int& gh, int& gb) {
        const int G = gridDim.x;
        gq = G % nq;
        gh = (G / nq) % H;
        gb = G / (nq * H);
        WgCursor c;
        c.kb = 0;
        c.qb = blockIdx.x % nq;
        c.h = (blockIdx.x / nq) % H;
        c.b = blockIdx.x / (nq * H);
        return c;
    }
    __device__ __forceinline__ bool next(int nkb, int nq, int H, int gq, int gh, int gb) {
        if (++kb < nkb) return false;
        kb = 0;
        qb += gq;
        h += gh;
        b += gb;
        if (qb >= nq) { qb -= nq; ++h; }
        if (h >= H) { h -= H; ++b; }
        return true;
    }
};

// Normalise this warp's 16 rows and store them: staged in the warp's own 2 KiB of its (consumed)
// Q tile, rows of 128 bytes with the 16-byte chunks XOR-swizzled by row (conflict-free both
// ways), then 16-byte stores of the rows < N.
__device__ __forceinline__ void wg_store(const WgState& st, unsigned char* sp, u16* __restrict__ out, int b, int h,
                                         int N, int H, int row0, int g, int tq, int lane) {
    float l0 = st.l0, l1 = st.l1;
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.f / l0, inv1 = 1.f / l1;
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // after wgmma's reads of the tile
    __syncwarp();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int off = ((j ^ g) << 4) + 4 * tq;
        *reinterpret_cast<u32*>(sp + g * 128 + off) = pack2(st.o[4 * j + 0] * inv0, st.o[4 * j + 1] * inv0);
        *reinterpret_cast<u32*>(sp + (g + 8) * 128 + off) = pack2(st.o[4 * j + 2] * inv1, st.o[4 * j + 3] * inv1);
    }
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int i = k * 32 + lane;
        const int r = i >> 3, c = i & 7;
        const int row = row0 + r;
        if (row < N) {
            const i64 t = (i64)b * N + row;
            stg16(out + (t * H + h) * HEAD_DIM + c * 8,
                  *reinterpret_cast<const uint4*>(sp + r * 128 + ((c ^ (r & 7)) << 4)));
        }
    }
    // The tile is a TMA destination again later: order these generic accesses before it.
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#endif  // FUSEPROF_FMHA_SM90_CUH
