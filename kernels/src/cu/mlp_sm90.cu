// mlp_sm90.cu: the fused pre-norm MLP of mlp.cu on Hopper (sm_90a: TMA loads, mbarrier
// hand-offs, wgmma), the same function:
//
//   out[M, C] = x + gelu_erf(LayerNorm(x) W1^T + b1) W2^T + b2,   W1 [HID, C], W2 [C, HID]
//
// mlp.cu's mma.sync kernel keeps the hidden tensor on chip but issues every MMA, ldmatrix and
// GELU instruction from the same warps, in sequence. Here the products are warpgroup MMAs
// that run asynchronously from shared memory, so one warpgroup's GELU overlaps the other's
// products, and a producer warp streams the operands by TMA.
//
// A CTA is persistent (one per SM) and has MW_WGS consumer warpgroups of 64 rows each plus a
// producer, one thread of which issues the copies: a warp, or at C = 96 (MW_PIPE) a warpgroup
// that gives its registers to the consumers (setmaxnreg: 24 and 240 a thread). It walks the
// 128-row tiles blockIdx.x, + gridDim.x, ...; per tile:
// - the producer loads the tile's rows of x (two slots: the next tile's load during this one)
//   and, for each 64-column chunk of the hidden dimension, W1's 64 rows and W2's 64 columns
//   into a ring of MW_RING stages; every tile is 128-byte swizzled, 64 columns (one swizzle
//   row of 128 bytes) per box, so a width C takes ceil(C / 64) boxes ("atoms") side by side;
//   columns past C read as zeros and are never used;
// - each warp normalises its 16 rows in place (fp32 statistics, rounded to the element type as
//   nn.LayerNorm's output is), and per chunk its warpgroup computes h = LN(x) W1c^T (wgmma,
//   both operands from shared memory), adds b1, applies exact GELU (gelu_as), rounds once and
//   feeds h from registers as the A operand of y += h W2c^T (wgmma, W2's rows K-major). At
//   C = 96, chunk j + 1's first product is issued before chunk j's GELU, so the tensor cores
//   work through it (MW_PIPE: two h accumulators);
// - the epilogue adds b2 and the residual (x re-read from global memory: its slot is the next
//   tile's by then) in fp32 and rounds once, as cuBLASLt's bias + residual epilogue does.
// Hand-offs are mbarriers: "full" (a stage's bytes landed), "empty" (all consumer threads are
// done with a stage), "xfull" / "xfree" for the row slots. `out` may be `x`: a thread reads
// each element of x it adds before it writes that element, and no other CTA touches the rows.
#include "common.cuh"
#include "wgmma_sm90.cuh"

// FUSEPROF_ARCH_FEATURES: set by the launcher when it targets an `a` architecture.
#if defined(__CUDA_ARCH__) && !(defined(__CUDA_ARCH_FEAT_SM90_ALL) || FUSEPROF_ARCH_FEATURES)
#error "mlp_sm90.cu needs an sm_90a target (wgmma, TMA)"
#endif

#ifndef MLP_C
#define MLP_C 96
#endif
#if MLP_C % 32 != 0 || MLP_C > 192
#error "mlp_sm90.cu is built for widths that are multiples of 32 up to 192"
#endif

