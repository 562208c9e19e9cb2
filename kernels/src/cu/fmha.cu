// fmha.cu: fused multi-head attention for short sequences (Swin windows, ViT, BERT).
//
// out[t, h*D + :] = softmax(scale * q k^T + bias[h] + mask[b % n_mask]) v, per (batch b, head h),
// reading q/k/v straight from the QKV linear's output layout [tokens, 3, heads, D] and writing
// [tokens, heads*D], so neither the permute before attention nor the transpose after remains.
//
// One CTA = 4 warps = one block of 64 query rows of one (batch, head); each warp owns 16 rows.
// Entry points (plus fmha_fwd_window and fmha_add_combine, described further down):
//   fmha_fwd_short (N <= 64, Swin windows): one key block; q/k/v land in shared memory through
//     cp.async (all loads in flight at once, rows past N zero-filled) while the CTA sums bias and
//     mask into an fp32 tile in shared memory with coalesced loads.
//   fmha_fwd_long (any N): keys in blocks of 64 with an online softmax, K/V double-buffered so the
//     next block loads while this one computes; bias/mask read from global memory (a key-padding
//     mask is one broadcast value per key). Tensor cores via mma.sync m16n8k16 (fp32
// accumulation), portable to every sm_80+ GPU. The softmax runs in fp32 registers in the log2
// domain; bias and mask are added in fp32.
//
// Compile-time: HEAD_DIM (32 or 64), FP_BF16 (0 = fp16, 1 = bf16).

#ifndef HEAD_DIM
#define HEAD_DIM 32
#endif

#define BLOCK_M 64
#define BLOCK_N 64
#define NWARPS 4
#define SROW (HEAD_DIM + 8)   // shared-memory row stride in elements: +16 bytes against bank conflicts
#define DCH (HEAD_DIM / 8)     // 16-byte chunks per row

