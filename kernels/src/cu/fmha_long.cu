// fmha_long.cu: fmha_fwd_long, attention over sequences of any length on every sm_80+ GPU: the
// portable path, and on sm_90 the one for whatever the TMA kernels (fmha_sm90.cu) do not take
// (head_dim 32, a per-head bias, per-query masks).
//
// One CTA of 4 warps per (batch, head, 128-row query block); warp w owns query rows
// q0 + 16w + {0, 64} .. +15 (two m16 tiles), so every K / V fragment it loads (ldmatrix) feeds
// two mma.sync and the two tiles' softmax chains interleave. Keys come in blocks of 64 with an
// online softmax, by cp.async into a ring of LONG_RING stages: up to LONG_RING blocks are in
// flight from the start, each waited for by its own commit group, and a stage is refilled
// (behind a barrier) only when N has more blocks than stages. In the last block only the key
// tiles holding a key < N are computed. The per-key additive term (key-padding mask times
// log2 e, -inf past N) sits in a 64-float shared row per block, so no per-element key test
// remains; per-row bias / window masks (RowAdd) are read from global memory.
// Dynamic shared memory: Q [128][SROW], K and V [LONG_RING][64][SROW], kadd [LONG_RING][64] fp32.
//
// What bounds it (kernels/NOTES.md): at head_dim 64 it needs 255 registers, so 2 CTAs (8 warps)
// per SM, and the mma.sync -> max -> exp -> mma.sync chain of each warp is latency-bound with
// too few warps to switch to; on Hopper the wgmma kernels of fmha_sm90.cu take those calls.
#include "fmha_sm80.cuh"

#define LMT 2                      // m16 tiles per warp
#define LBM (NWARPS * 16 * LMT)    // query rows per CTA: 128
#define LONG_MIN_BLOCKS 2  // 2 CTAs per SM: up to 255 registers per thread
// Stages of the key-block ring (the launcher sizes shared memory from the same value): the
// double buffer. Three and four stages, and 32-key softmax steps inside a block (no spills at
// head_dim 64), measured no faster on ViT / BERT; commit e2b39b2 has them as LONG_RING and
// LONG_SUB.
#define LONG_RING 2

struct LongState {
    u32 qa[LMT][HEAD_DIM / 16][4];
    float o[LMT][HEAD_DIM / 8][4];
    float m[LMT][2];
    float l[LMT][2];
};

// Per-row additive terms of rows (row0, row0 + 8) at key c (bias [H, N, N], per-row mask rows).
struct RowAdd {
    const u16* bias;  // bias + h * N * N, or null
    const u16* mask;  // the mask entry of this batch, or null
    int stride;       // mask row stride
};

// One block of 64 keys (from key0) for the warp's first NT (1 or 2) m-tiles. n_jt: key tiles
// (of 8) holding a key < N. ra: per-row additive terms (ra.bias == ra.mask == null: none);
// qrow0: the warp's first row of m-tile 0 (+ g).
template <int NT, bool ROWADD>
__device__ __forceinline__ void long_block(LongState& st, const u16 (*Ks)[SROW], const u16 (*Vs)[SROW],
                                           const float* kadd, const RowAdd& ra, int qrow0, int N, int key0,
                                           int n_jt, float scale_log2, int tq, int lane) {
    const int mat = lane >> 3;
    float s[NT][BLOCK_N / 8][4];
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
#pragma unroll
        for (int mt = 0; mt < NT; ++mt) { s[mt][j][0] = 0.f; s[mt][j][1] = 0.f; s[mt][j][2] = 0.f; s[mt][j][3] = 0.f; }
        if (j < n_jt) {
#pragma unroll
            for (int kq = 0; kq < HEAD_DIM / 32; ++kq) {
                u32 kf[4];
                ldmatrix_x4(kf, smem_addr(&Ks[j * 8 + (lane & 7)][kq * 32 + mat * 8]));
#pragma unroll
                for (int mt = 0; mt < NT; ++mt) {
                    mma16816(s[mt][j], st.qa[mt][2 * kq], kf[0], kf[1]);
                    mma16816(s[mt][j], st.qa[mt][2 * kq + 1], kf[2], kf[3]);
                }
            }
        }
    }
    float bm[NT][2];
