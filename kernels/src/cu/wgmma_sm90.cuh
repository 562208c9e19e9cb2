// wgmma_sm90.cuh: the sm_90a instructions of the Hopper kernels, one wrapper each: warpgroup
// MMAs (wgmma.mma_async with A and B from shared memory, or A from registers), their fences,
// commit and wait; shared-memory matrix descriptors of 128-byte-swizzled tiles; mbarriers; TMA
// tile loads through a CUtensorMap. They assemble only for an sm_90a target.
#ifndef FUSEPROF_WGMMA_SM90_CUH
#define FUSEPROF_WGMMA_SM90_CUH
#include "common.cuh"

typedef unsigned long long u64;

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

// Accumulator operands d[b..b + 15], each with constraint C ("+f": read and written; "=f":
// written only); WG_ACC32 etc.: the first 32, 48, 64, 96.
#define WG_ACC16(C, b)                                                                               \
    C(d[b]), C(d[b + 1]), C(d[b + 2]), C(d[b + 3]), C(d[b + 4]), C(d[b + 5]), C(d[b + 6]), C(d[b + 7]), \
        C(d[b + 8]), C(d[b + 9]), C(d[b + 10]), C(d[b + 11]), C(d[b + 12]), C(d[b + 13]), C(d[b + 14]), \
        C(d[b + 15])
#define WG_ACC32(C) WG_ACC16(C, 0), WG_ACC16(C, 16)
#define WG_ACC48(C) WG_ACC32(C), WG_ACC16(C, 32)
#define WG_ACC64(C) WG_ACC32(C), WG_ACC16(C, 32), WG_ACC16(C, 48)
#define WG_ACC96(C) WG_ACC64(C), WG_ACC16(C, 64), WG_ACC16(C, 80)
template <>
__device__ __forceinline__ void wgmma_ss<64>(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16." WG_TYPES " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC32("+f")
        : "l"(da), "l"(db), "r"(accumulate));
}

// As wgmma_ss<64>, but d = A B (scale-d 0) with d write-only: the first k-step of a product, so
// that no instruction but a wgmma defines its accumulators.
__device__ __forceinline__ void wgmma_ss64_first(float* d, u64 da, u64 db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16." WG_TYPES " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : WG_ACC32("=f")
        : "l"(da), "l"(db), "r"(0));
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

// d += A B (wgmma_rs_kb) and d = A B with d write-only (wgmma_rs_kb_first: the first k-step of a
// product, so that no instruction but a wgmma defines its accumulators), m64nNk16: A from
// registers (the mma.sync A-fragment layout per warp, 4 registers), B (16 x N, K-major: each of
// its N rows holds 16 contiguous k values) from shared memory; d holds N / 2 accumulators per
// thread. The fused MLP's second product (its hidden activations from registers, W2's rows
// K-major).
template <int N>
__device__ __forceinline__ void wgmma_rs_kb(float* d, const u32 a[4], u64 db);
template <int N>
__device__ __forceinline__ void wgmma_rs_kb_first(float* d, const u32 a[4], u64 db);

// Both specialisations for N: REGS names the N / 2 accumulator operands (%0 ..), AB A's four
// registers and B's descriptor, P the scale-d flag's operand, ACC the accumulator list.
#define WG_RS_KB(N, REGS, AB, P, ACC)                                                                \
    template <>                                                                                      \
    __device__ __forceinline__ void wgmma_rs_kb<N>(float* d, const u32 a[4], u64 db) {               \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N \
                     "k16." WG_TYPES " {" REGS "}, " AB ", p, 1, 1, 0;\n}\n"                           \
                     : ACC("+f")                                                                     \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));                  \
    }                                                                                                \
    template <>                                                                                      \
    __device__ __forceinline__ void wgmma_rs_kb_first<N>(float* d, const u32 a[4], u64 db) {         \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N \
                     "k16." WG_TYPES " {" REGS "}, " AB ", p, 1, 1, 0;\n}\n"                           \
                     : ACC("=f")                                                                     \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(0));                  \
    }
#define WG_REGS48 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
WG_RS_KB(96, WG_REGS48, "{%48, %49, %50, %51}, %52", "%53", WG_ACC48)
#define WG_REGS64 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63"
WG_RS_KB(128, WG_REGS64, "{%64, %65, %66, %67}, %68", "%69", WG_ACC64)
#define WG_REGS96 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
    "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, " \
    "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
    "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, " \
    "%92, %93, %94, %95"
WG_RS_KB(192, WG_REGS96, "{%96, %97, %98, %99}, %100", "%101", WG_ACC96)

// Moves a descriptor's start address by off (16-byte units): in the low 32 bits only, where the
// start address lives and cannot carry (shared memory ends below 2^18 bytes); 64-bit
// arithmetic cost ViT 1.8% (kernels/NOTES.md).
__device__ __forceinline__ u64 wg_desc_add(u64 d, u32 off) {
    u32 lo, hi;
    asm("mov.b64 {%0, %1}, %2;\n" : "=r"(lo), "=r"(hi) : "l"(d));
    lo += off;
    asm("mov.b64 %0, {%1, %2};\n" : "=l"(d) : "r"(lo), "r"(hi));
    return d;
}

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
// One box of tmap at (c0, c1, 0, 0) into dst, completing on bar: a 2-D view as the 4-D maps
// the launchers encode.
__device__ __forceinline__ void tma_load_xy(u32 dst, const WgTmaMap* tmap, int c0, int c1, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(tmap)), "r"(c0), "r"(c1), "r"(0), "r"(0), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void wg_bar_sync(int id) {  // the 128 threads of one warpgroup
    asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}

#endif  // FUSEPROF_WGMMA_SM90_CUH
