// fmha_short.cu: attention over sequences of at most 64 tokens (Swin's 7x7 windows, N = 49),
// one 64-key block, so a plain (not online) softmax. Layouts and the function: fmha.cuh.
//
// Launch shapes: fmha_fwd_window 128 threads x the resident CTAs (at most batch x heads), dynamic
// shared memory of two stages (q, k, v of 64 padded rows and the additive tile each);
// fmha_fwd_short 128 threads x (batch x heads), static shared memory; fmha_add_combine 256
// threads, grid-stride.
//
// fmha_fwd_window: the fast path, for a precombined additive tensor or none. Persistent CTAs
//   of 4 warps (the grid is the resident CTAs) stride over the (batch, head) items; each item's
//   q, k, v rows and its additive tile travel by cp.async into one of two shared-memory stages
//   while the CTA computes the previous item from the other stage, so DRAM always has the next
//   item's loads in flight; one barrier per item. Each warp owns 16 query rows. Bound by the
//   issue of its instruction stream and the latency of its mma -> max -> exp -> mma chain at 4
//   CTAs per SM, not by DRAM (61% of copy bandwidth on the H100; kernels/NOTES.md).
// fmha_add_combine: the additive tensor fmha_fwd_window reads, made once per layer (bias and
//   window mask are constants of the layer): add[e, h, r, c] = bias[h, r, c] + mask[e, r, c] for
//   c < N, -inf for N <= c < NP (N rounded up to 8, so rows are whole 16-byte chunks), rounded
//   once to 16 bits. The -inf columns mask the padded keys: no per-element key test remains.
// fmha_fwd_short: separate bias and mask, or a key-padding mask. One CTA of 4 warps per
//   (batch, head); q/k/v land by cp.async (rows past N zero-filled) while the CTA sums bias and
//   mask into an fp32 tile in shared memory with coalesced loads.
#include "fmha_sm80.cuh"

#define ADD_STRIDE (BLOCK_N + 8)  // fp32 additive tile row stride (conflict-free 8-byte reads)

// One 64-key block for this warp's 16 rows. The additive term (bias + mask, already times
// log2 e) comes from the shared tile `add` (rows relative to the tile, may be null) or from
// global rows (add_g*, may be null); keys >= N get -inf.
__device__ __forceinline__ void attend_block(WarpState& st, const u16 (*Ks)[SROW], const u16 (*Vs)[SROW],
                                             const float (*add)[ADD_STRIDE], int arow, bool r0_ok, bool r1_ok,
                                             const u16* ab0, const u16* ab1, const u16* am0, const u16* am1,
                                             int kb, int N, float scale_log2, int g, int tq, int lane) {
    float s[BLOCK_N / 8][4];
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        s[j][0] = 0.f; s[j][1] = 0.f; s[j][2] = 0.f; s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
            const u32 b0 = *reinterpret_cast<const u32*>(&Ks[j * 8 + g][kk * 16 + 2 * tq]);
            const u32 b1 = *reinterpret_cast<const u32*>(&Ks[j * 8 + g][kk * 16 + 2 * tq + 8]);
            mma16816(s[j], st.qa[kk], b0, b1);
        }
    }
    float bm0 = NEG_INF, bm1 = NEG_INF;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        const int cl = j * 8 + 2 * tq;  // key within the block
        float a00 = 0.f, a01 = 0.f, a10 = 0.f, a11 = 0.f;
        if (add != nullptr) {
            if (r0_ok) { const float2 v = *reinterpret_cast<const float2*>(&add[arow][cl]); a00 = v.x; a01 = v.y; }
            if (r1_ok) { const float2 v = *reinterpret_cast<const float2*>(&add[arow + 8][cl]); a10 = v.x; a11 = v.y; }
        }
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int c = kb * BLOCK_N + cl + e;
            float x0 = s[j][e] * scale_log2 + (e ? a01 : a00);
            float x1 = s[j][2 + e] * scale_log2 + (e ? a11 : a10);
            if (c < N) {
                if (ab0 != nullptr) { x0 += ldg_f32(ab0 + c) * LOG2E_F; x1 += ldg_f32(ab1 + c) * LOG2E_F; }
                if (am0 != nullptr) { x0 += ldg_f32(am0 + c) * LOG2E_F; x1 += ldg_f32(am1 + c) * LOG2E_F; }
            } else {
                x0 = NEG_INF;
                x1 = NEG_INF;
            }
            s[j][e] = x0;
            s[j][2 + e] = x1;
            bm0 = fmaxf(bm0, x0);
            bm1 = fmaxf(bm1, x1);
        }
    }
    bm0 = fmaxf(bm0, __shfl_xor_sync(0xffffffffu, bm0, 1));
    bm0 = fmaxf(bm0, __shfl_xor_sync(0xffffffffu, bm0, 2));
    bm1 = fmaxf(bm1, __shfl_xor_sync(0xffffffffu, bm1, 1));
    bm1 = fmaxf(bm1, __shfl_xor_sync(0xffffffffu, bm1, 2));
    // Every key block holds at least one key < N, so the new maxima are finite.
    const float nm0 = fmaxf(st.m0, bm0);
    const float nm1 = fmaxf(st.m1, bm1);
    const float alpha0 = exp2f(st.m0 - nm0);  // 0 on the first block (m = -inf)
    const float alpha1 = exp2f(st.m1 - nm1);
    st.m0 = nm0;
    st.m1 = nm1;
    st.l0 *= alpha0;
    st.l1 *= alpha1;
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 8; ++j) {
        st.o[j][0] *= alpha0; st.o[j][1] *= alpha0;
        st.o[j][2] *= alpha1; st.o[j][3] *= alpha1;
    }
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        s[j][0] = exp2f(s[j][0] - nm0);
        s[j][1] = exp2f(s[j][1] - nm0);
        s[j][2] = exp2f(s[j][2] - nm1);
        s[j][3] = exp2f(s[j][3] - nm1);
        st.l0 += s[j][0] + s[j][1];
        st.l1 += s[j][2] + s[j][3];
    }
    // O += P V: the S accumulator layout is the A-operand layout of the next mma.
    const int mat = lane >> 3;
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        u32 pa[4];
        pa[0] = pack2(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = pack2(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const int key = kk * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
        for (int dt = 0; dt < HEAD_DIM / 16; ++dt) {
            u32 vb[4];
            ldmatrix_x4_trans(vb, smem_addr(&Vs[key][dt * 16 + (mat >> 1) * 8]));
            mma16816(st.o[2 * dt], pa, vb[0], vb[1]);
            mma16816(st.o[2 * dt + 1], pa, vb[2], vb[3]);
        }
    }
}

