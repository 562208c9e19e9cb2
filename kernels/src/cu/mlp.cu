// mlp.cu: a pre-norm transformer block's second half in one kernel, its hidden tensor on chip:
//
//   out[M, C] = x + gelu_erf(LayerNorm(x) W1^T + b1) W2^T + b2,   W1 [HID, C], W2 [C, HID]
//
// The unfused MLP writes the [M, 4C] hidden tensor, reads and writes it again for the GELU and
// reads it once more for fc2: at Swin's first stages that traffic is most of the block's time.
// Here a CTA owns 128 rows of x; each of its 8 warps normalises its 16 rows (fp32 statistics, the
// result rounded to the element type as nn.LayerNorm's output is), keeps them as A fragments, the
// fp32 accumulators of its 16 output rows, and walks the hidden dimension in chunks of 64:
// h = LN(x) W1[chunk]^T (mma.sync), + b1, exact GELU, rounded once to the element type, and fed
// straight back as the A operand of y += h W2[:, chunk]^T (the mma C layout of two n-tiles is
// the A layout of one k-step). The weight chunks stream through shared memory, double-buffered
// with cp.async. The rows of x stay in shared memory: the epilogue adds b2 and them (the
// residual) in fp32 and rounds once, as cuBLASLt's bias + residual epilogue does.
//
// MLP_C (the model width, a multiple of 32 up to 192) is the build variant: it sizes the
// accumulators. HID must be a multiple of 64; rows past M are zero-filled and not stored.
// `out` may be `x`: a CTA reads its rows before it writes them.
#include "common.cuh"
#include "mma_sm80.cuh"

#ifndef MLP_C
#define MLP_C 96
#endif

#define MLP_WARPS 8
#define MLP_BM (MLP_WARPS * 16)  // rows per CTA
#define MLP_BH 64                // hidden columns per chunk
#define XS (MLP_C + 8)           // row stride of the x / output tile (+16 bytes: no bank conflicts)
#define W1S (MLP_C + 8)          // row stride of a W1 chunk [64][C]
#define W2S (MLP_BH + 8)         // row stride of a W2 chunk [C][64]
#define CCH (MLP_C / 8)          // 16-byte chunks per row of width C

// Dynamic shared memory: the x tile (the residual, then the output), two W1 chunks, two
// W2 chunks. mlp.rs computes the same size.
#define MLP_SMEM_ELEMS (MLP_BM * XS + 2 * MLP_BH * W1S + 2 * MLP_C * W2S)

__device__ __forceinline__ void mlp_load_weights(u16* w1s, u16* w2s, const u16* __restrict__ w1,
                                                 const u16* __restrict__ w2, int chunk, int hid) {
    // W1 rows chunk*64 .. +64, all C columns
    for (int i = threadIdx.x; i < MLP_BH * CCH; i += MLP_WARPS * 32) {
        const int r = i / CCH;
        const int c = i - r * CCH;
        cp_async16(w1s + r * W1S + c * 8, w1 + (i64)(chunk * MLP_BH + r) * MLP_C + c * 8, true);
    }
    // W2 all C rows, columns chunk*64 .. +64
    for (int i = threadIdx.x; i < MLP_C * (MLP_BH / 8); i += MLP_WARPS * 32) {
        const int r = i / (MLP_BH / 8);
        const int c = i - r * (MLP_BH / 8);
        cp_async16(w2s + r * W2S + c * 8, w2 + (i64)r * hid + chunk * MLP_BH + c * 8, true);
    }
}

// Rows row0 .. row0 + nrows of a [M, C] tensor into a tile with stride XS, rows >= M zero-filled.
__device__ __forceinline__ void mlp_load_rows(u16* dst, const u16* __restrict__ src, i64 row0, int nrows,
                                              i64 M, int first, int step) {
    for (int i = first; i < nrows * CCH; i += step) {
        const int r = i / CCH;
        const int c = i - r * CCH;
        const bool ok = row0 + r < M;
        cp_async16(dst + r * XS + c * 8, src + (ok ? (row0 + r) * MLP_C + c * 8 : 0), ok);
    }
}