__device__ __forceinline__ void mma16816(float c[4], const u32 a[4], u32 b0, u32 b1) {
#if FP_BF16
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 r[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ float ex2_approx(float x) {  // 2^x; ex2.approx.ftz(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void ldmatrix_x4(u32 r[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

#define ADD_STRIDE (BLOCK_N + 8)  // fp32 additive tile row stride (conflict-free 8-byte reads)

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool pred) {
    const u32 s = smem_addr(smem);
    const int n = pred ? 16 : 0;  // 0 source bytes: the 16 destination bytes are zero-filled
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

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

#define FMHA_PARAMS                                                                                   \
    const u16 *__restrict__ qkv, u16 *__restrict__ out, const u16 *__restrict__ bias,                \
        const u16 *__restrict__ mask, int B, int N, int H, int n_mask, int mask_row_stride,          \
        float scale_log2, int n_qblocks

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
        // A plain loop: v3 tried batches of 20 loads per thread in flight and ran 1.8x slower
        // (265.8 vs 143.9 us on Swin stage 1; see NOTES.md), most likely by crowding out the
        // q/k/v cp.async traffic.
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

// ---- fmha_fwd_long (round 4): 128 query rows per CTA, two m16 tiles per warp ----
//
// Warp w owns query rows q0 + w*16 + {0, 64} .. +15 (two m16 tiles), so every K / V fragment it
// loads (ldmatrix) feeds two mma, and the two tiles' softmax chains interleave. Keys in blocks of
// 64 with an online softmax, loaded by cp.async into a ring of LONG_RING stages (a tuning
// constant): up to LONG_RING blocks are in flight from the start, each waited for by its own commit
// group, and a stage is refilled (behind a barrier) only when N has more blocks than stages. A
// two-stage ring is the double buffer; four stages hold all of N <= 256 with one barrier per
// block and none behind it, but measured slower on ViT (kernels/NOTES.md, round 4). In the last block only the key tiles holding a key < N
// are computed. The per-key additive term (key-padding mask times log2 e, -inf past N) sits in a
// 64-float shared row per block, so no per-element key test remains; per-row bias / window
// masks (rowadd) are read from global memory.
// Dynamic shared memory: Q [128][SROW], K [LONG_RING][64][SROW], V [LONG_RING][64][SROW], kadd [LONG_RING][64] fp32.
#define LMT 2
#define LBM (NWARPS * 16 * LMT)
#ifndef LONG_MIN_BLOCKS
#define LONG_MIN_BLOCKS 2
#endif
// Tuning constant (FUSEPROF_KERNELS_DEFINES): keys per online-softmax step inside a 64-key
// stage. 32 halves the score registers (head_dim 64 needs more than 255 at 64 and spills);
// not measured yet, so 64 stays the default (the code of run 8).
#ifndef LONG_SUB
#define LONG_SUB 64
#endif
// Tuning constant: stages of the key-block ring (the launcher sizes shared memory from the same
// value). 2 is the double buffer; 3 and 4 measured no faster on ViT / BERT (run 7 and 8).
#ifndef LONG_RING
#define LONG_RING 2
#endif
#if LONG_RING < 1
#error "LONG_RING must be at least 1"
#endif

struct LongState {
    u32 qa[LMT][HEAD_DIM / 16][4];
    float o[LMT][HEAD_DIM / 8][4];
    float m[LMT][2];
    float l[LMT][2];
};

// The additive value of key c times log2 e: the key-padding mask (or 0), -inf past N.
__device__ __forceinline__ float key_add(const u16* __restrict__ kp, int c, int N) {
    if (c >= N) return NEG_INF;
    return kp != nullptr ? ldg_f32(kp + c) * LOG2E_F : 0.f;
}

// Per-row additive terms of rows (row0, row0 + 8) at key c (bias [H, N, N], per-row mask rows).
struct RowAdd {
    const u16* bias;  // bias + h * N * N, or null
    const u16* mask;  // the mask entry of this batch, or null
    int stride;       // mask row stride
};

// One block of KB keys (from key0) for the warp's first NT (1 or 2) m-tiles. n_jt: key tiles
// (of 8) holding a key < N. ra: per-row additive terms (ra.bias == ra.mask == null: none); qrow0: the warp's first
// row of m-tile 0 (+ g).
template <int NT, bool ROWADD, int KB>
__device__ __forceinline__ void long_block(LongState& st, const u16 (*Ks)[SROW], const u16 (*Vs)[SROW],
                                           const float* kadd, const RowAdd& ra, int qrow0, int N, int key0,
                                           int n_jt, float scale_log2, int tq, int lane) {
    const int mat = lane >> 3;
    float s[NT][KB / 8][4];
#pragma unroll
    for (int j = 0; j < KB / 8; ++j) {
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
    for (int j = 0; j < KB / 8; ++j) {
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
    for (int j = 0; j < KB / 8; ++j) {
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
    for (int kk = 0; kk < KB / 16; ++kk) {
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
// basic blocks the compiler did not schedule across (ViT 75 -> 94 us when it was a run-time test).
template <int NT, int KB>
__device__ __forceinline__ void long_block_dispatch(LongState& st, const u16 (*Ks)[SROW], const u16 (*Vs)[SROW],
                                                    const float* kadd, const RowAdd& ra, int qrow0, int N, int key0,
                                                    int n_jt, float scale_log2, int tq, int lane) {
    if (ra.bias != nullptr || ra.mask != nullptr) {  // per-row bias / mask: rare shapes, one variant
        long_block<NT, true, KB>(st, Ks, Vs, kadd, ra, qrow0, N, key0, n_jt, scale_log2, tq, lane);
    } else if (n_jt == KB / 8) {  // a whole block: the tile tests fold away
        long_block<NT, false, KB>(st, Ks, Vs, kadd, ra, qrow0, N, key0, KB / 8, scale_log2, tq, lane);
    } else {
        long_block<NT, false, KB>(st, Ks, Vs, kadd, ra, qrow0, N, key0, n_jt, scale_log2, tq, lane);
    }
}

// cp.async.wait_group takes an immediate: wait until at most n groups are pending (more than 3
// allowed waits for 3: stricter, still correct).
__device__ __forceinline__ void cp_async_wait_n(int n) {
    switch (n) {
        case 0: cp_async_wait<0>(); break;
        case 1: cp_async_wait<1>(); break;
        case 2: cp_async_wait<2>(); break;
        default: cp_async_wait<3>(); break;
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
#pragma unroll
        for (int sub = 0; sub < BLOCK_N / LONG_SUB; ++sub) {  // softmax steps of LONG_SUB keys
            const int key0 = kb * BLOCK_N + sub * LONG_SUB;
            int n_jt = (N - key0 + 7) >> 3;
            if (n_jt <= 0) break;
            n_jt = n_jt < LONG_SUB / 8 ? n_jt : LONG_SUB / 8;
            const u16(*Ks)[SROW] = Kb[stage] + sub * LONG_SUB;
            const u16(*Vs)[SROW] = Vb[stage] + sub * LONG_SUB;
            const float* ka = kadd[stage] + sub * LONG_SUB;
            if (nt == 2) {
                long_block_dispatch<2, LONG_SUB>(st, Ks, Vs, ka, ra, q0 + wrow + g, N, key0, n_jt, scale_log2, tq, lane);
            } else if (nt == 1) {
                long_block_dispatch<1, LONG_SUB>(st, Ks, Vs, ka, ra, q0 + wrow + g, N, key0, n_jt, scale_log2, tq, lane);
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

// ---- fmha_fwd_long_wg (Hopper, sm_90a only): fmha_fwd_long's job on wgmma ----
//
// Round 5 (kernels/NOTES.md): fmha_fwd_long is latency-bound at head_dim 64 (255 registers, 8
// warps per SM, mma.sync chains). Here each warpgroup (4 warps) owns 64 query rows and issues
// warpgroup MMAs: S = Q K^T with Q and K read by the instruction from shared memory (no Q
// fragments in registers), softmax in registers, O += P V with P from registers and V from shared
// memory. Two warpgroups per CTA share each K / V block (128 query rows per item, as
// fmha_fwd_long). Round 6: persistent. Each CTA walks the items (batch, head, 128-row query
// block) blockIdx.x, + gridDim.x, ... as one flat sequence of key blocks, so the ring of K / V
// stages (WG_RING) runs on across items and the next item's Q and first blocks load while this
// one computes; one barrier per key block; each thread's load offsets are computed once. Shared
// tiles use the no-swizzle core-matrix layout: 8 rows x 16 bytes per 128-byte core matrix, the 8
// column chunks of a row group side by side (LBO 128 bytes along K, SBO 1024 bytes between row
// groups); V, read MN-major by the P V step, names them the other way round (LBO 1024, SBO 128:
// checked on the H100, the swapped reading faults). Head dim 64 only, no per-row bias or mask
// (the launcher falls back to fmha_fwd_long for those). Built only when NVRTC targets compute_90a
// (__CUDA_ARCH_FEAT_SM90_ALL, or FUSEPROF_ARCH_FEATURES from the launcher): on sm_90 by default,
// for sequences over 128 (LONG_WGMMA=0 turns it off).
#ifndef FUSEPROF_ARCH_FEATURES
#define FUSEPROF_ARCH_FEATURES 0  // the launcher sets 1 when it targets an `a` architecture
#endif
#if (defined(__CUDA_ARCH_FEAT_SM90_ALL) || FUSEPROF_ARCH_FEATURES) && HEAD_DIM == 64
typedef unsigned long long u64;
#define WG_THREADS 256
#define WG_TILE 8192  // bytes of one 64-row x 64-column tile
#define WG_BM 128     // query rows per item: two warpgroups x 64
// Tuning constant: minimum resident CTAs per SM asked of the compiler (2 caps registers at 128:
// S and O accumulators are 32 each, P 16).
#ifndef WG_MIN_BLOCKS
#define WG_MIN_BLOCKS 2
#endif
// Tuning constant: K / V stages (2 or 3; the launcher sizes shared memory from the same value).
// Block f + WG_RING - 1 starts loading when block f starts computing. Two Q slots (this item's and
// the next one's) suffice up to 3 stages because every item has at least 2 key blocks (N > 64).
// 2 and 3 time the same on the H100 (ViT 69.6 / 70.3 us, BERT-128 37.0 / 38.3 us).
// Tuning constant WG_OVERLAP (0, the default: one block at a time, 2 stages by default; 1: S of
// the next block issued right behind P V of this one, one wait for both; needs 3 or 4 stages,
// default 3). Measured on the H100 (NOTES.md round 7): 1 was slower (ViT 71.5 vs 68.8 us), since
// ptxas serialised the wgmma chain (C7515: the zeroing of the S accumulators sat between the
// P V issue and its wait; without it, round 9: no warning, still slower, 72.0 vs 70.0 us). With
// 4 stages two Q slots need every item to have at least 3 key blocks (N > 128): the launcher
// sends this kernel nothing shorter.
#ifndef WG_OVERLAP
#define WG_OVERLAP 0
#endif
#ifndef WG_RING
#define WG_RING (WG_OVERLAP ? 3 : 2)
#endif
#if WG_RING < 2 || WG_RING > 4 || (WG_OVERLAP && WG_RING < 3)
#error "WG_RING must be 2 to 4 (3 or 4 with WG_OVERLAP)"
#endif
// fmha_fwd_long_tma's stages (kernels/NOTES.md round 9: ViT 49.2 us at 3, 50.9 at 2, 49.8 at 4).
#ifndef TMA_RING
#define TMA_RING 3
#endif
#if TMA_RING < 2 || TMA_RING > 4
#error "TMA_RING must be 2 to 4"
#endif
// TMA_LATE=1: the producer fills block f - 1's stage at the end of block f instead of at its
// start, when the other warpgroup has most likely finished block f - 1 (warp 0 then waits less
// for it, and its own warpgroup with it); the copies get one block less of lead.
#ifndef TMA_LATE
#define TMA_LATE 0
#endif
// Tuning constant: 1 has the producer fill a stage while its warpgroup's S is in flight, not
// before the block, so warps 1-3 of warpgroup 0 do not wait for warp 0 at the first wgmma
// (round 10: with WG_DESC32, ViT 49.1-50.3 -> 47.7-48.1 us). Off when TMA_LATE places it.
#ifndef TMA_HIDE
#define TMA_HIDE (!TMA_LATE)
#endif
#if TMA_HIDE && TMA_LATE
#error "TMA_HIDE and TMA_LATE place the producer's work differently: set one"
#endif
// Tuning constant: 1 gives each stage's V tile a barrier of its own ("fullv", the producer's
// lane 0 arrives with its bytes), waited for just before P V, so S starts once Q and K are in.
#ifndef TMA_SPLITV
#define TMA_SPLITV 1
#endif

// Byte offset of 16-byte chunk c (0..7) of row r in a core-matrix tile.
__device__ __forceinline__ u32 wg_chunk(int r, int c) { return (u32)((((r >> 3) << 3) + c) << 7) + ((r & 7) << 4); }

// Shared-memory matrix descriptor, no swizzle: start address, leading and stride byte offsets.
// Adding (bytes >> 4) to it moves the start address (the low 14 bits; shared addresses < 256 KiB).
__device__ __forceinline__ u64 wg_desc(u32 saddr, u32 lbo, u32 sbo) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)((lbo >> 4) & 0x3FFFu) << 16) | ((u64)((sbo >> 4) & 0x3FFFu) << 32);
}

__device__ __forceinline__ void cp_async16_s(u32 saddr, const void* gmem, bool pred) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem), "r"(pred ? 16 : 0)
                 : "memory");
}

template <int R>
__device__ __forceinline__ void wg_fence_acc(float* d) {  // keeps the compiler off the accumulators
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }

#if FP_BF16
#define WG_TYPES "f32.bf16.bf16"
#else
#define WG_TYPES "f32.f16.f16"
#endif

// d (+)= A B, m64nNk16: A (64 x 16, K-major) and B (16 x N, K-major) from shared memory; d holds
// N / 2 accumulators per thread.
template <int N>
__device__ __forceinline__ void wgmma_ss(float* d, u64 da, u64 db, int accumulate);
template <>
__device__ __forceinline__ void wgmma_ss<16>(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16." WG_TYPES " "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(da), "l"(db), "r"(accumulate));
}
template <>
__device__ __forceinline__ void wgmma_ss<32>(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16." WG_TYPES " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(accumulate));
}

// The 32 accumulator operands d[0..31] of an m64n64 wgmma, each with constraint C ("+f": read
// and written; "=f": written only).
#define WG_ACC32(C)                                                                                  \
    C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]), C(d[10]), \
        C(d[11]), C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), C(d[19]),     \
        C(d[20]), C(d[21]), C(d[22]), C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]),     \
        C(d[29]), C(d[30]), C(d[31])