#define MW_WGS 2                             // consumer warpgroups
// Chunk j + 1's first product issued before chunk j's GELU (two h accumulators), with the
// registers setmaxnreg gives: at C = 96. Wider, the second accumulator set spills and is slower
// than one chunk at a time with 168 registers a thread (kernels/NOTES.md).
#define MW_PIPE (MLP_C <= 96)
#if MW_PIPE
#define MW_THREADS (MW_WGS * 128 + 128)      // + the producer warpgroup
#define MW_REGS_CONSUMER 240                 // setmaxnreg: (2 x 240 + 24) x 128 = 168 x 384
#define MW_REGS_PRODUCER 24
#else
#define MW_THREADS (MW_WGS * 128 + 32)       // + the producer warp
#endif
#define MW_BM (MW_WGS * 64)                  // rows per tile
#define MW_BH 64                             // hidden columns per chunk
#define MW_ATOMS ((MLP_C + 63) / 64)         // 64-column boxes across a row of width C
#define MW_TILE 8192                         // one box: 64 rows x 128 bytes
#define MW_XSLOT (MW_WGS * MW_ATOMS * MW_TILE)  // a tile's rows: [warpgroup][atom][64 rows]
#define MW_W1 (MW_ATOMS * MW_TILE)           // W1's chunk: [atom][64 hidden rows]
#define MW_W2 (MLP_C * 128)                  // W2's chunk: [C rows][64 hidden columns]
#define MW_STAGE (MW_W1 + MW_W2)             // a multiple of 1024: C is a multiple of 8
#define MW_RING (MLP_C <= 128 ? 3 : 2)       // 2 at C = 192: 2 x 48 KiB slots + 2 x 48 KiB stages
#define MW_CCH (MLP_C / 8)                   // 16-byte chunks per row
#define MW_LCH (MW_CCH / 2)                  // chunks per lane in the LayerNorm (two lanes a row)
// Epilogue column groups whose residuals load at once (at C = 96: 6, in registers to spare).
#define MW_EB (MW_PIPE ? MLP_C / 8 / MW_ATOMS : 1)

// Byte offset of 16-byte chunk c of row r (< 64) in a [atom][64 rows][128 B] swizzled tile.
__device__ __forceinline__ u32 mw_off(int r, int c) {
    return (u32)((c >> 3) * MW_TILE + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

// LayerNorm in place of this warp's 16 rows (rows 16 w .. of its warpgroup's 64, at xs): two
// lanes a row, each holding half its chunks in registers; statistics in fp32.
__device__ __forceinline__ void mw_layer_norm(unsigned char* xs, int w, int lane, const u16* __restrict__ gamma,
                                              const u16* __restrict__ beta, float eps) {
    const int r = w * 16 + (lane >> 1);
    const int c0 = (lane & 1) * MW_LCH;
    uint4 v[MW_LCH];
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < MW_LCH; ++i) {
        v[i] = *reinterpret_cast<const uint4*>(xs + mw_off(r, c0 + i));
        float f[8];
        unpack8(v[i], f);
#pragma unroll
        for (int k = 0; k < 8; ++k) s += f[k];
    }
    s += __shfl_xor_sync(0xffffffffu, s, 1);
    const float mean = s * (1.f / MLP_C);
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < MW_LCH; ++i) {
        float f[8];
        unpack8(v[i], f);
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            const float d = f[k] - mean;
            q += d * d;
        }
    }
    q += __shfl_xor_sync(0xffffffffu, q, 1);
    const float rstd = rsqrtf(q * (1.f / MLP_C) + eps);
#pragma unroll
    for (int i = 0; i < MW_LCH; ++i) {
        float f[8], gg[8], bb[8];
        unpack8(v[i], f);
        unpack8(ldg16(gamma + (c0 + i) * 8), gg);
        unpack8(ldg16(beta + (c0 + i) * 8), bb);
#pragma unroll
        for (int k = 0; k < 8; ++k) f[k] = (f[k] - mean) * rstd * gg[k] + bb[k];
        *reinterpret_cast<uint4*>(xs + mw_off(r, c0 + i)) = pack8(f);
    }
}

