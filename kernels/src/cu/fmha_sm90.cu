// fmha_sm90.cu: the Hopper attention kernels (sm_90a: TMA loads, mbarrier hand-offs, wgmma),
// for head_dim-64 sequences of more than 64 tokens with at most a key-padding mask (ViT, BERT).
// The launcher sends everything else, and every other GPU, to fmha_long.cu / fmha_short.cu.
//
// Both are persistent: the grid is the CTAs the device keeps resident (2 per SM), 256 threads =
// two warpgroups of 64 query rows. Warp 0 is also the producer: it waits for a stage to be
// released, writes the stage's per-key terms (key-padding mask times log2 e, -inf past N) with
// all 32 lanes, and lane 0 issues the TMA copies. Each tile comes by one TMA copy into a
// 128-byte-swizzled tile through a tensor map of qkv as [64 elements][N tokens][3 x H slabs][B]
// (rows past N read as zeros). Every hand-off is an mbarrier: "full" when a stage's bytes have
// landed and all 32 producer lanes have arrived (an arrival releases only its own thread's
// writes), "empty" when all 256 threads are done with it; no CTA barrier inside the loop.
// A wait that polls ~16 M times traps rather than hanging the GPU.
//
// fmha_fwd_item_tma (65 to 128 tokens, BERT-128): one item = one (batch, head) whole; see below.
// fmha_fwd_long_tma (more than 128 tokens, ViT's 197): 64-key blocks with an online softmax
//   through a ring of TMA_RING stages, walking the items (batch, head, 128-row query block)
//   blockIdx.x, + gridDim.x, ... as one flat sequence of key blocks, so the ring runs on across
//   items and the next item's Q (two Q slots) loads during this one. The producer fills block
//   f + TMA_RING - 1 into block f - 1's stage while its warpgroup's S of block f is in flight,
//   so warpgroup 0 runs at most one block ahead of warpgroup 1. V has a barrier of its own per
//   stage ("fullv"), waited for just before P V, so S starts once Q and K are in.
//
// What bounds them (kernels/NOTES.md): latency per warpgroup (S, softmax and P V in sequence,
// the tensor pipe idle through the softmax), not instruction issue or DRAM. Variants measured
// and removed (the cp.async wgmma kernel fmha_fwd_long_wg and its overlapped loop, the
// producer's other placements, 2- and 4-stage rings, lazy rescaling) are in commit e2b39b2.
#include "fmha_sm90.cuh"

// FUSEPROF_ARCH_FEATURES: set by the launcher when it targets an `a` architecture.
#if defined(__CUDA_ARCH__) && !(defined(__CUDA_ARCH_FEAT_SM90_ALL) || FUSEPROF_ARCH_FEATURES)
#error "fmha_sm90.cu needs an sm_90a target (wgmma, TMA)"
#endif
#if HEAD_DIM != 64
#error "fmha_sm90.cu is written for head_dim 64"
#endif

// fmha_fwd_long_tma's stages (ViT 49.2 us at 3, 50.9 at 2, 49.8 at 4; the launcher sizes shared
// memory from the same value). An item needs at least TMA_RING - 1 key blocks, else the
// producer would wait for its own warpgroup's later release of a Q slot: the launcher sends
// nothing shorter.
#define TMA_RING 3

