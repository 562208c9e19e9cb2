// window.cu: the Swin window ops, each one pass over memory.
//
// ln_shift_partition_*:   out[win, p, :] = LN(x[b, (hh + sh) % H, (wp + sw) % W, :])  (zero where the
//                         window grid, padded to a multiple of ws, falls outside H x W)
//                         = timm's norm1 -> roll(-shift) -> pad -> window_partition.
// window_reverse_residual_*: y[b, i, j, :] = shortcut[b, i, j, :] + win[window of ((i - sh) % H,
//                         (j - sw) % W)], and optionally ln_out = LN(y)
//                         = timm's window_reverse -> crop -> roll(+shift) -> residual add (-> norm2).
//
// Rows are spread over groups of `lpr` lanes (a power of two); each lane holds CPL 16-byte chunks
// of its row in registers, so a row is read once and LayerNorm statistics (fp32, two-pass on the
// registers) need no second read. The `_scalar` versions take any C (one warp per row, elements
// re-read from global memory) and exist for shapes whose C is not a multiple of 8.

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

template <int CPL>
__device__ __forceinline__ void ln_shift_partition_impl(
    const u16* __restrict__ x, const u16* __restrict__ gamma, const u16* __restrict__ beta,
    u16* __restrict__ out, int H, int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw,
    int lpr, float eps, i64 total_rows) {
    const unsigned rows_per_block = blockDim.x / lpr;
    // 32-bit index math (the host checks rows < 2^31): 64-bit division is a long software routine.
    const unsigned orow32 = blockIdx.x * rows_per_block + threadIdx.x / lpr;
    const i64 orow = orow32;
    const int sub = threadIdx.x % lpr;
    const int nch = C / 8;
    const bool in_range = orow < total_rows;
    bool src_valid = false;
    i64 srow = 0;
    if (in_range) {
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
        if (hh < H && wp < W) {
            src_valid = true;
            int sh = hh + shift_h;
            if (sh >= H) sh -= H;
            int sw = wp + shift_w;
            if (sw >= W) sw -= W;
            srow = ((i64)b * H + sh) * W + sw;
        }
    }
    float v[CPL][8];
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = sub + k * lpr;
        if (src_valid && c < nch) {
            unpack8(ldg16(x + srow * C + c * 8), v[k]);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[k][e] = 0.f;
        }
    }
    layer_norm_chunks<CPL>(v, sub, lpr, nch, C, eps, gamma, beta);
    if (!in_range) return;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = sub + k * lpr;
        if (c < nch) {
            uint4 w = make_uint4(0u, 0u, 0u, 0u);  // zero padding outside the image
            if (src_valid) w = pack8(v[k]);
            stg16(out + orow * C + c * 8, w);
        }
    }
}

template <int CPL>
__device__ __forceinline__ void window_reverse_residual_impl(
    const u16* __restrict__ win, const u16* __restrict__ shortcut, u16* __restrict__ out,
    const u16* __restrict__ gamma, const u16* __restrict__ beta, u16* __restrict__ ln_out, int H,
    int W, int C, int ws, int shift_h, int shift_w, int nWh, int nWw, int lpr, float eps,
    i64 total_rows) {
    const unsigned rows_per_block = blockDim.x / lpr;
    const unsigned orow32 = blockIdx.x * rows_per_block + threadIdx.x / lpr;  // host: rows < 2^31
    const i64 orow = orow32;
    const int sub = threadIdx.x % lpr;
    const int nch = C / 8;
    const bool in_range = orow < total_rows;
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
    float v[CPL][8];
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = sub + k * lpr;
        if (in_range && c < nch) {
            float a[8];
            unpack8(ldg16(win + wrow * C + c * 8), v[k]);
            unpack8(ldg16(shortcut + orow * C + c * 8), a);
#pragma unroll
            for (int e = 0; e < 8; ++e) v[k][e] += a[e];
            const uint4 y = pack8(v[k]);
            stg16(out + orow * C + c * 8, y);
            unpack8(y, v[k]);  // LayerNorm sees the stored (rounded) values, as PyTorch's would
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[k][e] = 0.f;
        }
    }
    if (ln_out == nullptr) return;  // uniform over the grid
    layer_norm_chunks<CPL>(v, sub, lpr, nch, C, eps, gamma, beta);
    if (!in_range) return;
#pragma unroll
    for (int k = 0; k < CPL; ++k) {
        const int c = sub + k * lpr;
        if (c < nch) stg16(ln_out + orow * C + c * 8, pack8(v[k]));
    }
}

#define LN_SHIFT_PARTITION(CPL)                                                                    \
    extern "C" __global__ void __launch_bounds__(256) ln_shift_partition_##CPL(                    \
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
    extern "C" __global__ void __launch_bounds__(256) window_reverse_residual_##CPL(               \
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