extern "C" __global__ void __launch_bounds__(MW_THREADS, 1)
    ln_mlp_residual_wg(const u16* x, const u16* __restrict__ gamma, const u16* __restrict__ beta, float eps,
                       const u16* __restrict__ b1, const u16* __restrict__ b2, u16* out, i64 M, int hid,
                       const __grid_constant__ WgTmaMap tx, const __grid_constant__ WgTmaMap tw1,
                       const __grid_constant__ WgTmaMap tw2) {
    extern __shared__ __align__(128) unsigned char msmem[];
    // From a 1024-byte-aligned base (the swizzle atom): two row slots, the ring's stages (W1's
    // chunk, then W2's), then the barriers full[ring], empty[ring], xfull[2], xfree[2].
    const u32 s_raw = smem_addr(msmem);
    const u32 s_x = (s_raw + 1023u) & ~1023u;
    unsigned char* const sbase = msmem + (s_x - s_raw);
    const u32 s_w = s_x + 2 * MW_XSLOT;
    const u32 s_full = s_w + MW_RING * MW_STAGE;
    const u32 s_empty = s_full + 8 * MW_RING;
    const u32 s_xfull = s_empty + 8 * MW_RING;
    const u32 s_xfree = s_xfull + 16;

    const int tid = threadIdx.x;
    const int wg = __shfl_sync(0xffffffffu, tid >> 7, 0);  // warp-uniform; MW_WGS: the producer
    const int lane = tid & 31;
    const int ntiles = (int)((M + MW_BM - 1) / MW_BM);
    const int nch = hid / MW_BH;
    if (tid == 0) {
        for (int i = 0; i < MW_RING; ++i) {
            mbar_init(s_full + 8 * i, 1);
            mbar_init(s_empty + 8 * i, MW_WGS * 128);
        }
        for (int i = 0; i < 2; ++i) {
            mbar_init(s_xfull + 8 * i, 1);
            mbar_init(s_xfree + 8 * i, MW_WGS * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == MW_WGS) {  // the producer: its first thread issues every copy
#if MW_PIPE
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(MW_REGS_PRODUCER));
        if (tid != MW_WGS * 128) return;
#else
        if (lane != 0) return;
#endif
        int stage = 0, slot = 0;
        u32 empty_par = 0xffffffffu, xfree_par = 3u;  // a fresh barrier's previous phase is complete
        for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
            mbar_wait(s_xfree + 8 * slot, (xfree_par >> slot) & 1u);
            xfree_par ^= 1u << slot;
            const u32 xfull = s_xfull + 8 * slot;
            mbar_expect_tx(xfull, MW_XSLOT);
            for (int w = 0; w < MW_WGS; ++w)
                for (int a = 0; a < MW_ATOMS; ++a)
                    tma_load_xy(s_x + slot * MW_XSLOT + (w * MW_ATOMS + a) * MW_TILE, &tx, a * 64,
                                t * MW_BM + w * 64, xfull);
            for (int ch = 0; ch < nch; ++ch) {
                mbar_wait(s_empty + 8 * stage, (empty_par >> stage) & 1u);
                empty_par ^= 1u << stage;
                const u32 full = s_full + 8 * stage;
                const u32 st = s_w + stage * MW_STAGE;
                mbar_expect_tx(full, MW_STAGE);
                for (int a = 0; a < MW_ATOMS; ++a) tma_load_xy(st + a * MW_TILE, &tw1, a * 64, ch * MW_BH, full);
                tma_load_xy(st + MW_W1, &tw2, ch * MW_BH, 0, full);
                stage = stage + 1 == MW_RING ? 0 : stage + 1;
            }
            slot ^= 1;
        }
        return;
    }

#if MW_PIPE
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(MW_REGS_CONSUMER));
#endif
    const int w = (tid >> 5) & 3;  // warp within the warpgroup
    const int g = lane >> 2;
    const int tq = lane & 3;
    int stage = 0, slot = 0;  // chunk j's stage at its step; the tile's row slot
    u32 full_par = 0, xfull_par = 0;
#if MW_PIPE
    auto next_stage = [](int s) { return s + 1 == MW_RING ? 0 : s + 1; };
    auto prev_stage = [](int s) { return s == 0 ? MW_RING - 1 : s - 1; };
    auto wait_full = [&](int s) {
        mbar_wait(s_full + 8 * s, (full_par >> s) & 1u);
        full_par ^= 1u << s;
    };
#endif
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        mbar_wait(s_xfull + 8 * slot, (xfull_par >> slot) & 1u);
        xfull_par ^= 1u << slot;
        const u32 s_xw = s_x + slot * MW_XSLOT + wg * MW_ATOMS * MW_TILE;  // this warpgroup's 64 rows
        mw_layer_norm(sbase + (s_xw - s_x), w, lane, gamma, beta, eps);
        // The normalised rows are wgmma operands (the async proxy): order the writes, then wait
        // for the warpgroup's four warps.
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        wg_bar_sync(1 + wg);
        const u64 xd = wg_desc_sw128(s_xw);

