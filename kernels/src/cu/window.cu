// window.cu: the Swin window ops, each one pass over memory.
//
// ln_shift_partition_*:   out[win, p, :] = LN(x[b, (hh + sh) % H, (wp + sw) % W, :])  (zero where the
//                         window grid, padded to a multiple of ws, falls outside H x W)
//                         = timm's norm1 -> roll(-shift) -> pad -> window_partition.
// window_reverse_residual_*: y[b, i, j, :] = shortcut[b, i, j, :] + win[window of ((i - sh) % H,
//                         (j - sw) % W)], and optionally ln_out = LN(y)
//                         = timm's window_reverse -> crop -> roll(+shift) -> residual add (-> norm2).
//
// Rows are spread over groups of `lpr` lanes (a power of two), RPT rows per group; each lane holds
// CPL 16-byte chunks of each of its rows in registers, so a row is read once and LayerNorm statistics (fp32, two-pass on the
// registers) need no second read. The `_scalar` versions take any C (one warp per row, elements
// re-read from global memory) and exist for shapes whose C is not a multiple of 8.
#include "common.cuh"

__device__ __forceinline__ float group_sum(float v, int lpr) {
    for (int off = lpr >> 1; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// LayerNorm over a row spread across a lane group. Every lane of the warp must call this (it
// shuffles); chunks past the row end are ignored. gamma/beta may be null (identity affine).
template <int CPL>
__device__ __forceinline__ void layer_norm_chunks(float v[CPL][8], int sub, int lpr, int nch, int C,
                                                  float eps, const u16* __restrict__ gamma,
                                                  const u16* __restrict__ beta) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        if (sub + k * lpr < nch) {
#pragma unroll
            for (int e = 0; e < 8; ++e) s += v[k][e];
        }
    }
    const float mean = group_sum(s, lpr) / (float)C;
    float q = 0.f;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        if (sub + k * lpr < nch) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float d = v[k][e] - mean;
                q += d * d;
            }
        }
    }
    const float rstd = rsqrtf(group_sum(q, lpr) / (float)C + eps);
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = sub + k * lpr;
        if (c < nch) {
            float gw[8], bw[8];
            if (gamma != nullptr) {
                unpack8(ldg16(gamma + c * 8), gw);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) gw[e] = 1.f;
            }
            if (beta != nullptr) {
                unpack8(ldg16(beta + c * 8), bw);
            } else {
#pragma unroll
                for (int e = 0; e < 8; ++e) bw[e] = 0.f;
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) v[k][e] = (v[k][e] - mean) * rstd * gw[e] + bw[e];
        }
    }
}

// Each lane group handles RPT rows of its block: row k of group q is block row k * rpb + q, so
// each k is a contiguous run of rows across the block. All RPT rows' loads are issued (kept as
// raw 16-byte vectors) before the first reduction, so a lane has RPT * CPL (x2 for the reverse)
// 16-byte loads in flight.
// Rows per lane group and threads per block of the vector kernels (the launcher uses the same
// values; 4 rows per group measured slower, kernels/NOTES.md).
#define RPT 2
#define WO_THREADS 256

// Source row of partition row `orow` (-1 where the padded window grid falls outside the image).
__device__ __forceinline__ i64 partition_source_row(unsigned orow32, int H, int W, int ws, int shift_h,
                                                    int shift_w, int nWh, int nWw) {
    const unsigned wsz = ws * ws;
    const unsigned win = orow32 / wsz;
    const int p = (int)(orow32 - win * wsz);
    const unsigned wrow_ = win / nWw;
    const int ww = (int)(win - wrow_ * nWw);
    const unsigned b = wrow_ / nWh;
    const int wh = (int)(wrow_ - b * nWh);
    const int pi = p / ws;
    const int hh = wh * ws + pi;
    const int wp = ww * ws + (p - pi * ws);
    if (hh >= H || wp >= W) return -1;
    int sh = hh + shift_h;
    if (sh >= H) sh -= H;
    int sw = wp + shift_w;
    if (sw >= W) sw -= W;
    return ((i64)b * H + sh) * W + sw;
}