// LayerNorm of this warp's 16 rows of a tile (stride XS) as mma A fragments. Thread (g, tq)
// holds columns 16 kk + 2 tq + {0, 1, 8, 9} of rows g and g + 8, which is also where the A
// fragments want them; the four threads of a row reduce its statistics with two shuffles.
__device__ __forceinline__ void mlp_ln_frags(u32 (*xa)[4], const u16* xw, const u16* __restrict__ gamma,
                                             const u16* __restrict__ beta, float eps, int g, int tq) {
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int kk = 0; kk < MLP_C / 16; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int col = kk * 16 + 2 * tq + half * 8;
            const u32 a = *reinterpret_cast<const u32*>(xw + g * XS + col);
            const u32 b = *reinterpret_cast<const u32*>(xw + (g + 8) * XS + col);
            s0 += lo_f32(a) + hi_f32(a);
            s1 += lo_f32(b) + hi_f32(b);
        }
    }
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    const float mean0 = s0 * (1.f / MLP_C), mean1 = s1 * (1.f / MLP_C);
    float v0 = 0.f, v1 = 0.f;
#pragma unroll
    for (int kk = 0; kk < MLP_C / 16; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int col = kk * 16 + 2 * tq + half * 8;
            const u32 a = *reinterpret_cast<const u32*>(xw + g * XS + col);
            const u32 b = *reinterpret_cast<const u32*>(xw + (g + 8) * XS + col);
            float d;
            d = lo_f32(a) - mean0; v0 += d * d;
            d = hi_f32(a) - mean0; v0 += d * d;
            d = lo_f32(b) - mean1; v1 += d * d;
            d = hi_f32(b) - mean1; v1 += d * d;
        }
    }
    v0 += __shfl_xor_sync(0xffffffffu, v0, 1);
    v0 += __shfl_xor_sync(0xffffffffu, v0, 2);
    v1 += __shfl_xor_sync(0xffffffffu, v1, 1);
    v1 += __shfl_xor_sync(0xffffffffu, v1, 2);
    const float r0 = rsqrtf(v0 * (1.f / MLP_C) + eps), r1 = rsqrtf(v1 * (1.f / MLP_C) + eps);
#pragma unroll
    for (int kk = 0; kk < MLP_C / 16; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int col = kk * 16 + 2 * tq + half * 8;
            const u32 gg = __ldg(reinterpret_cast<const u32*>(gamma + col));
            const u32 bb = __ldg(reinterpret_cast<const u32*>(beta + col));
            const u32 a = *reinterpret_cast<const u32*>(xw + g * XS + col);
            const u32 b = *reinterpret_cast<const u32*>(xw + (g + 8) * XS + col);
            xa[kk][half * 2] = pack2((lo_f32(a) - mean0) * r0 * lo_f32(gg) + lo_f32(bb),
                                     (hi_f32(a) - mean0) * r0 * hi_f32(gg) + hi_f32(bb));
            xa[kk][half * 2 + 1] = pack2((lo_f32(b) - mean1) * r1 * lo_f32(gg) + lo_f32(bb),
                                         (hi_f32(b) - mean1) * r1 * hi_f32(gg) + hi_f32(bb));
        }
    }
}

// One 64-wide hidden chunk of a warp's 16 rows: h = LN(x) W1c^T + b1c, GELU, y += h W2c^T.
// w1c: the chunk's 64 rows of W1 (row stride s1); w2c: the chunk's 64 columns of W2's C rows
// (row stride s2), both in shared memory.
__device__ __forceinline__ void mlp_chunk(float (*y)[4], const u32 (*xa)[4], const u16* w1c, int s1,
                                          const u16* w2c, int s2, const u16* __restrict__ b1c, int lane) {
    const int tq = lane & 3;
    const int mat = lane >> 3;  // which 8x8 matrix of an ldmatrix.x4 this lane addresses
    const int mrow = lane & 7;
    float h[MLP_BH / 8][4];
#pragma unroll
    for (int j = 0; j < MLP_BH / 8; ++j) {
        h[j][0] = 0.f; h[j][1] = 0.f; h[j][2] = 0.f; h[j][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < MLP_C / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < MLP_BH / 16; ++np) {
            u32 b[4];
            ldmatrix_x4(b, smem_addr(w1c + (np * 16 + (mat >> 1) * 8 + mrow) * s1 + kk * 16 + (mat & 1) * 8));
            mma16816(h[2 * np], xa[kk], b[0], b[1]);
            mma16816(h[2 * np + 1], xa[kk], b[2], b[3]);
        }
    }
    // + b1, GELU, rounded once: the A fragments of the second product
    u32 ha[MLP_BH / 16][4];
#pragma unroll
    for (int j = 0; j < MLP_BH / 8; ++j) {
        const u32 bb = __ldg(reinterpret_cast<const u32*>(b1c + j * 8 + 2 * tq));
        const float bl = lo_f32(bb), bh = hi_f32(bb);
        ha[j >> 1][(j & 1) * 2] = pack2(gelu_as(h[j][0] + bl), gelu_as(h[j][1] + bh));
        ha[j >> 1][(j & 1) * 2 + 1] = pack2(gelu_as(h[j][2] + bl), gelu_as(h[j][3] + bh));
    }
#pragma unroll
    for (int kk = 0; kk < MLP_BH / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < MLP_C / 16; ++np) {
            u32 b[4];
            ldmatrix_x4(b, smem_addr(w2c + (np * 16 + (mat >> 1) * 8 + mrow) * s2 + kk * 16 + (mat & 1) * 8));
            mma16816(y[2 * np], ha[kk], b[0], b[1]);
            mma16816(y[2 * np + 1], ha[kk], b[2], b[3]);
        }
    }
}