#pragma unroll
    for (int mt = 0; mt < NT; ++mt) { bm[mt][0] = NEG_INF; bm[mt][1] = NEG_INF; }
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        if (j < n_jt) {
            const int cl = j * 8 + 2 * tq;
            const float2 ka = *reinterpret_cast<const float2*>(&kadd[cl]);
#pragma unroll
            for (int mt = 0; mt < NT; ++mt) {
                float x[4] = {s[mt][j][0] * scale_log2 + ka.x, s[mt][j][1] * scale_log2 + ka.y,
                              s[mt][j][2] * scale_log2 + ka.x, s[mt][j][3] * scale_log2 + ka.y};
                if (ROWADD) {
                    const int c = key0 + cl;
                    // keys past N are -inf already (ka); keep the reads inside the row
                    const int cc[2] = {ka.x == NEG_INF ? 0 : c, ka.y == NEG_INF ? 0 : c + 1};
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        int row = qrow0 + mt * 64 + 8 * r;
                        row = row < N ? row : 0;
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            float a = 0.f;
                            if (ra.bias != nullptr) a += ldg_f32(ra.bias + (i64)row * N + cc[e]);
                            if (ra.mask != nullptr) a += ldg_f32(ra.mask + (i64)row * ra.stride + cc[e]);
                            x[2 * r + e] += a * LOG2E_F;
                        }
                    }
                }
                s[mt][j][0] = x[0]; s[mt][j][1] = x[1]; s[mt][j][2] = x[2]; s[mt][j][3] = x[3];
                bm[mt][0] = fmaxf(bm[mt][0], fmaxf(x[0], x[1]));
                bm[mt][1] = fmaxf(bm[mt][1], fmaxf(x[2], x[3]));
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < NT; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float v = bm[mt][r];
            v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
            v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
            // A row whose additive terms are all -inf so far keeps m = -inf and is rescaled by 1
            // (its l and o are 0); -inf - -inf would be NaN, so guard it.
            const float nm = fmaxf(st.m[mt][r], v);
            const float alpha = nm == NEG_INF ? 1.f : ex2_approx(st.m[mt][r] - nm);
            st.m[mt][r] = nm;
            bm[mt][r] = nm == NEG_INF ? 0.f : nm;  // the subtrahend for this block's exponentials
            st.l[mt][r] *= alpha;
#pragma unroll
            for (int j = 0; j < HEAD_DIM / 8; ++j) {
                st.o[mt][j][2 * r] *= alpha;
                st.o[mt][j][2 * r + 1] *= alpha;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        if (j < n_jt) {
#pragma unroll
            for (int mt = 0; mt < NT; ++mt) {
                s[mt][j][0] = ex2_approx(s[mt][j][0] - bm[mt][0]);
                s[mt][j][1] = ex2_approx(s[mt][j][1] - bm[mt][0]);
                s[mt][j][2] = ex2_approx(s[mt][j][2] - bm[mt][1]);
                s[mt][j][3] = ex2_approx(s[mt][j][3] - bm[mt][1]);
                st.l[mt][0] += s[mt][j][0] + s[mt][j][1];
                st.l[mt][1] += s[mt][j][2] + s[mt][j][3];
            }
        }
    }
    // O += P V, skipping 16-key steps whose P columns are all zero (past the valid tiles).
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        if (2 * kk < n_jt) {
            u32 pa[NT][4];
#pragma unroll
            for (int mt = 0; mt < NT; ++mt) {
                pa[mt][0] = pack2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
            const int key = kk * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
            for (int dt = 0; dt < HEAD_DIM / 16; ++dt) {
                u32 vb[4];
                ldmatrix_x4_trans(vb, smem_addr(&Vs[key][dt * 16 + (mat >> 1) * 8]));
#pragma unroll
                for (int mt = 0; mt < NT; ++mt) {
                    mma16816(st.o[mt][2 * dt], pa[mt], vb[0], vb[1]);
                    mma16816(st.o[mt][2 * dt + 1], pa[mt], vb[2], vb[3]);
                }
            }
        }
    }
}

// ROWADD is a template argument: a branch on it inside the unrolled tile loops split them into
// basic blocks the compiler did not schedule across (ViT 75 -> 94 us as a run-time test).
template <int NT>
__device__ __forceinline__ void long_block_dispatch(LongState& st, const u16 (*Ks)[SROW], const u16 (*Vs)[SROW],
                                                    const float* kadd, const RowAdd& ra, int qrow0, int N, int key0,
                                                    int n_jt, float scale_log2, int tq, int lane) {
    if (ra.bias != nullptr || ra.mask != nullptr) {  // per-row bias / mask: rare shapes, one variant
        long_block<NT, true>(st, Ks, Vs, kadd, ra, qrow0, N, key0, n_jt, scale_log2, tq, lane);
    } else if (n_jt == BLOCK_N / 8) {  // a whole block: the tile tests fold away
        long_block<NT, false>(st, Ks, Vs, kadd, ra, qrow0, N, key0, BLOCK_N / 8, scale_log2, tq, lane);
    } else {
        long_block<NT, false>(st, Ks, Vs, kadd, ra, qrow0, N, key0, n_jt, scale_log2, tq, lane);
    }
}