template <int CPL>
__device__ __forceinline__ void ln_shift_partition_impl(
    const u16* __restrict__ x, const u16* __restrict__ gamma, const u16* __restrict__ beta,
    u16* __restrict__ out, int H, int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw,
    int lpr, float eps, i64 total_rows) {
    const unsigned rpb = blockDim.x / lpr;  // rows per block and k
    // 32-bit index math (the host checks rows < 2^31): 64-bit division is a long software routine.
    const unsigned row0 = blockIdx.x * rpb * RPT + threadIdx.x / lpr;
    const int sub = threadIdx.x % lpr;
    const int nch = C / 8;
    i64 srow[RPT];
    uint4 raw[RPT][CPL];
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        const unsigned orow32 = row0 + k * rpb;
        srow[k] = (i64)orow32 < total_rows
                      ? partition_source_row(orow32, H, W, ws, shift_h, shift_w, nWh, nWw)
                      : -1;
#pragma unroll
        for (int j = 0; j < CPL; ++j) {
            const int c = sub + j * lpr;
            raw[k][j] = (srow[k] >= 0 && c < nch) ? ldg16(x + srow[k] * C + c * 8) : make_uint4(0u, 0u, 0u, 0u);
        }
    }
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        const i64 orow = row0 + k * rpb;
        float v[CPL][8];
#pragma unroll
        for (int j = 0; j < CPL; ++j) unpack8(raw[k][j], v[j]);
        layer_norm_chunks<CPL>(v, sub, lpr, nch, C, eps, gamma, beta);  // every lane: it shuffles
        if (orow < total_rows) {
#pragma unroll
            for (int j = 0; j < CPL; ++j) {
                const int c = sub + j * lpr;
                if (c < nch) {
                    uint4 w = make_uint4(0u, 0u, 0u, 0u);  // zero padding outside the image
                    if (srow[k] >= 0) w = pack8(v[j]);
                    stg16(out + orow * C + c * 8, w);
                }
            }
        }
    }
}

template <int CPL>
__device__ __forceinline__ void window_reverse_residual_impl(
    const u16* __restrict__ win, const u16* __restrict__ shortcut, u16* __restrict__ out,
    const u16* __restrict__ gamma, const u16* __restrict__ beta, u16* __restrict__ ln_out, int H,
    int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw, int lpr, float eps,
    i64 total_rows) {
    const unsigned rpb = blockDim.x / lpr;
    const unsigned row0 = blockIdx.x * rpb * RPT + threadIdx.x / lpr;  // host: rows < 2^31
    const int sub = threadIdx.x % lpr;
    const int nch = C / 8;
    uint4 rw[RPT][CPL], rs[RPT][CPL];
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        const unsigned orow32 = row0 + k * rpb;
        const bool in_range = (i64)orow32 < total_rows;
        i64 wrow = 0;
        if (in_range) {
            const unsigned hw = (unsigned)H * W;
            const unsigned b = orow32 / hw;
            const int rem = (int)(orow32 - b * hw);
            const int i0 = rem / W;
            int i = i0 - shift_h;
            if (i < 0) i += H;
            int j = rem - i0 * W - shift_w;
            if (j < 0) j += W;
            const int wi = i / ws, wj = j / ws;
            wrow = (((i64)b * nWh + wi) * nWw + wj) * (ws * ws) + (i - wi * ws) * ws + (j - wj * ws);
        }
#pragma unroll
        for (int j = 0; j < CPL; ++j) {
            const int c = sub + j * lpr;
            if (in_range && c < nch) {
                rw[k][j] = ldg16(win + wrow * C + c * 8);
                rs[k][j] = ldg16(shortcut + (i64)orow32 * C + c * 8);
            } else {
                rw[k][j] = make_uint4(0u, 0u, 0u, 0u);
                rs[k][j] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
    }
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
        const i64 orow = row0 + k * rpb;
        const bool in_range = orow < total_rows;
        float v[CPL][8];
#pragma unroll
        for (int j = 0; j < CPL; ++j) {
            const int c = sub + j * lpr;
            float a[8];
            unpack8(rw[k][j], v[j]);
            unpack8(rs[k][j], a);
#pragma unroll
            for (int e = 0; e < 8; ++e) v[j][e] += a[e];
            const uint4 y = pack8(v[j]);
            if (in_range && c < nch) stg16(out + orow * C + c * 8, y);
            unpack8(y, v[j]);  // LayerNorm sees the stored (rounded) values, as PyTorch's would
        }
        if (ln_out != nullptr) {  // uniform over the grid
            layer_norm_chunks<CPL>(v, sub, lpr, nch, C, eps, gamma, beta);
            if (in_range) {
#pragma unroll
                for (int j = 0; j < CPL; ++j) {
                    const int c = sub + j * lpr;
                    if (c < nch) stg16(ln_out + orow * C + c * 8, pack8(v[j]));
                }
            }
        }
    }
}