// y + b2 + the residual (the warp's rows of x, in the tile) in fp32, rounded once, staged in
// the same rows and stored 16 bytes at a time to rows wrow0.. that are < M.
__device__ __forceinline__ void mlp_store(float (*y)[4], u16* xw, const u16* __restrict__ b2, u16* __restrict__ out,
                                          i64 wrow0, i64 M, int lane) {
    const int g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int j = 0; j < MLP_C / 8; ++j) {
        const int col = j * 8 + 2 * tq;
        const u32 bb = __ldg(reinterpret_cast<const u32*>(b2 + col));
        const float bl = lo_f32(bb), bh = hi_f32(bb);
        u32* r0 = reinterpret_cast<u32*>(xw + g * XS + col);
        u32* r1 = reinterpret_cast<u32*>(xw + (g + 8) * XS + col);
        const u32 v0 = *r0, v1 = *r1;
        *r0 = pack2(y[j][0] + bl + lo_f32(v0), y[j][1] + bh + hi_f32(v0));
        *r1 = pack2(y[j][2] + bl + lo_f32(v1), y[j][3] + bh + hi_f32(v1));
    }
    __syncwarp();
    for (int i = lane; i < 16 * CCH; i += 32) {
        const int r = i / CCH;
        const int c = i - r * CCH;
        if (wrow0 + r < M) stg16(out + (wrow0 + r) * MLP_C + c * 8, *reinterpret_cast<const uint4*>(xw + r * XS + c * 8));
    }
}

__device__ __forceinline__ void mlp_zero(float (*y)[4]) {
#pragma unroll
    for (int j = 0; j < MLP_C / 8; ++j) {
        y[j][0] = 0.f; y[j][1] = 0.f; y[j][2] = 0.f; y[j][3] = 0.f;
    }
}

// One CTA per 128 rows; the weights stream through two shared-memory stages of 64 hidden
// columns each.
extern "C" __global__ void __launch_bounds__(MLP_WARPS * 32, 1)
ln_mlp_residual(const u16* __restrict__ x, const u16* __restrict__ gamma, const u16* __restrict__ beta, float eps,
                const u16* __restrict__ w1, const u16* __restrict__ b1, const u16* __restrict__ w2,
                const u16* __restrict__ b2, u16* __restrict__ out, i64 M, int hid) {
    extern __shared__ __align__(16) u16 smem[];
    u16* xs = smem;
    u16* w1s = xs + MLP_BM * XS;        // stage s at w1s + s * MLP_BH * W1S
    u16* w2s = w1s + 2 * MLP_BH * W1S;  // stage s at w2s + s * MLP_C * W2S
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const i64 row0 = (i64)blockIdx.x * MLP_BM;
    const int nchunks = hid / MLP_BH;

    mlp_load_rows(xs, x, row0, MLP_BM, M, threadIdx.x, MLP_WARPS * 32);
    mlp_load_weights(w1s, w2s, w1, w2, 0, hid);
    cp_async_commit();
    if (nchunks > 1) mlp_load_weights(w1s + MLP_BH * W1S, w2s + MLP_C * W2S, w1, w2, 1, hid);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    u16* xw = xs + warp * 16 * XS;
    u32 xa[MLP_C / 16][4];
    mlp_ln_frags(xa, xw, gamma, beta, eps, lane >> 2, lane & 3);

    float y[MLP_C / 8][4];
    mlp_zero(y);
    for (int chunk = 0; chunk < nchunks; ++chunk) {
        const int s = chunk & 1;
        u16* w1c = w1s + s * (MLP_BH * W1S);
        u16* w2c = w2s + s * (MLP_C * W2S);
        mlp_chunk(y, xa, w1c, W1S, w2c, W2S, b1 + chunk * MLP_BH, lane);
        __syncthreads();  // every warp is done with stage s
        if (chunk + 2 < nchunks) mlp_load_weights(w1c, w2c, w1, w2, chunk + 2, hid);
        cp_async_commit();
        cp_async_wait<1>();  // chunk + 1 has landed
        __syncthreads();
    }
    mlp_store(y, xw, b2, out, row0 + warp * 16, M, lane);
}