#if MW_PIPE
        float y[MLP_C / 2];  // written first by chunk 0's second product (scale-d 0)
        u32 ha[4][4];
        // h = LN(x) W1c^T of the chunk in stage s, issued and committed: C / 16 k-steps, four
        // per 128-byte atom (32 bytes each)
        auto fc1 = [&](float* h, int s) {
            const u64 w1d = wg_desc_sw128(s_w + s * MW_STAGE);
            wgmma_fence();
            wgmma_ss64_first(h, xd, w1d);
#pragma unroll
            for (int k = 1; k < MLP_C / 16; ++k) {
                const u32 off = (u32)((k >> 2) * (MW_TILE >> 4) + (k & 3) * 2);
                wgmma_ss<64>(h, wg_desc_add(xd, off), wg_desc_add(w1d, off), 1);
            }
            wgmma_commit();
        };
        // Chunk ch, whose first product (into hc) is in flight, and with it the previous chunk's
        // second: wait for both (the previous chunk's stage and ha are free then), issue the next
        // chunk's first product (into hn) so that it runs through this chunk's GELU, then this
        // chunk's second. A stage is released before the next chunk's is waited for, so that a
        // ring of two stages suffices.
        auto step = [&](float* hc, float* hn, int ch) {
            wgmma_wait0();
            wg_fence_acc<32>(hc);
            wg_fence_acc<MLP_C / 2>(y);
#pragma unroll
            for (int i = 0; i < 16; ++i) asm volatile("" : "+r"((&ha[0][0])[i])::"memory");
            if (ch > 0) mbar_arrive(s_empty + 8 * prev_stage(stage));
            if (ch + 1 < nch) {
                wait_full(next_stage(stage));
                fc1(hn, next_stage(stage));
            } else {
                mbar_arrive(s_xfree + 8 * slot);  // the rows' last product is in
            }
            // + b1, GELU, rounded once, as the A fragments of y += h W2c^T: hc[4j + 0, 1] row g,
            // columns 8j + 2tq + {0, 1}; hc[4j + 2, 3] row g + 8
            const u16* b1c = b1 + ch * MW_BH;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const u32 bb = __ldg(reinterpret_cast<const u32*>(b1c + j * 8 + 2 * tq));
                const float bl = lo_f32(bb), bh = hi_f32(bb);
                ha[j >> 1][(j & 1) * 2] = pack2(gelu_as(hc[4 * j + 0] + bl), gelu_as(hc[4 * j + 1] + bh));
                ha[j >> 1][(j & 1) * 2 + 1] = pack2(gelu_as(hc[4 * j + 2] + bl), gelu_as(hc[4 * j + 3] + bh));
            }
            const u64 w2d = wg_desc_sw128(s_w + stage * MW_STAGE + MW_W1);
            wgmma_fence();
            if (ch == 0) {
                wgmma_rs_kb_first<MLP_C>(y, ha[0], w2d);
            } else {
                wgmma_rs_kb<MLP_C>(y, ha[0], w2d);
            }
#pragma unroll
            for (int kk = 1; kk < 4; ++kk) wgmma_rs_kb<MLP_C>(y, ha[kk], wg_desc_add(w2d, kk * 2));
            wgmma_commit();
            stage = next_stage(stage);
        };
        float h0[32], h1[32];
        wait_full(stage);
        fc1(h0, stage);
        for (int ch = 0; ch < nch; ch += 2) {
            step(h0, h1, ch);
            if (ch + 1 < nch) step(h1, h0, ch + 1);
        }
        wgmma_wait0();  // the last chunk's second product
        wg_fence_acc<MLP_C / 2>(y);
#pragma unroll
        for (int i = 0; i < 16; ++i) asm volatile("" : "+r"((&ha[0][0])[i])::"memory");
        mbar_arrive(s_empty + 8 * prev_stage(stage));
#else
        float y[MLP_C / 2];