#define LN_SHIFT_PARTITION(CPL)                                                                    \
    extern "C" __global__ void __launch_bounds__(WO_THREADS) ln_shift_partition_##CPL(                    \
        const u16* __restrict__ x, const u16* __restrict__ gamma, const u16* __restrict__ beta,    \
        u16* __restrict__ out, int H, int W, int C, int ws, int shift_h, int shift_w, int nWh,      \
        int nWw, int lpr, float eps, i64 total_rows) {                                             \
        ln_shift_partition_impl<CPL>(x, gamma, beta, out, H, W, C, ws, shift_h, shift_w, nWh, nWw, \
                                     lpr, eps, total_rows);                                        \
    }
LN_SHIFT_PARTITION(1)
LN_SHIFT_PARTITION(2)
LN_SHIFT_PARTITION(3)
LN_SHIFT_PARTITION(4)

#define WINDOW_REVERSE_RESIDUAL(CPL)                                                               \
    extern "C" __global__ void __launch_bounds__(WO_THREADS) window_reverse_residual_##CPL(               \
        const u16* __restrict__ win, const u16* __restrict__ shortcut, u16* __restrict__ out,      \
        const u16* __restrict__ gamma, const u16* __restrict__ beta, u16* __restrict__ ln_out,     \
        int H, int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw, int lpr,          \
        float eps, i64 total_rows) {                                                               \
        window_reverse_residual_impl<CPL>(win, shortcut, out, gamma, beta, ln_out, H, W, C, ws,    \
                                          shift_h, shift_w, nWh, nWw, lpr, eps, total_rows);       \
    }
WINDOW_REVERSE_RESIDUAL(1)
WINDOW_REVERSE_RESIDUAL(2)
WINDOW_REVERSE_RESIDUAL(3)
WINDOW_REVERSE_RESIDUAL(4)