// Where both weights fit in shared memory (C <= 96, hidden 4C: 155 KB at C = 96), a persistent
// CTA per SM loads them once and walks its tiles of 128 rows with no barrier inside a tile: the
// next tile's rows load (cp.async, double-buffered) while this one computes, and the warps drift
// apart so that one's GELU overlaps another's products.
#if MLP_C <= 96
#define MLP_HID (4 * MLP_C)
#define W2R (MLP_HID + 8)  // row stride of the resident W2 [C][HID]
#define MLP_RESIDENT_SMEM_ELEMS (MLP_HID * W1S + MLP_C * W2R + 2 * MLP_BM * XS)

extern "C" __global__ void __launch_bounds__(MLP_WARPS * 32, 1)
ln_mlp_residual_resident(const u16* __restrict__ x, const u16* __restrict__ gamma, const u16* __restrict__ beta,
                         float eps, const u16* __restrict__ w1, const u16* __restrict__ b1,
                         const u16* __restrict__ w2, const u16* __restrict__ b2, u16* __restrict__ out, i64 M) {
    extern __shared__ __align__(16) u16 smem[];
    u16* w1s = smem;                    // [HID][W1S]
    u16* w2s = w1s + MLP_HID * W1S;     // [C][W2R]
    u16* xbuf = w2s + MLP_C * W2R;      // two tiles [BM][XS]
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const i64 ntiles = (M + MLP_BM - 1) / MLP_BM;

    for (int i = threadIdx.x; i < MLP_HID * CCH; i += MLP_WARPS * 32) {
        const int r = i / CCH, c = i - (i / CCH) * CCH;
        cp_async16(w1s + r * W1S + c * 8, w1 + (i64)r * MLP_C + c * 8, true);
    }
    for (int i = threadIdx.x; i < MLP_C * (MLP_HID / 8); i += MLP_WARPS * 32) {
        const int r = i / (MLP_HID / 8), c = i - (i / (MLP_HID / 8)) * (MLP_HID / 8);
        cp_async16(w2s + r * W2R + c * 8, w2 + (i64)r * MLP_HID + c * 8, true);
    }
    i64 tile = blockIdx.x;
    if (tile < ntiles) mlp_load_rows(xbuf, x, tile * MLP_BM, MLP_BM, M, threadIdx.x, MLP_WARPS * 32);
    cp_async_commit();

    for (int it = 0; tile < ntiles; ++it, tile += gridDim.x) {
        u16* xt = xbuf + (it & 1) * (MLP_BM * XS);
        const i64 next = tile + gridDim.x;
        if (next < ntiles)
            mlp_load_rows(xbuf + ((it + 1) & 1) * (MLP_BM * XS), x, next * MLP_BM, MLP_BM, M, threadIdx.x,
                          MLP_WARPS * 32);
        cp_async_commit();
        cp_async_wait<1>();  // this tile's rows (and, the first time, the weights)
        __syncthreads();

        u16* xw = xt + warp * 16 * XS;
        const i64 wrow0 = tile * MLP_BM + warp * 16;
        u32 xa[MLP_C / 16][4];
        mlp_ln_frags(xa, xw, gamma, beta, eps, lane >> 2, lane & 3);

        float y[MLP_C / 8][4];
        mlp_zero(y);
#pragma unroll 1
        for (int chunk = 0; chunk < MLP_HID / MLP_BH; ++chunk)
            mlp_chunk(y, xa, w1s + chunk * MLP_BH * W1S, W1S, w2s + chunk * MLP_BH, W2R, b1 + chunk * MLP_BH, lane);
        mlp_store(y, xw, b2, out, wrow0, M, lane);
        __syncthreads();  // the tile buffer is free for the tile after next
    }
}
#endif