extern "C" __global__ void __launch_bounds__(NWARPS * 32, LONG_MIN_BLOCKS) fmha_fwd_long(FMHA_PARAMS) {
    constexpr int n_ring = LONG_RING;
    extern __shared__ __align__(16) u16 lsmem[];
    u16(*Qs)[SROW] = reinterpret_cast<u16(*)[SROW]>(lsmem);
    u16(*Kb)[BLOCK_N][SROW] = reinterpret_cast<u16(*)[BLOCK_N][SROW]>(lsmem + LBM * SROW);
    u16(*Vb)[BLOCK_N][SROW] = reinterpret_cast<u16(*)[BLOCK_N][SROW]>(lsmem + (LBM + n_ring * BLOCK_N) * SROW);
    float(*kadd)[BLOCK_N] = reinterpret_cast<float(*)[BLOCK_N]>(lsmem + (LBM + 2 * n_ring * BLOCK_N) * SROW);

    const int bid = blockIdx.x;
    const int qb = bid % n_qblocks;
    const int h = (bid / n_qblocks) % H;
    const int b = bid / (n_qblocks * H);
    if (b >= B) return;  // uniform for the whole CTA

    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const int q0 = qb * LBM;
    const int wrow = warp * 16;
    const int nt = (q0 + wrow < N) + (q0 + 64 + wrow < N);  // this warp's m-tiles holding a row < N

    // Key-padding mask: one value per key (mask_row_stride 0), into kadd; per-row masks and the
    // bias through RowAdd.
    RowAdd ra;
    const u16* kp = nullptr;
    {
        const i64 entry = mask_row_stride != 0 ? (i64)N * mask_row_stride : (i64)N;
        const u16* mbase = mask != nullptr ? mask + (i64)(b % n_mask) * entry : nullptr;
        kp = mask_row_stride == 0 ? mbase : nullptr;
        ra.bias = bias != nullptr ? bias + (i64)h * N * N : nullptr;
        ra.mask = mask_row_stride != 0 ? mbase : nullptr;
        ra.stride = mask_row_stride;
    }

    const int n_kblocks = (N + BLOCK_N - 1) / BLOCK_N;
    const int n_first = n_kblocks < n_ring ? n_kblocks : n_ring;
    load_tile_async(Qs, qkv, 0, b, h, N, H, q0);
    load_tile_async(Qs + 64, qkv, 0, b, h, N, H, q0 + 64);
    for (int kb = 0; kb < n_first; ++kb) {  // one commit group per block (Q rides with block 0)
        load_tile_async(Kb[kb], qkv, 1, b, h, N, H, kb * BLOCK_N);
        load_tile_async(Vb[kb], qkv, 2, b, h, N, H, kb * BLOCK_N);
        cp_async_commit();
    }
    if (threadIdx.x < BLOCK_N) {
        for (int kb = 0; kb < n_first; ++kb) kadd[kb][threadIdx.x] = key_add(kp, kb * BLOCK_N + threadIdx.x, N);
    }

    LongState st;
    for (int kb = 0; kb < n_kblocks; ++kb) {
        const int stage = kb % n_ring;
        const int issued = n_kblocks < kb + n_ring ? n_kblocks : kb + n_ring;  // blocks issued so far
        cp_async_wait_n(issued - kb - 1);
        __syncthreads();  // block kb (and its kadd row) visible to everyone
        if (kb == 0 && nt > 0) {
#pragma unroll
            for (int mt = 0; mt < LMT; ++mt) {
                load_a_frags(st.qa[mt], Qs, mt * 64 + wrow, g, tq);
                zero_acc(st.o[mt]);
                st.m[mt][0] = NEG_INF; st.m[mt][1] = NEG_INF;
                st.l[mt][0] = 0.f; st.l[mt][1] = 0.f;
            }
        }
        // The block's softmax step, a loop of one step: the straight-line form of the same code
        // compiles to other PTX than the code measured (NVRTC 13.0).
#pragma unroll
        for (int step = 0; step < 1; ++step) {
            const int key0 = kb * BLOCK_N;
            int n_jt = (N - key0 + 7) >> 3;  // key tiles of 8 holding a key < N
            if (n_jt <= 0) break;
            n_jt = n_jt < BLOCK_N / 8 ? n_jt : BLOCK_N / 8;
            const u16(*Ks)[SROW] = Kb[stage];
            const u16(*Vs)[SROW] = Vb[stage];
            const float* ka = kadd[stage];
            if (nt == 2) {
                long_block_dispatch<2>(st, Ks, Vs, ka, ra, q0 + wrow + g, N, key0, n_jt, scale_log2, tq, lane);
            } else if (nt == 1) {
                long_block_dispatch<1>(st, Ks, Vs, ka, ra, q0 + wrow + g, N, key0, n_jt, scale_log2, tq, lane);
            }
        }
        const int next = kb + n_ring;
        if (next < n_kblocks) {  // refill this stage: only when N has more blocks than stages
            __syncthreads();  // everyone is done with stage `stage`
            load_tile_async(Kb[stage], qkv, 1, b, h, N, H, next * BLOCK_N);
            load_tile_async(Vb[stage], qkv, 2, b, h, N, H, next * BLOCK_N);
            cp_async_commit();
            if (threadIdx.x < BLOCK_N) kadd[stage][threadIdx.x] = key_add(kp, next * BLOCK_N + threadIdx.x, N);
        }
    }
    cp_async_wait<0>();
    // Normalise, stage each m-tile in its own (consumed) Q rows, 16-byte stores.
#pragma unroll
    for (int mt = 0; mt < LMT; ++mt) {
        if (mt >= nt) break;
        store_tile(st.o[mt], st.l[mt][0], st.l[mt][1], Qs, mt * 64 + wrow, out, b, h, N, H, q0 + mt * 64 + wrow, g,
                   tq, lane);
    }
}