// ---- any C: one warp per row, scalar accesses ----

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void __launch_bounds__(256) ln_shift_partition_scalar(
    const u16* __restrict__ x, const u16* __restrict__ gamma, const u16* __restrict__ beta,
    u16* __restrict__ out, int H, int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw,
    int lpr_unused, float eps, i64 total_rows) {
    const i64 orow = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (orow >= total_rows) return;  // uniform per warp
    const int wsz = ws * ws;
    const int p = (int)(orow % wsz);
    const i64 win = orow / wsz;
    const int ww = (int)(win % nWw);
    const int wh = (int)((win / nWw) % nWh);
    const i64 b = win / ((i64)nWw * nWh);
    const int hh = wh * ws + p / ws;
    const int wp = ww * ws + p % ws;
    u16* o = out + orow * C;
    if (hh >= H || wp >= W) {
        for (int c = lane; c < C; c += 32) o[c] = 0;
        return;
    }
    int sh = hh + shift_h;
    if (sh >= H) sh -= H;
    int sw = wp + shift_w;
    if (sw >= W) sw -= W;
    const u16* xr = x + ((b * H + sh) * W + sw) * C;
    float s = 0.f;
    for (int c = lane; c < C; c += 32) s += ldg_f32(xr + c);
    const float mean = warp_sum(s) / (float)C;
    float q = 0.f;
    for (int c = lane; c < C; c += 32) {
        const float d = ldg_f32(xr + c) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(warp_sum(q) / (float)C + eps);
    for (int c = lane; c < C; c += 32) {
        const float gw = gamma != nullptr ? ldg_f32(gamma + c) : 1.f;
        const float bw = beta != nullptr ? ldg_f32(beta + c) : 0.f;
        o[c] = from_f32((ldg_f32(xr + c) - mean) * rstd * gw + bw);
    }
}

extern "C" __global__ void __launch_bounds__(256) window_reverse_residual_scalar(
    const u16* __restrict__ win, const u16* __restrict__ shortcut, u16* __restrict__ out,
    const u16* __restrict__ gamma, const u16* __restrict__ beta, u16* __restrict__ ln_out, int H,
    int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw, int lpr_unused, float eps,
    i64 total_rows) {
    const i64 orow = (i64)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (orow >= total_rows) return;  // uniform per warp
    const i64 hw = (i64)H * W;
    const i64 b = orow / hw;
    const int rem = (int)(orow - b * hw);
    int i = rem / W - shift_h;
    if (i < 0) i += H;
    int j = rem % W - shift_w;
    if (j < 0) j += W;
    const i64 wrow = ((b * nWh + i / ws) * nWw + j / ws) * (ws * ws) + (i % ws) * ws + (j % ws);
    const u16* wr = win + wrow * C;
    const u16* sr = shortcut + orow * C;
    u16* o = out + orow * C;
    float s = 0.f;
    for (int c = lane; c < C; c += 32) {
        const u16 y = from_f32(ldg_f32(wr + c) + ldg_f32(sr + c));
        o[c] = y;
        s += to_f32(y);
    }
    if (ln_out == nullptr) return;
    const float mean = warp_sum(s) / (float)C;
    float q = 0.f;
    for (int c = lane; c < C; c += 32) {
        const float d = to_f32(from_f32(ldg_f32(wr + c) + ldg_f32(sr + c))) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(warp_sum(q) / (float)C + eps);
    u16* lo = ln_out + orow * C;
    for (int c = lane; c < C; c += 32) {
        const float y = to_f32(from_f32(ldg_f32(wr + c) + ldg_f32(sr + c)));
        const float gw = gamma != nullptr ? ldg_f32(gamma + c) : 1.f;
        const float bw = beta != nullptr ? ldg_f32(beta + c) : 0.f;
        lo[c] = from_f32((y - mean) * rstd * gw + bw);
    }
}

// ---- backward passes ------------------------------------------------------------------------
// One warp per row (grid-stride), scalar accesses; LayerNorm's statistics recomputed from the
// saved row. The parameter gradients are summed per block in shared memory (dynamic: 2 x C
// floats) and added to the fp32 dgamma / dbeta (zeroed by the caller) with one atomic per
// channel and block.

// LayerNorm's input gradient of one row: rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma.
// Writes it (plus `add`, a row to add or null) to out0 and out1 (either may be null) and adds
// dy xhat and dy to the block's sums.
__device__ __forceinline__ void ln_backward_row(const u16* __restrict__ xr, const u16* __restrict__ gr,
                                                const u16* __restrict__ gamma, const u16* __restrict__ add,
                                                u16* __restrict__ out0, u16* __restrict__ out1, float* part,
                                                int C, float eps, int lane) {
    float s = 0.f;
    for (int c = lane; c < C; c += 32) s += ldg_f32(xr + c);
    const float mean = warp_sum(s) / (float)C;
    float q = 0.f;
    for (int c = lane; c < C; c += 32) {
        const float d = ldg_f32(xr + c) - mean;
        q += d * d;
    }
    const float rstd = rsqrtf(warp_sum(q) / (float)C + eps);
    float a = 0.f, b = 0.f;
    for (int c = lane; c < C; c += 32) {
        const float xhat = (ldg_f32(xr + c) - mean) * rstd;
        const float g = ldg_f32(gr + c) * (gamma != nullptr ? ldg_f32(gamma + c) : 1.f);
        a += g;
        b += g * xhat;
    }
    a = warp_sum(a) / (float)C;
    b = warp_sum(b) / (float)C;
    for (int c = lane; c < C; c += 32) {
        const float xhat = (ldg_f32(xr + c) - mean) * rstd;
        const float dy = ldg_f32(gr + c);
        const float g = dy * (gamma != nullptr ? ldg_f32(gamma + c) : 1.f);
        float v = rstd * (g - a - xhat * b);
        if (add != nullptr) v += ldg_f32(add + c);
        const u16 o = from_f32(v);
        if (out0 != nullptr) out0[c] = o;
        if (out1 != nullptr) out1[c] = o;
        if (part != nullptr) {
            atomicAdd(&part[c], dy * xhat);
            atomicAdd(&part[C + c], dy);
        }
    }
}

__device__ __forceinline__ void flush_parts(const float* part, float* __restrict__ dgamma, float* __restrict__ dbeta,
                                            int C) {
    __syncthreads();
    if (dgamma == nullptr) return;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        atomicAdd(dgamma + c, part[c]);
        if (dbeta != nullptr) atomicAdd(dbeta + c, part[C + c]);
    }
}

// Backward of ln_shift_partition_*: dy [windows rows, C] (the windows' gradient; padding rows
// have no source and are dropped) -> dx [B, H, W, C] at each window row's source row, with
// dgamma and dbeta (null: not wanted). x is the forward's input.
extern "C" __global__ void __launch_bounds__(256) ln_shift_partition_backward(
    const u16* __restrict__ dy, const u16* __restrict__ x, const u16* __restrict__ gamma, u16* __restrict__ dx,
    float* __restrict__ dgamma, float* __restrict__ dbeta, int H, int W, int C, int ws, int shift_h, int shift_w,
    int nWh, int nWw, float eps, i64 total_rows) {
    extern __shared__ float part[];
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) part[c] = 0.f;
    __syncthreads();
    const int lane = threadIdx.x % 32;
    const int warps = blockDim.x / 32;
    for (i64 orow = (i64)blockIdx.x * warps + threadIdx.x / 32; orow < total_rows; orow += (i64)gridDim.x * warps) {
        const i64 srow = partition_source_row((unsigned)orow, H, W, ws, shift_h, shift_w, nWh, nWw);
        if (srow < 0) continue;  // uniform per warp
        ln_backward_row(x + srow * C, dy + orow * C, gamma, nullptr, dx + srow * C, nullptr,
                        dgamma != nullptr ? part : nullptr, C, eps, lane);
    }
    flush_parts(part, dgamma, dbeta, C);
}