extern "C" __global__ void __launch_bounds__(WG_THREADS, WG_MIN_BLOCKS)
    fmha_fwd_long_tma(FMHA_PARAMS, const __grid_constant__ WgTmaMap tmap) {
    constexpr int n_ring = TMA_RING;
    extern __shared__ __align__(128) unsigned char wsmem[];
    // From a 1024-byte-aligned base (the swizzle atom): Q 2 slots x 2 tiles (rows q0.. and
    // q0 + 64..), K and V n_ring tiles each, kadd n_ring x 64 floats, then the barriers:
    // full[n_ring], empty[n_ring], qfree[2], fullv[n_ring].
    const u32 s_raw = smem_addr(wsmem);
    const u32 s_q = (s_raw + 1023u) & ~1023u;
    unsigned char* const sbase = wsmem + (s_q - s_raw);
    const u32 s_k = s_q + 4 * WG_TILE;
    const u32 s_v = s_k + n_ring * WG_TILE;
    float(*kadd)[BLOCK_N] = reinterpret_cast<float(*)[BLOCK_N]>(sbase + (4 + 2 * n_ring) * WG_TILE);
    const u32 s_full = s_v + n_ring * WG_TILE + n_ring * BLOCK_N * 4;
    const u32 s_empty = s_full + 8 * n_ring;
    const u32 s_qfree = s_empty + 8 * n_ring;
    const u32 s_fullv = s_qfree + 16;

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
        for (int i = 0; i < n_ring; ++i) mbar_init(s_fullv + 8 * i, 1);
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
            const u32 fullv = s_fullv + 8 * l_stage;  // where V's bytes land
            mbar_expect_tx(full, ((L.kb == 0 ? 2 : 0) + 1) * WG_TILE);
            mbar_expect_tx(fullv, WG_TILE);
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
                wg_block<decltype(nk)::value, decltype(kadd_on)::value != 0>(
                    st, qd, kd, vd, ka, scale_log2, tq, keep,
                    [&]() {  // block f + n_ring - 1, into block f - 1's stage, while S is in flight
                        if (producer) produce();
                    },
                    [&]() { mbar_wait(s_fullv + 8 * c_stage, c_par); });
            });
        } else if (producer) {
            produce();
        }
        // This thread is done with the stage. Every thread arrives: an arrival releases only its
        // own thread's reads (the per-key terms), and a warp's wgmma waits cover only its rows.
        mbar_arrive(s_empty + 8 * c_stage);
        if (C.kb == nkb - 1) {
            if (act) {
                wg_store(st, sbase + (c_qslot * 2 + wg) * WG_TILE + wwarp * 2048, out, C.b, C.h, N, H,
                               q0 + wg * 64 + wwarp * 16, g, tq, lane);
            }
            wg_bar_sync(1 + wg);  // the warpgroup's four warps have stored
            if ((tid & 127) == 0) mbar_arrive(s_qfree + 8 * c_qslot);
        }
        if (C.next(nkb, nq, H, gq, gh, gb)) c_qslot ^= 1;
        c_stage = c_stage + 1 == n_ring ? 0 : c_stage + 1;
    }
}

// ---- fmha_fwd_item_tma: sequences of 65 to 128 tokens, one 128-key block per item ----
//
// BERT-128's items have two 64-key blocks, so fmha_fwd_long_tma pays every block's hand-off
// (a "full" wait, S, its wait, the online softmax's rescale, P V, its wait) twice per item and
// splits the key loads in two. This kernel takes a whole item at once, as cuDNN's sm90 kernel
// does (64 x 128 x 64 tiles): a stage holds the item's Q, K and V (128 rows each, one TMA box of
// 64 x 128 each), S is 64 x 128 per warpgroup (64 accumulators per thread), the softmax is a
// plain one, P V takes 8 k16 steps (O is not live before the first, which writes it, so the
// kernel fits 128 registers without spills). Two stages: the producer (warp 0, as in
// fmha_fwd_long_tma) loads item 0 before the loop and item i + 1 at the top of item i, as soon
// as item i - 1's stage is released, before item i's own wait (25.4 us on BERT-128 without a
// mask, against 26.2 with the load under item i's S and 26.0 with two items loaded
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
        wg_s_issue<64>(s, qd, kd);
        wg_s_issue<64>(s + 32, qd, wg_desc_add(kd, (64 * 128) >> 4));
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
        wg_store(st, sbase + c_stage * ITEM_STAGE + wg * WG_TILE + wwarp * 2048, out, b, h, N, H,
                       wg * 64 + wwarp * 16, g, tq, lane);
        mbar_arrive(s_empty + 8 * c_stage);  // after the store: it staged the output in Q's rows
        c_stage ^= 1;
    }
}