template <>
__device__ __forceinline__ void wgmma_ss<64>(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16." WG_TYPES " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC32("+f")
        : "l"(da), "l"(db), "r"(accumulate));
}

// m64n64k16 with A from registers (%32-%35), B's descriptor %36 and scale-d %37.
#define WG_RS_TB_ASM                                                                                 \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                     \
    "wgmma.mma_async.sync.aligned.m64n64k16." WG_TYPES " "                                           \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"

// d += A B, m64n64k16: A from registers (the mma.sync A-fragment layout per warp), B (16 x 64,
// MN-major: 64 columns contiguous per row) from shared memory.
__device__ __forceinline__ void wgmma_rs_tb(float* d, const u32 a[4], u64 db) {
    asm volatile(WG_RS_TB_ASM : WG_ACC32("+f") : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}

// As wgmma_rs_tb, but d = A B (scale-d 0) with d write-only: the first k-step of a product whose
// accumulators hold nothing live before it (fmha_fwd_item_tma), so they need no registers then.
__device__ __forceinline__ void wgmma_rs_tb_first(float* d, const u32 a[4], u64 db) {
    asm volatile(WG_RS_TB_ASM : WG_ACC32("=f") : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(0));
}

// Tuning constant: 1 computes a last key block with at most 16 or 32 keys < N with an m64n16 or
// m64n32 S and as many P V steps (ViT: 5 keys in its last block of 64), 0 computes it whole.
#ifndef WG_TAIL
#define WG_TAIL 1
#endif

// Tuning constant: 1 steps wgmma descriptors in their low 32 bits only (the start address field,
// which never carries: shared memory ends below 2^18 bytes), 0 in 64-bit arithmetic (round 10:
// ViT 49.9 -> 49.0 us alone).
#ifndef WG_DESC32
#define WG_DESC32 1
#endif
__device__ __forceinline__ u64 wg_desc_add(u64 d, u32 off) {
#if WG_DESC32
    u32 lo, hi;
    asm("mov.b64 {%0, %1}, %2;\n" : "=r"(lo), "=r"(hi) : "l"(d));
    lo += off;
    asm("mov.b64 %0, {%1, %2};\n" : "=l"(d) : "r"(lo), "r"(hi));
    return d;
#else
    return d + off;
#endif
}

struct WgState {
    float o[32];  // O accumulators: o[4j + 0, 1] row g, columns 8j + 2tq + {0, 1}; o[4j + 2, 3] row g + 8
    float m0, m1, l0, l1;  // running max (log2 units, scaled) and partial sums of rows g, g + 8
};

// S = Q K^T for this warpgroup's 64 rows and NK keys (16, 32 or 64), issued and committed, not
// waited for: four k16 steps over head_dim (2 column chunks = 256 bytes each). qd, kd:
// descriptors of the Q and K tiles. ZERO: clear s first. The first k-step ignores the
// accumulators anyway (scale-d = 0); the overlapped loop must not clear them, since that
// defines accumulator registers while P V's wgmma is in flight and ptxas then serialises the
// chain (C7515).
template <int NK, bool ZERO = true, int KSTEP = 16>
__device__ __forceinline__ void wg_s_issue(float* s, u64 qd, u64 kd) {
    if (ZERO) {
#pragma unroll
        for (int i = 0; i < NK / 2; ++i) s[i] = 0.f;
    }
    wg_fence_acc<NK / 2>(s);
    wgmma_fence();
#pragma unroll
    for (int t = 0; t < HEAD_DIM / 16; ++t) wgmma_ss<NK>(s, wg_desc_add(qd, t * KSTEP), wg_desc_add(kd, t * KSTEP), t);
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
// also clears the previous item's state, else 1).
// A hook that does nothing (wg_block's mid, wg_softmax_pv's pre_pv).
struct WgNoMid {
    __device__ __forceinline__ void operator()() const {}
};
// pre_pv(): run before P V is issued (the TMA kernel's wait for the V tile, with TMA_SPLITV).
template <int NK, bool KADD, class PrePv = WgNoMid>
__device__ __forceinline__ void wg_softmax_pv(WgState& st, float* s, u64 vd, const float* kadd, float scale_log2,
                                              int tq, float keep, PrePv&& pre_pv = PrePv()) {
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

// One whole block: S, wait, softmax, P V, wait.
// KSTEP: a k16 step's move of the Q / K descriptors (16 = 256 bytes, no swizzle; 2 = 32 bytes
// within a 128-byte-swizzled row).
// mid(): run while S is in flight (the TMA kernel's producer, with TMA_HIDE); pre_pv: see
// wg_softmax_pv.
template <int NK, bool KADD, int KSTEP = 16, class Mid = WgNoMid, class PrePv = WgNoMid>
__device__ __forceinline__ void wg_block(WgState& st, u64 qd, u64 kd, u64 vd, const float* kadd, float scale_log2,
                                         int tq, float keep, Mid&& mid = Mid(), PrePv&& pre_pv = PrePv()) {
    float s[NK / 2];
    wg_s_issue<NK, true, KSTEP>(s, qd, kd);
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
// for a short last block (WG_TAIL), else 64; KADD 1 when the per-key terms apply (a key mask,
// keys past N, or a scale the folded exponent cannot take).
template <class F>
__device__ __forceinline__ void wg_dispatch(int keys, bool masked, float scale_log2, F&& f) {
    if (WG_TAIL && keys <= 16) {
        f(WgInt<16>(), WgInt<1>());
    } else if (WG_TAIL && keys <= 32) {
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

// The 16 bits at p, loaded without waiting for them (asm volatile keeps the load where it is
// written; the value is used a key block later).
__device__ __forceinline__ u16 ldg_u16_early(const u16* p) {
    unsigned short v;
    asm volatile("ld.global.nc.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
    return v;
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
template <bool TMA = false>
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
    if (TMA) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MIN_BLOCKS) fmha_fwd_long_wg(FMHA_PARAMS) {
    constexpr int n_ring = WG_RING;
    extern __shared__ __align__(128) unsigned char wsmem[];
    // Q: 2 slots x 2 tiles (rows q0.. and q0 + 64..); K, V: n_ring tiles each; kadd: n_ring x 64.
    const u32 s_q = smem_addr(wsmem);
    const u32 s_k = s_q + 4 * WG_TILE;
    const u32 s_v = s_k + n_ring * WG_TILE;
    float(*kadd)[BLOCK_N] = reinterpret_cast<float(*)[BLOCK_N]>(wsmem + (4 + 2 * n_ring) * WG_TILE);

    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform, so descriptors stay uniform
    const int wwarp = (tid >> 5) & 3;                       // warp within the warpgroup: rows wwarp * 16..
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const int nq = n_qblocks;
    const int nkb = (N + BLOCK_N - 1) / BLOCK_N;
    const i64 rs = (i64)3 * H * HEAD_DIM;  // elements between consecutive tokens' rows

    // This thread's two 16-byte chunks of every 64-row tile: row r, column chunk c; a warp
    // covers 8 rows x 4 chunks, so its shared writes land on all 32 banks.
    int lr[2];
    u32 ls[2];
    int lg[2];  // element offsets (< 64 token rows)
#pragma unroll
    for (int it = 0; it < 2; ++it) {
        const int i = it * WG_THREADS + tid;
        const int q = i & 31, grp = i >> 5;
        lr[it] = ((grp >> 1) << 3) + (q & 7);
        const int c = ((grp & 1) << 2) + (q >> 3);
        ls[it] = wg_chunk(lr[it], c);
        lg[it] = lr[it] * (int)rs + c * 8;
    }
    // gridDim.x in (qb, h, b) radix, and this CTA's first item.
    int gq, gh, gb;
    WgCursor L = WgCursor::first(nq, H, gq, gh, gb);
    WgCursor C = L;
    int l_stage = 0, l_qslot = 0;

    // The per-key terms of the block being loaded: its mask bits are loaded at issue() and
    // written to kadd after the current block's compute (by then they have arrived; the stage
    // they go to is free since the barrier). Threads tid < 64, one key each.
    const bool kthread = tid < BLOCK_N;
    u16 k_raw = 0;
    int k_key = N, k_stage = -1;
    auto kadd_store = [&]() {
        if (kthread && k_stage >= 0) {
            kadd[k_stage][tid] = k_key >= N ? NEG_INF : (mask != nullptr ? to_f32(k_raw) * LOG2E_F : 0.f);
            k_stage = -1;
        }
    };

    // Start loading the loader cursor's block into stage l_stage (with its item's Q when it is
    // the item's first block), then step the cursor. Always one commit group, empty past the end.
    // Rows at or past N are zero-filled (their source: the block's first row, which exists).
    auto issue = [&]() {
        if (L.b < B) {
            const int row0 = L.kb * BLOCK_N;
            const u16* kbase = qkv + ((i64)L.b * N + row0) * rs + (H + L.h) * HEAD_DIM;
#pragma unroll
            for (int it = 0; it < 2; ++it) {
                const bool ok = row0 + lr[it] < N;
                const u16* src = kbase + (ok ? lg[it] : 0);
                const u32 so = l_stage * WG_TILE + ls[it];
                cp_async16_s(s_k + so, src, ok);
                cp_async16_s(s_v + so, src + H * HEAD_DIM, ok);
            }
            if (L.kb == 0) {
                const int qrow0 = L.qb * WG_BM;
                const u16* qbase = qkv + ((i64)L.b * N + qrow0) * rs + L.h * HEAD_DIM;
#pragma unroll
                for (int t = 0; t < 2; ++t)
#pragma unroll
                    for (int it = 0; it < 2; ++it) {
                        const bool ok = qrow0 + t * 64 + lr[it] < N;
                        cp_async16_s(s_q + (l_qslot * 2 + t) * WG_TILE + ls[it],
                                     qbase + (ok ? t * 64 * (int)rs + lg[it] : 0), ok);
                    }
            }
            if (kthread) {
                k_key = row0 + tid;
                k_stage = l_stage;
                if (mask != nullptr && k_key < N) k_raw = ldg_u16_early(mask + (i64)(L.b % n_mask) * N + k_key);
            }
            if (L.next(nkb, nq, H, gq, gh, gb)) l_qslot ^= 1;
            l_stage = l_stage + 1 == n_ring ? 0 : l_stage + 1;
        }
        cp_async_commit();
    };

#pragma unroll
    for (int f = 0; f < n_ring - 1; ++f) {
        issue();
        kadd_store();
    }

    WgState st;
#pragma unroll
    for (int i = 0; i < 32; ++i) st.o[i] = 0.f;
    st.l0 = 0.f; st.l1 = 0.f;
    int c_stage = 0, c_qslot = 0;
#if WG_OVERLAP
    // S of block f + 1 runs on the tensor cores right behind P V of block f, one wait for both
    // (the S registers are free once P is packed). Block f + 1 must be in before P V of f is
    // done with block f's stage, hence at least 3 stages; the stage written at block f's barrier
    // is block f - 1's, whose P V the wait at the top of block f saw finish.
    float s[32] = {};  // set once: the loop's S steps do not clear it (see wg_s_issue)
    auto s_issue = [&]() {  // S of the consumer cursor's block, into s
        const u64 qd = wg_desc(s_q + (c_qslot * 2 + wg) * WG_TILE, 128, 1024);
        const u64 kd = wg_desc(s_k + c_stage * WG_TILE, 128, 1024);
        wg_dispatch(N - C.kb * BLOCK_N, false, 1.f,
                    [&](auto nk, auto) { wg_s_issue<decltype(nk)::value, false>(s, qd, kd); });
    };
    cp_async_wait<n_ring - 2>();                                     // block 0's group
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
    __syncthreads();
    bool act = C.b < B && C.qb * WG_BM + wg * 64 < N;  // uniform per warpgroup
    if (act) s_issue();
    WgCursor P = C;  // the block whose P V is in flight
    int p_qslot = 0;
    bool p_act = false;
    while (C.b < B) {  // uniform for the whole CTA
        wgmma_wait0();  // S of this block and P V of the previous one
        wg_fence_acc<32>(st.o);
        if (p_act && P.kb == nkb - 1) {  // the previous block ended its item: store that item
            const int pq0 = P.qb * WG_BM;
            wg_store(st, wsmem + (p_qslot * 2 + wg) * WG_TILE + wwarp * 2048, out, P.b, P.h, N, H,
                     pq0 + wg * 64 + wwarp * 16, g, tq, lane);
        }
        if (act) {
            const float keep = wg_start_block(st, C.kb == 0);
            const u64 vd = wg_desc(s_v + c_stage * WG_TILE, 1024, 128);
            const float* ka = kadd[c_stage];
            wg_dispatch(N - C.kb * BLOCK_N, mask != nullptr, scale_log2, [&](auto nk, auto kadd_on) {
                wg_softmax_pv<decltype(nk)::value, decltype(kadd_on)::value != 0>(st, s, vd, ka, scale_log2, tq, keep);
            });
        }
        P = C;
        p_qslot = c_qslot;
        p_act = act;
        if (C.next(nkb, nq, H, gq, gh, gb)) c_qslot ^= 1;
        c_stage = c_stage + 1 == n_ring ? 0 : c_stage + 1;
        cp_async_wait<n_ring - 3>();                                     // the next block's group
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
        __syncthreads();  // the next block is in; everyone's P V of two blocks back is done
        issue();          // into that stage
        act = C.b < B && C.qb * WG_BM + wg * 64 < N;
        if (act) s_issue();
        kadd_store();
    }
    wgmma_wait0();
    wg_fence_acc<32>(st.o);
    if (p_act && P.kb == nkb - 1) {
        wg_store(st, wsmem + (p_qslot * 2 + wg) * WG_TILE + wwarp * 2048, out, P.b, P.h, N, H,
                 P.qb * WG_BM + wg * 64 + wwarp * 16, g, tq, lane);
    }
#else
    while (C.b < B) {  // uniform for the whole CTA
        cp_async_wait<n_ring - 2>();                                     // this block's group
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async writes -> wgmma reads
        __syncthreads();  // the block is in; everyone is done with the previous block's stage
        issue();          // into that stage (and, on an item's first block, the other Q slot)
        const int q0 = C.qb * WG_BM;
        if (q0 + wg * 64 < N) {  // uniform per warpgroup
            // wg_start_block and wg_dispatch written out: this is the code run 9 measured, and
            // the helpers, same in effect, change its PTX (branch layout).
            const float keep = C.kb == 0 ? 0.f : 1.f;  // the first block starts the item afresh
            if (C.kb == 0) {
                st.m0 = NEG_INF;
                st.m1 = NEG_INF;
            }
            const u32 qa = s_q + (c_qslot * 2 + wg) * WG_TILE;
            const u64 qd = wg_desc(qa, 128, 1024);
            const u64 kd = wg_desc(s_k + c_stage * WG_TILE, 128, 1024);
            const u64 vd = wg_desc(s_v + c_stage * WG_TILE, 1024, 128);
            const float* ka = kadd[c_stage];
            const int keys = N - C.kb * BLOCK_N;  // keys < N in this block (uniform)
            if (WG_TAIL && keys <= 16) {
                wg_block<16, true>(st, qd, kd, vd, ka, scale_log2, tq, keep);
            } else if (WG_TAIL && keys <= 32) {
                wg_block<32, true>(st, qd, kd, vd, ka, scale_log2, tq, keep);
            } else if (keys < BLOCK_N || mask != nullptr || !(scale_log2 > 0.f)) {
                wg_block<64, true>(st, qd, kd, vd, ka, scale_log2, tq, keep);
            } else {
                wg_block<64, false>(st, qd, kd, vd, ka, scale_log2, tq, keep);
            }
            if (C.kb == nkb - 1) {
                wg_store(st, wsmem + (c_qslot * 2 + wg) * WG_TILE + wwarp * 2048, out, C.b, C.h, N, H,
                         q0 + wg * 64 + wwarp * 16, g, tq, lane);
            }
        }
        kadd_store();  // the issued block's per-key terms, into a stage no one reads until a barrier
        if (C.next(nkb, nq, H, gq, gh, gb)) c_qslot ^= 1;
        c_stage = c_stage + 1 == n_ring ? 0 : c_stage + 1;
    }
#endif
    cp_async_wait<0>();
}

// ---- fmha_fwd_long_tma (the default on sm_90 for head_dim-64 calls with N > 128 and at most a
// key mask, and for N of 65 to 128 with TMA_ITEM=0; LONG_TMA=0 turns it off; NOTES.md round 9) ----
//
// fmha_fwd_long_wg's item walk and block step with the loads and hand-offs changed: each 64 x 64
// tile comes by one TMA copy into a 128-byte-swizzled tile (tmap describes qkv as
// [64 elements][N tokens][3 x H slabs][B]; rows past N read as zeros), and the two warpgroups
// meet no CTA barrier inside the loop. A stage is "full" when its bytes have landed (mbarrier
// with a transaction count and all 32 producer lanes' arrivals) and "empty" when all 256
// threads have finished its P V (one arrival each: an arrival releases only its own thread's
// accesses); a Q slot is free when both warpgroups have stored the item that used it. Warp 0 (of
// warpgroup 0) is also the producer: before loading block f + TMA_RING - 1 into block f - 1's
// stage it waits for that stage's "empty", so warpgroup 0 runs at most one block ahead of
// warpgroup 1.
// Needs at least TMA_RING - 1 key blocks per item, else the producer would wait for its own
// warpgroup's later release of a Q slot; the launcher sends nothing shorter (tma_eligible).

// A CUtensorMap (128 bytes), passed by value as a __grid_constant__ parameter.
struct __align__(64) WgTmaMap {
    u64 v[16];
};

// Shared-memory descriptor of a 128-byte-swizzled, 1024-byte-aligned tile: SBO 1024 between
// 8-row groups, LBO 16 (unused), layout type 1 (bits 62-63). For Q / K (K-major) a k16 step
// moves the start 32 bytes along the row; for V (MN-major, 64 columns = one swizzle row) a
// 16-key step moves it 2048 bytes.
__device__ __forceinline__ u64 wg_desc_sw128(u32 saddr) {
    return (u64)((saddr & 0x3FFFFu) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {  // an arrival that also expects bytes
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Wait for the phase of parity `parity` to complete. A kernel that waits this long is broken:
// trap (the launch fails with an error) rather than hang the GPU.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    for (u32 spins = 0;; ++spins) {
        u32 done;
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
        if (done) return;
        if (spins > (1u << 24)) __trap();
    }
}
// One box (64 x 64 x 1 x 1) of tmap at (element 0, token row, slab, batch) into dst, completing
// on bar.
__device__ __forceinline__ void tma_load_4d(u32 dst, const WgTmaMap* tmap, int row, int slab, int batch, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(tmap)), "r"(0), "r"(row), "r"(slab), "r"(batch), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void wg_bar_sync(int id) {  // the 128 threads of one warpgroup
    asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MIN_BLOCKS)
    fmha_fwd_long_tma(FMHA_PARAMS, const __grid_constant__ WgTmaMap tmap) {
    constexpr int n_ring = TMA_RING;
    extern __shared__ __align__(128) unsigned char wsmem[];
    // As fmha_fwd_long_wg, from a 1024-byte-aligned base (the swizzle atom), then the barriers:
    // full[n_ring], empty[n_ring], qfree[2].
    const u32 s_raw = smem_addr(wsmem);
    const u32 s_q = (s_raw + 1023u) & ~1023u;
    unsigned char* const sbase = wsmem + (s_q - s_raw);
    const u32 s_k = s_q + 4 * WG_TILE;
    const u32 s_v = s_k + n_ring * WG_TILE;
    float(*kadd)[BLOCK_N] = reinterpret_cast<float(*)[BLOCK_N]>(sbase + (4 + 2 * n_ring) * WG_TILE);
    const u32 s_full = s_v + n_ring * WG_TILE + n_ring * BLOCK_N * 4;
    const u32 s_empty = s_full + 8 * n_ring;
    const u32 s_qfree = s_empty + 8 * n_ring;
    const u32 s_fullv = s_qfree + 16;  // TMA_SPLITV; the launcher reserves it in any build

    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform
    const int wwarp = (tid >> 5) & 3;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const int nq = n_qblocks;
    const int nkb = (N + BLOCK_N - 1) / BLOCK_N;
    const bool producer = wg == 0 && wwarp == 0;  // warp-uniform
    if (tid == 0) {
        for (int i = 0; i < n_ring; ++i) {
            mbar_init(s_full + 8 * i, 32);
            mbar_init(s_empty + 8 * i, WG_THREADS);
        }
        mbar_init(s_qfree, 2);
        mbar_init(s_qfree + 8, 2);
#if TMA_SPLITV
        for (int i = 0; i < n_ring; ++i) mbar_init(s_fullv + 8 * i, 1);
#endif
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    int gq, gh, gb;
    WgCursor L = WgCursor::first(nq, H, gq, gh, gb);
    WgCursor C = L;
    // Producer state: stage, Q slot, and the parity each "empty" / "qfree" wait expects (1 at
    // first: a fresh barrier's previous phase counts as complete).
    int l_stage = 0, l_qslot = 0;
    u32 l_empty_par = 0xffffffffu, l_qfree_par = 3u;

    // Warp 0: load the loader cursor's block into stage l_stage, with its item's Q on the item's
    // first block, and write its per-key terms; then step the cursor.
    auto produce = [&]() {
        if (L.b >= B) return;
        const int row0 = L.kb * BLOCK_N;
        mbar_wait(s_empty + 8 * l_stage, (l_empty_par >> l_stage) & 1u);
        l_empty_par ^= 1u << l_stage;
        if (L.kb == 0) {
            mbar_wait(s_qfree + 8 * l_qslot, (l_qfree_par >> l_qslot) & 1u);
            l_qfree_par ^= 1u << l_qslot;
        }
        const u16* kp = mask != nullptr ? mask + (i64)(L.b % n_mask) * N : nullptr;
#pragma unroll
        for (int k = lane; k < BLOCK_N; k += 32) kadd[l_stage][k] = key_add(kp, row0 + k, N);
        // Every lane arrives (an arrival releases only its own thread's writes: the terms);
        // lane 0's also expects the tiles' bytes, then issues their copies.
        const u32 full = s_full + 8 * l_stage;
        if (lane != 0) {
            mbar_arrive(full);
        } else {
            const u32 fullv = TMA_SPLITV ? s_fullv + 8 * l_stage : full;  // where V's bytes land
            mbar_expect_tx(full, ((L.kb == 0 ? 2 : 0) + (TMA_SPLITV ? 1 : 2)) * WG_TILE);
            if (TMA_SPLITV) mbar_expect_tx(fullv, WG_TILE);
            if (L.kb == 0) {
                tma_load_4d(s_q + (l_qslot * 2) * WG_TILE, &tmap, L.qb * WG_BM, L.h, L.b, full);
                tma_load_4d(s_q + (l_qslot * 2 + 1) * WG_TILE, &tmap, L.qb * WG_BM + 64, L.h, L.b, full);
            }
            tma_load_4d(s_k + l_stage * WG_TILE, &tmap, row0, H + L.h, L.b, full);
            tma_load_4d(s_v + l_stage * WG_TILE, &tmap, row0, 2 * H + L.h, L.b, fullv);
        }
        __syncwarp();
        if (L.next(nkb, nq, H, gq, gh, gb)) l_qslot ^= 1;
        l_stage = l_stage + 1 == n_ring ? 0 : l_stage + 1;
    };
    if (producer) {
        for (int f = 0; f < n_ring - 1; ++f) produce();
    }

    WgState st;
#pragma unroll
    for (int i = 0; i < 32; ++i) st.o[i] = 0.f;
    st.l0 = 0.f; st.l1 = 0.f;
    int c_stage = 0, c_qslot = 0;
    u32 c_full_par = 0;
    while (C.b < B) {  // uniform for the whole CTA
        if (!TMA_LATE && !TMA_HIDE && producer) produce();  // block f + n_ring - 1, into block f - 1's stage
        const u32 c_par = (c_full_par >> c_stage) & 1u;
        mbar_wait(s_full + 8 * c_stage, c_par);
        c_full_par ^= 1u << c_stage;
        const int q0 = C.qb * WG_BM;
        const bool act = q0 + wg * 64 < N;  // uniform per warpgroup
        if (act) {
            const float keep = wg_start_block(st, C.kb == 0);
            const u64 qd = wg_desc_sw128(s_q + (c_qslot * 2 + wg) * WG_TILE);
            const u64 kd = wg_desc_sw128(s_k + c_stage * WG_TILE);
            const u64 vd = wg_desc_sw128(s_v + c_stage * WG_TILE);
            const float* ka = kadd[c_stage];
            wg_dispatch(N - C.kb * BLOCK_N, mask != nullptr, scale_log2, [&](auto nk, auto kadd_on) {
                wg_block<decltype(nk)::value, decltype(kadd_on)::value != 0, 2>(
                    st, qd, kd, vd, ka, scale_log2, tq, keep,
                    [&]() {
                        if (TMA_HIDE && producer) produce();
                    },
                    [&]() {
                        if (TMA_SPLITV) mbar_wait(s_fullv + 8 * c_stage, c_par);
                    });
            });
        } else if (TMA_HIDE && producer) {
            produce();
        }
        // This thread is done with the stage. Every thread arrives: an arrival releases only its
        // own thread's reads (the per-key terms), and a warp's wgmma waits cover only its rows.
        mbar_arrive(s_empty + 8 * c_stage);
        if (C.kb == nkb - 1) {
            if (act) {
                wg_store<true>(st, sbase + (c_qslot * 2 + wg) * WG_TILE + wwarp * 2048, out, C.b, C.h, N, H,
                               q0 + wg * 64 + wwarp * 16, g, tq, lane);
            }
            wg_bar_sync(1 + wg);  // the warpgroup's four warps have stored
            if ((tid & 127) == 0) mbar_arrive(s_qfree + 8 * c_qslot);
        }
        if (C.next(nkb, nq, H, gq, gh, gb)) c_qslot ^= 1;
        c_stage = c_stage + 1 == n_ring ? 0 : c_stage + 1;
        if (TMA_LATE && producer) produce();
    }
}

// ---- fmha_fwd_item_tma (round 11): sequences of 65 to 128 tokens, one 128-key block per item ----
//
// BERT-128's items have two 64-key blocks, so fmha_fwd_long_tma pays every block's hand-off
// (a "full" wait, S, its wait, the online softmax's rescale, P V, its wait) twice per item and
// splits the key loads in two. This kernel takes a whole item at once, as cuDNN's sm90 kernel
// does (64 x 128 x 64 tiles): a stage holds the item's Q, K and V (128 rows each, one TMA box of
// 64 x 128 each), S is 64 x 128 per warpgroup (64 accumulators per thread), the softmax is a
// plain one, P V takes 8 k16 steps (O is not live before the first, which writes it, so the
// kernel fits 128 registers without spills). Two stages: the producer (warp 0, as in
// fmha_fwd_long_tma) loads item 0 before the loop and item i + 1 at the top of item i, as soon
// as item i - 1's stage is released, before item i's own wait (round 11: 25.4 us on BERT-128
// without a mask, against 26.2 with the load under item i's S and 26.0 with two items loaded
// ahead, released at each item's end). The output is staged in the item's consumed Q rows, so
// a stage is released ("empty") after the store. Barriers per stage: full (Q and K landed, and
// the producer lanes' per-key terms), fullv (V landed, waited for just before P V), empty (all
// 256 threads done, store included).
#define ITEM_KEYS 128
#define ITEM_STAGE (3 * 2 * WG_TILE)  // Q, K, V of 128 rows

extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MIN_BLOCKS)
    fmha_fwd_item_tma(FMHA_PARAMS, const __grid_constant__ WgTmaMap tmap) {
    extern __shared__ __align__(128) unsigned char wsmem[];
    // From a 1024-byte-aligned base: stage s at s * ITEM_STAGE (Q, then K, then V), the per-key
    // terms [2][128] floats, then the barriers full[2], fullv[2], empty[2].
    const u32 s_raw = smem_addr(wsmem);
    const u32 s_base = (s_raw + 1023u) & ~1023u;
    unsigned char* const sbase = wsmem + (s_base - s_raw);
    float(*kadd)[ITEM_KEYS] = reinterpret_cast<float(*)[ITEM_KEYS]>(sbase + 2 * ITEM_STAGE);
    const u32 s_full = s_base + 2 * ITEM_STAGE + 2 * ITEM_KEYS * 4;
    const u32 s_fullv = s_full + 16;
    const u32 s_empty = s_fullv + 16;

    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform
    const int wwarp = (tid >> 5) & 3;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const bool producer = wg == 0 && wwarp == 0;  // warp-uniform
    const int n_items = B * H;
    // Per-key terms are needed for a key mask, for keys past N, or for a scale the folded
    // exponent cannot take (the same test as wg_dispatch's).
    const bool kadd_on = mask != nullptr || N < ITEM_KEYS || !(scale_log2 > 0.f);
    if (tid == 0) {
        for (int i = 0; i < 2; ++i) {
            mbar_init(s_full + 8 * i, 32);
            mbar_init(s_fullv + 8 * i, 1);
            mbar_init(s_empty + 8 * i, WG_THREADS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    // Producer: item l_item into stage l_stage (after its previous use is released), its per-key
    // terms by all 32 lanes, its three tiles by lane 0.
    int l_item = blockIdx.x, l_stage = 0;
    u32 l_empty_par = 3u;  // a fresh barrier's previous phase counts as complete
    auto produce = [&]() {
        if (l_item >= n_items) return;
        const int b = l_item / H, h = l_item - (l_item / H) * H;
        mbar_wait(s_empty + 8 * l_stage, (l_empty_par >> l_stage) & 1u);
        l_empty_par ^= 1u << l_stage;
        if (kadd_on) {
            const u16* kp = mask != nullptr ? mask + (i64)(b % n_mask) * N : nullptr;
#pragma unroll
            for (int k = lane; k < ITEM_KEYS; k += 32) kadd[l_stage][k] = key_add(kp, k, N);
        }
        const u32 full = s_full + 8 * l_stage;
        if (lane != 0) {
            mbar_arrive(full);
        } else {
            const u32 fullv = s_fullv + 8 * l_stage;
            const u32 st0 = s_base + l_stage * ITEM_STAGE;
            mbar_expect_tx(full, 4 * WG_TILE);
            mbar_expect_tx(fullv, 2 * WG_TILE);
            tma_load_4d(st0, &tmap, 0, h, b, full);
            tma_load_4d(st0 + 2 * WG_TILE, &tmap, 0, H + h, b, full);
            tma_load_4d(st0 + 4 * WG_TILE, &tmap, 0, 2 * H + h, b, fullv);
        }
        __syncwarp();
        l_item += gridDim.x;
        l_stage ^= 1;
    };
    if (producer) produce();

    for (int item = blockIdx.x, c_stage = 0, c_par = 0; item < n_items; item += gridDim.x) {  // CTA-uniform
        const int b = item / H, h = item - (item / H) * H;
        const u32 par = ((u32)c_par >> c_stage) & 1u;  // bit s of c_par: stage s's next phase parity
        c_par ^= 1 << c_stage;
        const u32 st0 = s_base + c_stage * ITEM_STAGE;
        if (producer) produce();  // item i + 1, as soon as item i - 1's stage is released
        mbar_wait(s_full + 8 * c_stage, par);
        const u64 qd = wg_desc_sw128(st0 + wg * WG_TILE);
        const u64 kd = wg_desc_sw128(st0 + 2 * WG_TILE);
        const u64 vd = wg_desc_sw128(st0 + 4 * WG_TILE);
        float s[ITEM_KEYS / 2];  // s[32 * half + 4j + {0, 1}] row g, keys 64 half + 8j + 2tq + {0, 1}; + 2: row g + 8
        wg_s_issue<64, true, 2>(s, qd, kd);
        wg_s_issue<64, true, 2>(s + 32, qd, wg_desc_add(kd, (64 * 128) >> 4));
        wgmma_wait0();
        wg_fence_acc<ITEM_KEYS / 2>(s);
        // A plain softmax over the item's keys: O is not live until the first P V step writes it.
        float m0, m1;
        wg_row_max<ITEM_KEYS>(s, kadd[c_stage], scale_log2, tq, kadd_on, m0, m1);
        // kadd_on: terms already scaled; else raw scores, scale_log2 > 0 folds into the exponent.
        // A row of -inf only (a mask of -inf over all keys) subtracts 0 and sums 0.
        const float sc = kadd_on ? 1.f : scale_log2;
        const float sub0 = m0 == NEG_INF ? 0.f : m0 * sc, sub1 = m1 == NEG_INF ? 0.f : m1 * sc;
        WgState st;  // O (not live before the first P V step), the row sums; no running max
        st.l0 = 0.f;
        st.l1 = 0.f;
        // P V in two halves of 64 keys: the first half's 4 k16 steps go out (the first writes O)
        // while the second half is exponentiated. P stays in registers until the wait (wgmma
        // reads them asynchronously), hence one array for both halves, fenced after the wait.
        u32 pa[2][4][4];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int j = 8 * half; j < 8 * half + 8; ++j) {
                s[4 * j + 0] = ex2_approx(fmaf(s[4 * j + 0], sc, -sub0));
                s[4 * j + 1] = ex2_approx(fmaf(s[4 * j + 1], sc, -sub0));
                s[4 * j + 2] = ex2_approx(fmaf(s[4 * j + 2], sc, -sub1));
                s[4 * j + 3] = ex2_approx(fmaf(s[4 * j + 3], sc, -sub1));
                st.l0 += s[4 * j + 0] + s[4 * j + 1];
                st.l1 += s[4 * j + 2] + s[4 * j + 3];
            }
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const float* p8 = s + 32 * half + 8 * kk;
                pa[half][kk][0] = pack2(p8[0], p8[1]);
                pa[half][kk][1] = pack2(p8[2], p8[3]);
                pa[half][kk][2] = pack2(p8[4], p8[5]);
                pa[half][kk][3] = pack2(p8[6], p8[7]);
            }
            if (half == 0) mbar_wait(s_fullv + 8 * c_stage, par);  // V has landed
            wgmma_fence();  // orders the writes of pa before the wgmma reads them
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                if (half == 0 && kk == 0) {
                    wgmma_rs_tb_first(st.o, pa[0][0], vd);
                } else {
                    wgmma_rs_tb(st.o, pa[half][kk], wg_desc_add(vd, (4 * half + kk) * 128));
                }
            }
            wgmma_commit();
        }
        wgmma_wait0();
#pragma unroll
        for (int i = 0; i < 32; ++i) asm volatile("" : "+r"((&pa[0][0][0])[i])::"memory");
        wg_fence_acc<32>(st.o);
        wg_store<true>(st, sbase + c_stage * ITEM_STAGE + wg * WG_TILE + wwarp * 2048, out, b, h, N, H,
                       wg * 64 + wwarp * 16, g, tq, lane);
        mbar_arrive(s_empty + 8 * c_stage);  // after the store: it staged the output in Q's rows
        c_stage ^= 1;
    }
}
#endif

// ---- Precombined additive tile + persistent window kernel (round 2) ----
//
// fmha_add_combine: add[e, h, r, c] = bias[h, r, c] + mask[e, r, c] for c < N, -inf for N <= c < NP
//   (NP = N rounded up to 8, so each row is whole 16-byte chunks), rounded once to 16 bits. The -inf
//   padding masks the padded keys, so the kernel needs no per-element key test. A
//   one-time setup per model (like weight padding): bias and mask are constants of the layer.
// fmha_fwd_window (N <= 64): persistent CTAs stride over (batch, head) items; each item's q, k, v
//   rows and its contiguous additive tile travel by cp.async into one of two shared-memory stages
//   while the CTA computes the previous item from the other stage, so DRAM always has the next
//   item's loads in flight. One barrier per item. Rows >= N of K and V are zeroed once and never
//   written again. Single key block: plain (not online) softmax.

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
// Tuning constant (FUSEPROF_KERNELS_DEFINES): minimum resident CTAs per SM asked of the compiler
// for fmha_fwd_window, i.e. a register cap; the launcher sizes its persistent grid from the
// occupancy the compiled kernel actually reaches, so any value is safe. 4 caps head_dim 32 at
// 128 registers (uncapped: 134, so 3 CTAs/SM; 5 spills): 113 -> 98 us on Swin-T stage 1 (H100
// sweep, kernels/NOTES.md round 3; `bash kernels/bench/run_device.sh sweep` re-runs it).
#ifndef WIN_MIN_BLOCKS
#define WIN_MIN_BLOCKS 4
#endif
#define QKV_STAGE (3 * BLOCK_M * SROW)  // elements of q, k, v in one stage

// Issue the cp.async copies of item (b, h) (additive entry e) into one stage: q/k/v rows < N,
// and the additive tile (N rows of NP elements, contiguous in global memory) into rows of AS
// elements. Round 4: the chunk -> (row, q/k/v, column) mapping is fixed per thread (threads
// [0, QSTEP_ROWS * 3 * DCH) take rows r0, r0 + QSTEP_ROWS, ...), so each chunk costs two
// additions and the copy; run 6's version spent ~45% of the kernel's instructions on 64-bit
// index math and runtime divisions here (Nsight Compute, kernels/NOTES.md round 4).
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