// Backward of window_reverse_residual_*: for each window row and its image row (the same map as
// the partition's), gy = g_out + LayerNorm's input gradient of g_ln at y (g_ln null: the forward
// had no LayerNorm; g_out null: y itself was not used), written to d_win (zero on padding rows)
// and d_shortcut (null: not wanted); y is the forward's residual sum.
extern "C" __global__ void __launch_bounds__(256) window_reverse_residual_backward(
    const u16* __restrict__ g_out, const u16* __restrict__ g_ln, const u16* __restrict__ y,
    const u16* __restrict__ gamma, u16* __restrict__ d_shortcut, u16* __restrict__ d_win, float* __restrict__ dgamma,
    float* __restrict__ dbeta, int H, int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw, float eps,
    i64 total_rows) {
    extern __shared__ float part[];
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) part[c] = 0.f;
    __syncthreads();
    const int lane = threadIdx.x % 32;
    const int warps = blockDim.x / 32;
    for (i64 orow = (i64)blockIdx.x * warps + threadIdx.x / 32; orow < total_rows; orow += (i64)gridDim.x * warps) {
        const i64 srow = partition_source_row((unsigned)orow, H, W, ws, shift_h, shift_w, nWh, nWw);
        u16* dw = d_win + orow * C;
        if (srow < 0) {  // uniform per warp
            for (int c = lane; c < C; c += 32) dw[c] = 0;
            continue;
        }
        u16* ds = d_shortcut != nullptr ? d_shortcut + srow * C : nullptr;
        const u16* go = g_out != nullptr ? g_out + srow * C : nullptr;
        if (g_ln != nullptr) {
            ln_backward_row(y + srow * C, g_ln + srow * C, gamma, go, dw, ds, dgamma != nullptr ? part : nullptr, C,
                            eps, lane);
        } else {
            for (int c = lane; c < C; c += 32) {
                const u16 v = go != nullptr ? go[c] : (u16)0;
                dw[c] = v;
                if (ds != nullptr) ds[c] = v;
            }
        }
    }
    flush_parts(part, dgamma, dbeta, C);
}