// qkv [B*N, 3, H, D]; out [B*N, H*D]; bias [H, N, N] or null; mask [n_mask, N or 1, N] or null,
// batch b using entry b % n_mask (mask_row_stride N: per-query rows; 0: one key row).
extern "C" __global__ void __launch_bounds__(NWARPS * 32) fmha_fwd_short(FMHA_PARAMS) {
    __shared__ __align__(16) u16 Qs[BLOCK_M][SROW];
    __shared__ __align__(16) u16 Ks[BLOCK_N][SROW];
    __shared__ __align__(16) u16 Vs[BLOCK_N][SROW];
    __shared__ __align__(16) float Add[BLOCK_M][ADD_STRIDE];

    const int h = blockIdx.x % H;  // N <= 64: one query block per (batch, head)
    const int b = blockIdx.x / H;
    if (b >= B) return;  // uniform for the whole CTA
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const int wrow = warp * 16;

    load_tile_async(Qs, qkv, 0, b, h, N, H, 0);
    load_tile_async(Ks, qkv, 1, b, h, N, H, 0);
    load_tile_async(Vs, qkv, 2, b, h, N, H, 0);
    cp_async_commit();

    // While q/k/v are in flight: bias[h] + mask[b % n_mask] into an fp32 tile, times log2 e.
    const bool has_add = bias != nullptr || mask != nullptr;
    if (has_add) {
        const u16* bh = bias != nullptr ? bias + (i64)h * N * N : nullptr;
        const u16* mw = nullptr;
        if (mask != nullptr) {
            const i64 entry = mask_row_stride != 0 ? (i64)N * mask_row_stride : (i64)N;
            mw = mask + (i64)(b % n_mask) * entry;
        }
        // A plain loop: 20 loads per thread in flight ran 1.8x slower (kernels/NOTES.md), most
        // likely by crowding out the q/k/v cp.async traffic.
        for (int i = threadIdx.x; i < N * N; i += NWARPS * 32) {
            const int r = i / N;
            const int c = i - r * N;
            float v = 0.f;
            if (bh != nullptr) v += ldg_f32(bh + i);
            if (mw != nullptr) v += ldg_f32(mw + (i64)r * mask_row_stride + c);
            Add[r][c] = v * LOG2E_F;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (wrow >= N) return;  // whole warp past N (no barrier follows)

    WarpState st;
    load_q_frags(st, Qs, wrow, g, tq);
    attend_block(st, Ks, Vs, has_add ? Add : nullptr, wrow + g, wrow + g < N, wrow + g + 8 < N, nullptr,
                 nullptr, nullptr, nullptr, 0, N, scale_log2, g, tq, lane);
    store_rows(st, Qs, out, b, h, N, H, 0, wrow, g, tq, lane);
}

// ---- fmha_add_combine and fmha_fwd_window ----

extern "C" __global__ void __launch_bounds__(256)
fmha_add_combine(const u16* __restrict__ bias, const u16* __restrict__ mask, u16* __restrict__ add, int N,
                 int H, int n_add, int NP) {
    // 32-bit index math (host: total < 2^31): 64-bit division is a long software routine
    const unsigned total = (unsigned)n_add * H * N * NP;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const unsigned rowi = i / NP;  // (e * H + h) * N + r
        const unsigned c = i - rowi * NP;
        const unsigned eh = rowi / N;
        const unsigned r = rowi - eh * N;
        const unsigned e = eh / H;
        const unsigned h = eh - e * H;
        float v = NEG_INF;
        if (c < (unsigned)N) {
            v = 0.f;
            if (bias != nullptr) v += ldg_f32(bias + (h * N + r) * N + c);
            if (mask != nullptr) v += ldg_f32(mask + (e * N + r) * N + c);
        }
        add[i] = from_f32(v);
    }
}

#define WIN_THREADS 128
// Minimum resident CTAs per SM asked of the compiler, i.e. a register cap: 4 caps head_dim 32 at
// 128 registers (uncapped: 134, so 3 CTAs/SM; 5 spills), 113 -> 98 us on Swin-T stage 1
// (kernels/NOTES.md). The launcher sizes the persistent grid from the occupancy the compiled
// kernel reaches. The sweep that chose it ran through FUSEPROF_KERNELS_DEFINES (commit e2b39b2).
#define WIN_MIN_BLOCKS 4
#define QKV_STAGE (3 * BLOCK_M * SROW)  // elements of q, k, v in one stage

// Issue the cp.async copies of item (b, h) (additive entry e) into one stage: q/k/v rows < N,
// and the additive tile (N rows of NP elements, contiguous in global memory) into rows of AS
// elements. The chunk -> (row, q/k/v, column) mapping is fixed per thread (threads
// [0, QSTEP_ROWS * 3 * DCH) take rows r0, r0 + QSTEP_ROWS, ...), so each chunk costs two
// additions and the copy: with 64-bit index math and run-time divisions here, this issue path
// was ~45% of the kernel's instructions (Nsight Compute, kernels/NOTES.md).
#define QSTEP_ROWS (WIN_THREADS / (3 * DCH))  // q/k/v rows per step: 10 (d = 32), 5 (d = 64)
__device__ __forceinline__ void window_issue(u16* stage, const u16* __restrict__ qkv, const u16* __restrict__ add,
                                             int b, int h, int e, int N, int H, int NP, int AS) {
    const int t = threadIdx.x;
    const int r0 = t / (3 * DCH);  // compile-time divisors
    const int rem = t - r0 * 3 * DCH;
    const int which = rem / DCH;
    const int c = rem - which * DCH;
    const int HD = H * HEAD_DIM;
    if (r0 < QSTEP_ROWS) {
        const u16* src = qkv + (i64)b * N * 3 * HD + h * HEAD_DIM + (r0 * 3 + which) * HD + c * 8;
        u16* dst = stage + (which * BLOCK_M + r0) * SROW + c * 8;
        const int gstep = QSTEP_ROWS * 3 * HD;
        for (int r = r0; r < N; r += QSTEP_ROWS) {
            cp_async16(dst, src, true);
            src += gstep;
            dst += QSTEP_ROWS * SROW;
        }
    }
    if (add != nullptr) {
        const int cpr = NP >> 3;  // 16-byte chunks per row
        const u16* src = add + ((i64)e * H + h) * N * NP;
        u16* dst = stage + QKV_STAGE;
        if (AS == NP) {  // rows back to back in shared memory too: a flat copy
            for (int i = t; i < N * cpr; i += WIN_THREADS) cp_async16(dst + i * 8, src + i * 8, true);
        } else {
            for (int i = t; i < N * cpr; i += WIN_THREADS) {
                const int r = i / cpr;
                cp_async16(dst + r * AS + (i - r * cpr) * 8, src + i * 8, true);
            }
        }
    }
}



// One warp's 16 query rows of one (batch, head) item, all N <= 64 keys in one block. Key tiles
// j >= NP / 8 hold only padded keys and are skipped. HAS_ADD: the additive tile (-inf in its
// padded columns) masks padded keys; without it keys >= N are masked explicitly.
template <bool HAS_ADD>
__device__ __forceinline__ void window_item(u16 (*Qs)[SROW], const u16 (*Ks)[SROW], const u16 (*Vs)[SROW],
                                            const u16* At, u16* __restrict__ out, int b, int h, int N, int H,
                                            int NP, int AS, float scale_log2, int wrow, int g, int tq, int lane) {
    WarpState st;
    load_q_frags(st, Qs, wrow, g, tq);
    const int n_jt = NP >> 3;  // key tiles holding at least one key < N
    const int mat = lane >> 3;
    float sc[BLOCK_N / 8][4];
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        sc[j][0] = 0.f; sc[j][1] = 0.f; sc[j][2] = 0.f; sc[j][3] = 0.f;
        if (j < n_jt) {
#pragma unroll
            for (int kq = 0; kq < HEAD_DIM / 32; ++kq) {  // one ldmatrix.x4 = B fragments of 2 k-steps
                u32 kb[4];
                ldmatrix_x4(kb, smem_addr(&Ks[j * 8 + (lane & 7)][kq * 32 + mat * 8]));
                mma16816(sc[j], st.qa[2 * kq], kb[0], kb[1]);
                mma16816(sc[j], st.qa[2 * kq + 1], kb[2], kb[3]);
            }
        }
    }
    const int r0 = wrow + g;
    const bool r0_ok = HAS_ADD && r0 < N;
    const bool r1_ok = HAS_ADD && r0 + 8 < N;
    float m0 = NEG_INF, m1 = NEG_INF;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        if (j < n_jt) {
            const int c = j * 8 + 2 * tq;  // < NP: inside the tile's row
            float x00 = sc[j][0] * scale_log2, x01 = sc[j][1] * scale_log2;
            float x10 = sc[j][2] * scale_log2, x11 = sc[j][3] * scale_log2;
            if (HAS_ADD) {
                if (r0_ok) {
                    const u32 a = *reinterpret_cast<const u32*>(At + r0 * AS + c);
                    x00 += lo_f32(a) * LOG2E_F;
                    x01 += hi_f32(a) * LOG2E_F;
                }
                if (r1_ok) {
                    const u32 a = *reinterpret_cast<const u32*>(At + (r0 + 8) * AS + c);
                    x10 += lo_f32(a) * LOG2E_F;
                    x11 += hi_f32(a) * LOG2E_F;
                }
            } else {
                if (c >= N) { x00 = NEG_INF; x10 = NEG_INF; }
                if (c + 1 >= N) { x01 = NEG_INF; x11 = NEG_INF; }
            }
            sc[j][0] = x00; sc[j][1] = x01; sc[j][2] = x10; sc[j][3] = x11;
            m0 = fmaxf(m0, fmaxf(x00, x01));
            m1 = fmaxf(m1, fmaxf(x10, x11));
        }
    }
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 2));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 2));
    // key 0 < N in every row, so m0 / m1 are finite (an all -inf additive row is the caller's
    // bug, as in eager)
    float l0 = 0.f, l1 = 0.f;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j) {
        if (j < n_jt) {
            sc[j][0] = ex2_approx(sc[j][0] - m0);
            sc[j][1] = ex2_approx(sc[j][1] - m0);
            sc[j][2] = ex2_approx(sc[j][2] - m1);
            sc[j][3] = ex2_approx(sc[j][3] - m1);
            l0 += sc[j][0] + sc[j][1];
            l1 += sc[j][2] + sc[j][3];
        } else {
            sc[j][0] = 0.f; sc[j][1] = 0.f; sc[j][2] = 0.f; sc[j][3] = 0.f;
        }
    }
    st.l0 = l0;
    st.l1 = l1;