#pragma unroll
        for (int i = 0; i < MLP_C / 2; ++i) y[i] = 0.f;
        for (int ch = 0; ch < nch; ++ch) {
            mbar_wait(s_full + 8 * stage, (full_par >> stage) & 1u);
            full_par ^= 1u << stage;
            const u32 st = s_w + stage * MW_STAGE;
            const u64 w1d = wg_desc_sw128(st);
            const u64 w2d = wg_desc_sw128(st + MW_W1);
            // h = LN(x) W1c^T: C / 16 k-steps, four per 128-byte atom (32 bytes each)
            float h[32];
#pragma unroll
            for (int i = 0; i < 32; ++i) h[i] = 0.f;
            wg_fence_acc<32>(h);
            wgmma_fence();
#pragma unroll
            for (int k = 0; k < MLP_C / 16; ++k) {
                const u32 off = (u32)((k >> 2) * (MW_TILE >> 4) + (k & 3) * 2);
                wgmma_ss<64>(h, wg_desc_add(xd, off), wg_desc_add(w1d, off), k);
            }
            wgmma_commit();
            wgmma_wait0();
            wg_fence_acc<32>(h);
            // The rows' last product is in: the slot may take the tile after next.
            if (ch == nch - 1) mbar_arrive(s_xfree + 8 * slot);
            // + b1, GELU, rounded once, as the A fragments of y += h W2c^T: h[4j + 0, 1] row g,
            // columns 8j + 2tq + {0, 1}; h[4j + 2, 3] row g + 8
            u32 ha[4][4];
            const u16* b1c = b1 + ch * MW_BH;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const u32 bb = __ldg(reinterpret_cast<const u32*>(b1c + j * 8 + 2 * tq));
                const float bl = lo_f32(bb), bh = hi_f32(bb);
                ha[j >> 1][(j & 1) * 2] = pack2(gelu_as(h[4 * j + 0] + bl), gelu_as(h[4 * j + 1] + bh));
                ha[j >> 1][(j & 1) * 2 + 1] = pack2(gelu_as(h[4 * j + 2] + bl), gelu_as(h[4 * j + 3] + bh));
            }
            wg_fence_acc<MLP_C / 2>(y);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wgmma_rs_kb<MLP_C>(y, ha[kk], wg_desc_add(w2d, kk * 2));
            wgmma_commit();
            wgmma_wait0();
            wg_fence_acc<MLP_C / 2>(y);
#pragma unroll
            for (int i = 0; i < 16; ++i) asm volatile("" : "+r"((&ha[0][0])[i])::"memory");
            mbar_arrive(s_empty + 8 * stage);
            stage = stage + 1 == MW_RING ? 0 : stage + 1;
        }
#endif
        // y + b2 + x, rounded once: rows g and g + 8 of this warp's 16, the residuals of MW_EB
        // column groups loaded before any of their sums is stored
        const i64 r0 = (i64)t * MW_BM + wg * 64 + w * 16 + g;
        const bool in0 = r0 < M, in1 = r0 + 8 < M;
#pragma unroll
        for (int j0 = 0; j0 < MLP_C / 8; j0 += MW_EB) {
            u32 xv[MW_EB][2];
#pragma unroll
            for (int jj = 0; jj < MW_EB; ++jj) {
                const int col = (j0 + jj) * 8 + 2 * tq;
                xv[jj][0] = in0 ? *reinterpret_cast<const u32*>(x + r0 * MLP_C + col) : 0u;
                xv[jj][1] = in1 ? *reinterpret_cast<const u32*>(x + (r0 + 8) * MLP_C + col) : 0u;
            }
#pragma unroll
            for (int jj = 0; jj < MW_EB; ++jj) {
                const int j = j0 + jj;
                const int col = j * 8 + 2 * tq;
                const u32 bb = __ldg(reinterpret_cast<const u32*>(b2 + col));
                const float bl = lo_f32(bb), bh = hi_f32(bb);
                if (in0)
                    *reinterpret_cast<u32*>(out + r0 * MLP_C + col) =
                        pack2(y[4 * j + 0] + bl + lo_f32(xv[jj][0]), y[4 * j + 1] + bh + hi_f32(xv[jj][0]));
                if (in1)
                    *reinterpret_cast<u32*>(out + (r0 + 8) * MLP_C + col) =
                        pack2(y[4 * j + 2] + bl + lo_f32(xv[jj][1]), y[4 * j + 3] + bh + hi_f32(xv[jj][1]));
            }
        }
        slot ^= 1;
    }
}