#pragma unroll
    for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
        if (kk * 16 >= N) break;  // all-zero P columns: nothing to add
        u32 pa[4];
        pa[0] = pack2(sc[2 * kk][0], sc[2 * kk][1]);
        pa[1] = pack2(sc[2 * kk][2], sc[2 * kk][3]);
        pa[2] = pack2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
        pa[3] = pack2(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
        const int key = kk * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
        for (int dt = 0; dt < HEAD_DIM / 16; ++dt) {
            u32 vb[4];
            ldmatrix_x4_trans(vb, smem_addr(&Vs[key][dt * 16 + (mat >> 1) * 8]));
            mma16816(st.o[2 * dt], pa, vb[0], vb[1]);
            mma16816(st.o[2 * dt + 1], pa, vb[2], vb[3]);
        }
    }
    store_rows(st, Qs, out, b, h, N, H, 0, wrow, g, tq, lane);
}

// qkv [B*N, 3, H, D]; out [B*N, H*D]; add [n_add, H, N, NP] or null, item (b, h) using entry
// b % n_add. AS: shared row stride of the additive tile (NP, or NP + 8 when NP / 2 words would
// put the 8 row groups of an mma fragment on the same banks). Dynamic shared memory: 2 stages of
// QKV_STAGE + N * AS elements.
extern "C" __global__ void __launch_bounds__(WIN_THREADS, WIN_MIN_BLOCKS) fmha_fwd_window(
    const u16* __restrict__ qkv, u16* __restrict__ out, const u16* __restrict__ add, int B, int N, int H,
    int n_add, int NP, int AS, float scale_log2) {
    extern __shared__ __align__(16) u16 smem[];
    const int stage_elems = QKV_STAGE + (add != nullptr ? N * AS : 0);
    const int n_items = B * H;  // host: B * H < 2^31
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const int wrow = warp * 16;

    // Zero rows N..63 of q, k, v in both stages once: padded keys score 0 (then -inf), padded
    // values stay finite, padded queries give finite rows that are never stored.
    for (int i = threadIdx.x; i < 2 * 3 * (BLOCK_M - N) * DCH; i += WIN_THREADS) {
        const int per_stage = 3 * (BLOCK_M - N) * DCH;
        const int s = i / per_stage;
        const int rem = i - s * per_stage;
        const int m = rem / ((BLOCK_M - N) * DCH);
        const int rem2 = rem - m * ((BLOCK_M - N) * DCH);
        const int r = N + rem2 / DCH;
        const int c = rem2 % DCH;
        *reinterpret_cast<uint4*>(smem + s * stage_elems + (m * BLOCK_M + r) * SROW + c * 8) =
            make_uint4(0u, 0u, 0u, 0u);
    }

    // Items advance by gridDim.x: (b, h) and the additive entry e = b % n_add are stepped
    // incrementally, no division per item.
    int nb = blockIdx.x / H, nh = blockIdx.x - (blockIdx.x / H) * H;
    int ne = nb % n_add;
    const int db = gridDim.x / H, dh = gridDim.x - db * H, de = db % n_add;
    if ((int)blockIdx.x < n_items) window_issue(smem, qkv, add, nb, nh, ne, N, H, NP, AS);
    cp_async_commit();
    for (int item = blockIdx.x, s = 0; item < n_items; item += gridDim.x, s ^= 1) {
        const int b = nb;
        const int h = nh;
        nb += db;
        nh += dh;
        ne += de;
        if (nh >= H) { nh -= H; nb += 1; ne += 1; }
        if (ne >= n_add) ne -= n_add;
        cp_async_wait<0>();
        __syncthreads();  // this stage landed for everyone; everyone is done with the other one
        if (item + (int)gridDim.x < n_items)
            window_issue(smem + (s ^ 1) * stage_elems, qkv, add, nb, nh, ne, N, H, NP, AS);
        cp_async_commit();
        if (wrow >= N) continue;  // whole warp past N: it only joins the barriers

        u16* st_base = smem + s * stage_elems;
        u16(*Qs)[SROW] = reinterpret_cast<u16(*)[SROW]>(st_base);
        const u16(*Ks)[SROW] = reinterpret_cast<const u16(*)[SROW]>(st_base + BLOCK_M * SROW);
        const u16(*Vs)[SROW] = reinterpret_cast<const u16(*)[SROW]>(st_base + 2 * BLOCK_M * SROW);
        const u16* At = st_base + QKV_STAGE;

        if (add != nullptr) {
            window_item<true>(Qs, Ks, Vs, At, out, b, h, N, H, NP, AS, scale_log2, wrow, g, tq, lane);
        } else {
            window_item<false>(Qs, Ks, Vs, At, out, b, h, N, H, NP, AS, scale_log2, wrow, g, tq, lane);
        }
    }
    cp_async_wait<0>();  // nothing is left in flight at exit (the last group is empty)
}
