//! Fused attention for short sequences (`fmha.cu`): Swin window attention, ViT, BERT.
//!
//! Input is the QKV projection's output as it lies, `[batch * seq, 3, heads, head_dim]`; output
//! is `[batch * seq, heads * head_dim]`, ready for the output projection. Optional additive terms:
//! a per-head bias `[heads, seq, seq]` (Swin's relative-position bias, gathered once) and a mask,
//! either per window `[n_windows, seq, seq]` used by batch entry `b % n_windows` (Swin's shifted
//! windows) or per key `[batch, seq]` (BERT's key-padding mask, already additive).

use crate::dtype::DType;
use crate::error::{invalid, Result};
use crate::runtime::{
    encode_tensor_map, tuning_value, Args, DevPtr, Gpu, LaunchConfig, RawStream, Source,
    TmaGeometry,
};

/// Head dimensions the kernel is built for.
pub const SUPPORTED_HEAD_DIMS: [u32; 2] = [32, 64];
/// Query rows per CTA of the short and window kernels (4 warps x 16 rows), and the longest
/// sequence they take.
pub const BLOCK_M: usize = 64;
/// Query rows per CTA of `fmha_fwd_long` (4 warps x two 16-row tiles).
pub const LONG_BLOCK_M: usize = 128;
/// Keys per block of `fmha_fwd_long`.
const LONG_BLOCK_N: usize = 64;
/// Stages of `fmha_fwd_long`'s shared-memory ring of key blocks: the kernel's `LONG_RING` tuning
/// constant (2, the double buffer, unless `FUSEPROF_KERNELS_DEFINES` sets it), read the same way
/// so that the shared memory fits the kernel.
fn long_ring() -> usize {
    tuning_value("LONG_RING", 2).max(1) as usize
}
const THREADS: u32 = 128;
/// Threads of `fmha_fwd_long_wg`: two warpgroups of 64 query rows each.
const WG_THREADS: u32 = 256;
/// Keys (and query rows) of `fmha_fwd_item_tma`'s one block per item.
const ITEM_KEYS: usize = 128;

/// `fmha_fwd_long_wg`'s `WG_OVERLAP` tuning constant: one key block at a time (0, the default),
/// or S of the next block issued right behind P V of this one (1; slower as ptxas compiles it,
/// kernels/NOTES.md round 7).
fn wg_overlap() -> bool {
    tuning_value("WG_OVERLAP", 0) != 0
}
/// Stages of `fmha_fwd_long_wg`'s ring of key blocks: its `WG_RING` tuning constant (2 to 4,
/// default 2; with `WG_OVERLAP` at least 3, default 3), read the same way so that the shared
/// memory fits the kernel.
fn wg_ring() -> usize {
    let (low, default) = if wg_overlap() { (3, 3) } else { (2, 2) };
    tuning_value("WG_RING", default).clamp(low, 4) as usize
}
/// `WG_PERSIST=0` (a host-side tuning constant) launches `fmha_fwd_long_wg` with one CTA per
/// item instead of the CTAs the device keeps resident; the kernel strides over items either way.
fn wg_persistent() -> bool {
    tuning_value("WG_PERSIST", 1) != 0
}

/// False when `FUSEPROF_KERNELS_DEFINES` has `LONG_WGMMA=0`: then no call runs
/// `fmha_fwd_long_wg` and fmha.cu is built for the plain `compute_90` target on sm_90.
pub fn wgmma_enabled() -> bool {
    tuning_value("LONG_WGMMA", 1) != 0
}

/// False when `FUSEPROF_KERNELS_DEFINES` has `LONG_TMA=0`: then the calls `fmha_fwd_long_tma`
/// takes (TMA loads, mbarrier hand-offs; kernels/NOTES.md rounds 8-9) go back to
/// `fmha_fwd_long_wg` (sequences over 128) or `fmha_fwd_long`.
pub fn tma_enabled() -> bool {
    tuning_value("LONG_TMA", 1) != 0
}
/// `TMA_MIN_SEQ=n` (host side): sequences longer than n (default 64: BERT's 128 included, 27.8
/// against 37.4 us on `fmha_fwd_long`, NOTES.md round 9) take `fmha_fwd_long_tma`.
fn tma_min_seq() -> usize {
    tuning_value("TMA_MIN_SEQ", LONG_BLOCK_N as u32) as usize
}
/// Stages of `fmha_fwd_long_tma`'s ring: its `TMA_RING` tuning constant (2 to 4, default 3).
fn tma_ring() -> usize {
    tuning_value("TMA_RING", 3).clamp(2, 4) as usize
}

/// `TMA_ITEM=0` (host side) sends the calls with 65 to 128 tokens (BERT-128) back to
/// `fmha_fwd_long_tma`; by default `fmha_fwd_item_tma` takes them, one 128-key block per item
/// (kernels/NOTES.md round 11: BERT-128 no mask 25.4 against 26.7 us).
fn tma_item() -> bool {
    tuning_value("TMA_ITEM", 1) != 0
}

/// How the optional mask is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionMask {
    None,
    /// `[n_windows, seq, seq]`; batch entry `b` uses window `b % n_windows`.
    Windows {
        n_windows: usize,
    },
    /// `[batch, seq]`: one additive value per key, shared by all queries and heads.
    KeyPadding,
    /// A precombined additive tensor `[n_entries, heads, seq, padded_seq(seq)]` (bias + window
    /// mask, -inf in the padding columns, made once by [`launch_attention_combine`]); batch entry `b` uses entry
    /// `b % n_entries`. Needs `seq <= 64` and `has_bias == false` (the bias is inside).
    Combined {
        n_entries: usize,
    },
}

/// `seq` rounded up to a multiple of 8: the row length of a [`AttentionMask::Combined`] tensor,
/// so each row is whole 16-byte chunks.
pub fn padded_seq(seq: usize) -> usize {
    seq.div_ceil(8) * 8
}

/// Shared-memory row stride (elements) of the additive tile in `fmha_fwd_window`: the padded
/// row, plus 8 when its length in 32-bit words is a multiple of 8 (which would put the 8 row
/// groups of an mma fragment on the same banks).
pub fn add_smem_stride(seq: usize) -> usize {
    let np = padded_seq(seq);
    if np % 16 == 8 {
        np
    } else {
        np + 8
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionParams {
    pub dtype: DType,
    /// Number of independent sequences (windows x images for Swin).
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub head_dim: usize,
    /// Multiplies q k^T; usually `head_dim^-0.5`.
    pub scale: f32,
    pub has_bias: bool,
    pub mask: AttentionMask,
}

impl AttentionParams {
    pub fn validate(&self) -> Result<()> {
        if !SUPPORTED_HEAD_DIMS.contains(&(self.head_dim as u32)) {
            return Err(invalid(format!(
                "head_dim {} is not supported (supported: {:?})",
                self.head_dim, SUPPORTED_HEAD_DIMS
            )));
        }
        if self.batch == 0 || self.seq == 0 || self.heads == 0 {
            return Err(invalid(format!(
                "attention needs batch, seq and heads >= 1 (got {}, {}, {})",
                self.batch, self.seq, self.heads
            )));
        }
        if !self.scale.is_finite() {
            return Err(invalid("scale must be finite"));
        }
        if let AttentionMask::Windows { n_windows } = self.mask {
            if n_windows == 0 {
                return Err(invalid("a window mask needs n_windows >= 1"));
            }
        }
        if let AttentionMask::Combined { n_entries } = self.mask {
            if n_entries == 0 {
                return Err(invalid("a combined additive tensor needs n_entries >= 1"));
            }
            if self.seq > BLOCK_M {
                return Err(invalid(format!(
                    "a combined additive tensor needs seq <= {BLOCK_M} (got {})",
                    self.seq
                )));
            }
            if self.has_bias {
                return Err(invalid(
                    "a combined additive tensor already holds the bias (has_bias must be false)",
                ));
            }
        }
        let tokens = self.batch as u64 * self.seq as u64;
        if tokens * 3 * self.heads as u64 * self.head_dim as u64 > i64::MAX as u64 / 4
            || self.seq > i32::MAX as usize
            || self.batch > i32::MAX as usize
            || self.batch as u64 * self.heads as u64 > i32::MAX as u64
        {
            return Err(invalid("attention shape too large"));
        }
        self.launch_config().map(|_| ())
    }

    /// Query blocks per (batch, head): one for the short and window kernels (seq <= 64),
    /// `seq / 128` rounded up for `fmha_fwd_long`.
    pub fn n_qblocks(&self) -> usize {
        if self.kernel_name() == "fmha_fwd_long" {
            self.seq.div_ceil(LONG_BLOCK_M)
        } else {
            self.seq.div_ceil(BLOCK_M)
        }
    }

    /// One CTA per (batch, head, 64-query block), query block fastest so the heads of one
    /// sequence run side by side and share DRAM pages of the interleaved QKV rows. For the
    /// persistent `fmha_fwd_window` this is the upper bound (one CTA per item); the launcher
    /// caps it at the CTAs the device keeps resident ([`Self::window_grid`]).
    pub fn launch_config(&self) -> Result<LaunchConfig> {
        let mut cfg = LaunchConfig::linear(
            self.batch as u64 * self.heads as u64 * self.n_qblocks() as u64,
            THREADS,
        )?;
        match self.kernel_name() {
            "fmha_fwd_window" => cfg.shared_bytes = self.window_smem_bytes() as u32,
            "fmha_fwd_long" => cfg.shared_bytes = self.long_smem_bytes(long_ring()) as u32,
            _ => {}
        }
        Ok(cfg)
    }

    /// True when the persistent `fmha_fwd_window` runs this call: seq <= 64 with a combined
    /// additive tensor or no additive term at all.
    pub fn uses_window_kernel(&self) -> bool {
        self.seq <= BLOCK_M
            && match self.mask {
                AttentionMask::Combined { .. } => true,
                AttentionMask::None => !self.has_bias,
                _ => false,
            }
    }

    /// `fmha_fwd_window` (persistent, two cp.async stages) for seq <= 64 with a combined or no
    /// additive term; `fmha_fwd_short` (one key block, separate bias + mask summed in shared
    /// memory per CTA) for the other seq <= 64 calls; `fmha_fwd_long` (128 query rows per CTA,
    /// 64-key blocks through a ring of shared-memory stages, online softmax) beyond.
    pub fn kernel_name(&self) -> &'static str {
        if self.uses_window_kernel() {
            "fmha_fwd_window"
        } else if self.seq <= BLOCK_M {
            "fmha_fwd_short"
        } else {
            "fmha_fwd_long"
        }
    }

    /// True when `fmha_fwd_long_wg` takes this call on an sm_90 GPU with `LONG_TMA=0` (by default
    /// `fmha_fwd_long_tma` takes these calls, [`Self::tma_eligible`]): an `fmha_fwd_long` call at
    /// head_dim 64 whose additive term is at most one value per key (no bias, no window mask),
    /// longer than 128 (more than two key blocks). Measured on the H100 (kernels/NOTES.md round
    /// 6): ViT (197) 69.6 vs 75.3 us on `fmha_fwd_long`; at BERT's 128 the mma.sync kernel is as
    /// fast with the key mask (37.7 vs 38.0 us) and faster without (33.9 vs 37.0 us).
    pub fn wgmma_eligible(&self) -> bool {
        self.wgmma_shape() && self.seq > LONG_BLOCK_M
    }

    /// True when `fmha_fwd_long_tma` can take this call with a ring of `ring` stages and is
    /// asked to (`min_seq`: the shortest sequence sent to it is `min_seq + 1`): the shape
    /// `fmha_fwd_long_wg` takes, with at least `ring - 1` key blocks per item (the producer fills
    /// a query slot only after the item two before it has been stored).
    pub fn tma_eligible(&self, ring: usize, min_seq: usize) -> bool {
        self.wgmma_shape()
            && self.seq > min_seq
            && self.seq.div_ceil(LONG_BLOCK_N) >= ring.saturating_sub(1)
    }

    fn wgmma_shape(&self) -> bool {
        self.kernel_name() == "fmha_fwd_long"
            && self.head_dim == 64
            && !self.has_bias
            && matches!(self.mask, AttentionMask::None | AttentionMask::KeyPadding)
    }

    /// Dynamic shared memory of `fmha_fwd_long_wg` with a ring of `ring` stages: two slots of 128
    /// query rows (this item's and the next one's) and `ring` x (64 key + 64 value rows) of 64
    /// elements in the core-matrix layout (no padding), `ring` 64-float rows of per-key terms.
    /// The output is staged in the consumed query rows.
    pub fn wg_smem_bytes(&self, ring: usize) -> usize {
        (2 * LONG_BLOCK_M + 2 * ring * LONG_BLOCK_N) * self.head_dim * self.dtype.size_bytes()
            + ring * LONG_BLOCK_N * 4
    }

    /// True when `fmha_fwd_item_tma` can take a call `fmha_fwd_long_tma` takes: one key block of
    /// at most 128 keys per item (and one 128-row query block).
    pub fn item_eligible(&self) -> bool {
        self.seq > LONG_BLOCK_N && self.seq <= ITEM_KEYS
    }

    /// Dynamic shared memory of `fmha_fwd_item_tma`: up to 1023 bytes to align the tiles to 1024,
    /// two stages of Q, K and V (128 rows of 64 elements each), two rows of 128 per-key terms,
    /// and six mbarriers (full, fullv and empty per stage).
    pub fn item_smem_bytes(&self) -> usize {
        1024 + 2 * 3 * ITEM_KEYS * self.head_dim * self.dtype.size_bytes()
            + 2 * ITEM_KEYS * 4
            + 6 * 8
    }

    /// Dynamic shared memory of `fmha_fwd_long_tma`: `fmha_fwd_long_wg`'s, up to 1023 bytes to
    /// align the tiles to 1024 (the swizzle atom), and the mbarriers (full and empty per stage,
    /// two Q-slot ones, and the V tiles' own per stage, which only `TMA_SPLITV=1` uses), 8
    /// bytes each.
    pub fn tma_smem_bytes(&self, ring: usize) -> usize {
        self.wg_smem_bytes(ring) + 1024 + (3 * ring + 2) * 8
    }

    /// The TMA view of `qkv` that the TMA kernels load through: `[head_dim elements][seq
    /// tokens][3 x heads slabs][batch]`, one box of `box_rows` token rows of one head's key,
    /// value or query (64 for `fmha_fwd_long_tma`, 128 for `fmha_fwd_item_tma`); rows past `seq`
    /// read as zeros.
    pub fn tma_geometry(&self, box_rows: usize) -> TmaGeometry {
        let es = self.dtype.size_bytes() as u64;
        let (d, n, slabs, b) = (
            self.head_dim as u64,
            self.seq as u64,
            3 * self.heads as u64,
            self.batch as u64,
        );
        TmaGeometry {
            dims: [d, n, slabs, b],
            strides: [slabs * d * es, d * es, n * slabs * d * es],
            boxdim: [self.head_dim as u32, box_rows as u32, 1, 1],
        }
    }

    /// Items of `fmha_fwd_long_wg` (batch x heads x 128-row query blocks) and its grid: one CTA
    /// per item, at most `resident` CTAs when persistent.
    pub fn wg_grid(&self, resident: u64, persistent: bool) -> u64 {
        let items = self.batch as u64 * self.heads as u64 * self.n_qblocks() as u64;
        if persistent {
            items.min(resident.max(1))
        } else {
            items
        }
    }

    /// Dynamic shared memory of `fmha_fwd_window`: two stages of q, k, v (64 rows of
    /// head_dim + 8) and the additive tile (seq rows of [`add_smem_stride`]).
    pub fn window_smem_bytes(&self) -> usize {
        let qkv = 3 * BLOCK_M * (self.head_dim + 8);
        let add = if matches!(self.mask, AttentionMask::Combined { .. }) {
            self.seq * add_smem_stride(self.seq)
        } else {
            0
        };
        2 * (qkv + add) * self.dtype.size_bytes()
    }

    /// Dynamic shared memory of `fmha_fwd_long` with a ring of `ring` stages: 128 query rows,
    /// `ring` x (64 key + 64 value rows) of head_dim + 8 elements, `ring` 64-float rows of
    /// per-key additive terms.
    pub fn long_smem_bytes(&self, ring: usize) -> usize {
        (LONG_BLOCK_M + 2 * ring * LONG_BLOCK_N) * (self.head_dim + 8) * self.dtype.size_bytes()
            + ring * LONG_BLOCK_N * 4
    }

    /// Grid of the persistent `fmha_fwd_window`: one CTA per item, at most `resident` CTAs.
    pub fn window_grid(&self, resident: u64) -> u64 {
        (self.batch as u64 * self.heads as u64).min(resident.max(1))
    }

    /// `(n_mask, mask_row_stride)` as the kernel reads them.
    pub fn mask_args(&self) -> (usize, usize) {
        match self.mask {
            AttentionMask::None => (1, 0),
            AttentionMask::Windows { n_windows } => (n_windows, self.seq),
            AttentionMask::KeyPadding => (self.batch, 0),
            AttentionMask::Combined { n_entries } => (n_entries, padded_seq(self.seq)),
        }
    }

    /// Elements of each buffer: (qkv, out, bias, mask).
    pub fn sizes(&self) -> (usize, usize, usize, usize) {
        let t = self.batch * self.seq;
        let bias = if self.has_bias {
            self.heads * self.seq * self.seq
        } else {
            0
        };
        let mask = match self.mask {
            AttentionMask::None => 0,
            AttentionMask::Windows { n_windows } => n_windows * self.seq * self.seq,
            AttentionMask::KeyPadding => self.batch * self.seq,
            AttentionMask::Combined { n_entries } => {
                n_entries * self.heads * self.seq * padded_seq(self.seq)
            }
        };
        (
            t * 3 * self.heads * self.head_dim,
            t * self.heads * self.head_dim,
            bias,
            mask,
        )
    }

    /// Bytes that must cross device memory at least once (q, k, v, out; bias and mask once).
    pub fn min_bytes(&self) -> u64 {
        let (qkv, out, bias, mask) = self.sizes();
        ((qkv + out + bias + mask) * self.dtype.size_bytes()) as u64
    }

    /// Floating-point operations of q k^T and p v.
    pub fn flops(&self) -> u64 {
        4 * (self.batch * self.heads * self.seq * self.seq * self.head_dim) as u64
    }
}

/// Device buffers of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttentionBuffers {
    pub qkv: DevPtr,
    pub out: DevPtr,
    pub bias: Option<DevPtr>,
    pub mask: Option<DevPtr>,
}

/// Launch the fused attention.
///
/// # Safety
/// Every pointer must be a device allocation of the current context holding at least the
/// element counts of [`AttentionParams::sizes`], `qkv` and `out` 16-byte aligned, and `out` must
/// not overlap the inputs.
pub unsafe fn launch_attention(
    gpu: &Gpu,
    p: &AttentionParams,
    bufs: &AttentionBuffers,
    stream: RawStream,
) -> Result<()> {
    p.validate()?;
    if !bufs.qkv.is_multiple_of(16) || !bufs.out.is_multiple_of(16) {
        return Err(invalid("qkv and out must be 16-byte aligned"));
    }
    if p.has_bias != bufs.bias.is_some() {
        return Err(invalid("has_bias and the bias buffer disagree"));
    }
    if (p.mask != AttentionMask::None) != bufs.mask.is_some() {
        return Err(invalid("mask kind and the mask buffer disagree"));
    }
    let (n_mask, row_stride) = p.mask_args();
    let mut cfg = p.launch_config()?;
    if p.uses_window_kernel() {
        let name = p.kernel_name();
        let resident = gpu.resident_ctas(
            Source::Fmha,
            p.dtype,
            p.head_dim as u32,
            name,
            THREADS,
            cfg.shared_bytes,
        )?;
        cfg.grid.0 = p.window_grid(resident) as u32;
        let args = Args::default()
            .ptr(bufs.qkv)
            .ptr(bufs.out)
            .ptr(bufs.mask.unwrap_or(0))
            .i32(p.batch as i32)
            .i32(p.seq as i32)
            .i32(p.heads as i32)
            .i32(n_mask as i32)
            .i32(padded_seq(p.seq) as i32)
            .i32(add_smem_stride(p.seq) as i32)
            .f32(p.scale * std::f32::consts::LOG2_E);
        // SAFETY: the argument list matches fmha_fwd_window's; the kernel strides over the
        // batch x heads items whatever the grid; the combined tensor holds n_entries x heads x
        // seq x padded_seq elements (the caller's contract).
        return unsafe {
            gpu.launch(
                Source::Fmha,
                p.dtype,
                p.head_dim as u32,
                name,
                cfg,
                stream,
                args,
            )
        };
    }
    let mut name = p.kernel_name();
    let mut tensor_map = None;
    let tma = tma_enabled() && p.tma_eligible(tma_ring(), tma_min_seq());
    if (tma || p.wgmma_eligible()) && wgmma_enabled() && gpu.current_arch()? == (9, 0) {
        let smem = if tma {
            // one 128-key block per item, or 64-key blocks through a ring
            let (kernel, box_rows, smem) = if tma_item() && p.item_eligible() {
                ("fmha_fwd_item_tma", ITEM_KEYS, p.item_smem_bytes())
            } else {
                (
                    "fmha_fwd_long_tma",
                    LONG_BLOCK_N,
                    p.tma_smem_bytes(tma_ring()),
                )
            };
            name = kernel;
            let geometry = p.tma_geometry(box_rows);
            tensor_map = Some(encode_tensor_map(bufs.qkv, p.dtype, &geometry)?);
            smem
        } else {
            name = "fmha_fwd_long_wg";
            p.wg_smem_bytes(wg_ring())
        };
        cfg.block.0 = WG_THREADS;
        cfg.shared_bytes = smem as u32;
        let resident = gpu.resident_ctas(
            Source::Fmha,
            p.dtype,
            p.head_dim as u32,
            name,
            WG_THREADS,
            cfg.shared_bytes,
        )?;
        cfg.grid.0 = p.wg_grid(resident, wg_persistent()) as u32;
    }
    let mut args = Args::default()
        .ptr(bufs.qkv)
        .ptr(bufs.out)
        .ptr(bufs.bias.unwrap_or(0))
        .ptr(bufs.mask.unwrap_or(0))
        .i32(p.batch as i32)
        .i32(p.seq as i32)
        .i32(p.heads as i32)
        .i32(n_mask as i32)
        .i32(row_stride as i32)
        .f32(p.scale * std::f32::consts::LOG2_E)
        .i32(p.n_qblocks() as i32);
    if let Some(m) = tensor_map {
        args = args.tensor_map(m);
    }
    // SAFETY: the argument list matches FMHA_PARAMS of the short and long kernels (the long
    // ones' shared memory was sized from the ring they compiled with; the wgmma ones take only
    // calls without bias or per-row mask, as wgmma_eligible checks; the TMA ones also take the
    // tensor map of qkv, encoded above with their box: 64 rows, or 128 for fmha_fwd_item_tma,
    // which takes only sequences of at most 128, one query block per (batch, head), as
    // item_eligible checks, in the shared memory item_smem_bytes gives); pointer extents are the
    // caller's contract (documented above) and the grid covers exactly batch x heads x query
    // blocks (one query block per (batch, head) for the short kernel, 128 rows for the long
    // ones; the wgmma kernels stride over those items whatever their grid).
    unsafe {
        gpu.launch(
            Source::Fmha,
            p.dtype,
            p.head_dim as u32,
            name,
            cfg,
            stream,
            args,
        )
    }
}

/// Launch `fmha_add_combine`: `add[e, h, r, c] = bias[h, r, c] + mask[e, r, c]` for `c < seq`,
/// -inf for the padding columns (they mask the padded keys), into a `[n_entries, heads, seq, padded_seq(seq)]` tensor (see
/// [`AttentionMask::Combined`]). A one-time setup per layer: bias and mask are constants.
/// `n_entries` is the mask's window count, or 1 without a mask.
///
/// # Safety
/// `bias` (`[heads, seq, seq]`), `mask` (`[n_entries, seq, seq]`) and `out` must be device
/// allocations of the current context of those extents; `out` 16-byte aligned and not
/// overlapping the inputs.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_attention_combine(
    gpu: &Gpu,
    dtype: DType,
    seq: usize,
    heads: usize,
    n_entries: usize,
    bias: Option<DevPtr>,
    mask: Option<DevPtr>,
    out: DevPtr,
    stream: RawStream,
) -> Result<()> {
    if seq == 0 || heads == 0 || n_entries == 0 {
        return Err(invalid("combine needs seq, heads and n_entries >= 1"));
    }
    if seq > BLOCK_M {
        return Err(invalid(format!(
            "a combined additive tensor needs seq <= {BLOCK_M} (got {seq})"
        )));
    }
    if !out.is_multiple_of(16) {
        return Err(invalid("the combined tensor must be 16-byte aligned"));
    }
    if mask.is_none() && n_entries != 1 {
        return Err(invalid("without a mask n_entries must be 1"));
    }
    let total = n_entries as u64 * heads as u64 * seq as u64 * padded_seq(seq) as u64;
    if total > i32::MAX as u64 {
        return Err(invalid(
            "combined additive tensor too large (2^31 elements)",
        ));
    }
    let cfg = LaunchConfig::linear(total.div_ceil(256).min(4096), 256)?;
    let args = Args::default()
        .ptr(bias.unwrap_or(0))
        .ptr(mask.unwrap_or(0))
        .ptr(out)
        .i32(seq as i32)
        .i32(heads as i32)
        .i32(n_entries as i32)
        .i32(padded_seq(seq) as i32);
    // SAFETY: the argument list matches fmha_add_combine's; the grid-stride loop covers exactly
    // `total` output elements; input extents are the caller's contract.
    unsafe {
        gpu.launch(
            Source::Fmha,
            dtype,
            32,
            "fmha_add_combine",
            cfg,
            stream,
            args,
        )
    }
}

/// CPU reference of [`launch_attention_combine`].
pub fn combine_reference(
    seq: usize,
    heads: usize,
    n_entries: usize,
    bias: Option<&[f32]>,
    mask: Option<&[f32]>,
) -> Vec<f32> {
    let np = padded_seq(seq);
    let mut out = vec![f32::NEG_INFINITY; n_entries * heads * seq * np];
    for e in 0..n_entries {
        for h in 0..heads {
            for r in 0..seq {
                for c in 0..seq {
                    let mut v = 0f32;
                    if let Some(b) = bias {
                        v += b[(h * seq + r) * seq + c];
                    }
                    if let Some(m) = mask {
                        v += m[(e * seq + r) * seq + c];
                    }
                    out[((e * heads + h) * seq + r) * np + c] = v;
                }
            }
        }
    }
    out
}

/// CPU reference in f64: the function the kernel computes, on f32 inputs.
pub fn attention_reference(
    p: &AttentionParams,
    qkv: &[f32],
    bias: Option<&[f32]>,
    mask: Option<&[f32]>,
) -> Vec<f32> {
    let (n, h, d) = (p.seq, p.heads, p.head_dim);
    let (qkv_len, out_len, _, _) = p.sizes();
    assert_eq!(qkv.len(), qkv_len, "qkv length");
    let (n_mask, row_stride) = p.mask_args();
    let at = |b: usize, row: usize, which: usize, head: usize, k: usize| -> f64 {
        qkv[(((b * n + row) * 3 + which) * h + head) * d + k] as f64
    };
    let mut out = vec![0f32; out_len];
    let mut scores = vec![0f64; n];
    for b in 0..p.batch {
        for head in 0..h {
            for i in 0..n {
                let mut max = f64::NEG_INFINITY;
                for (j, s) in scores.iter_mut().enumerate() {
                    let mut dot = 0f64;
                    for k in 0..d {
                        dot += at(b, i, 0, head, k) * at(b, j, 1, head, k);
                    }
                    let mut v = dot * p.scale as f64;
                    if let Some(bias) = bias {
                        v += bias[(head * n + i) * n + j] as f64;
                    }
                    if let Some(mask) = mask {
                        if let AttentionMask::Combined { .. } = p.mask {
                            // [n_entries, heads, seq, padded_seq]
                            v += mask[(((b % n_mask) * h + head) * n + i) * row_stride + j] as f64;
                        } else {
                            let entry = if row_stride == 0 { n } else { n * row_stride };
                            v += mask[(b % n_mask) * entry + i * row_stride + j] as f64;
                        }
                    }
                    *s = v;
                    max = max.max(v);
                }
                let mut sum = 0f64;
                for s in scores.iter_mut() {
                    *s = (*s - max).exp();
                    sum += *s;
                }
                for k in 0..d {
                    let mut acc = 0f64;
                    for (j, s) in scores.iter().enumerate() {
                        acc += s * at(b, j, 2, head, k);
                    }
                    out[(b * n + i) * h * d + head * d + k] = (acc / sum) as f32;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(batch: usize, seq: usize, heads: usize, head_dim: usize) -> AttentionParams {
        AttentionParams {
            dtype: DType::F16,
            batch,
            seq,
            heads,
            head_dim,
            scale: (head_dim as f32).powf(-0.5),
            has_bias: false,
            mask: AttentionMask::None,
        }
    }

    /// Deterministic pseudo-random values in [-1, 1).
    fn noise(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..len)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn launch_config_for_the_target_shapes() {
        let swin1 = params(4096, 49, 3, 32);
        assert_eq!(swin1.launch_config().unwrap().grid, (4096 * 3, 1, 1));
        assert_eq!(swin1.launch_config().unwrap().block, (128, 1, 1));
        let vit = params(64, 197, 12, 64);
        assert_eq!(vit.n_qblocks(), 2);
        assert_eq!(vit.launch_config().unwrap().grid.0, 64 * 12 * 2);
        // Q 128 rows + K, V 2 x 64 rows each, of 72 fp16; 2 x 64 fp32 key terms
        assert_eq!(vit.long_smem_bytes(2), 384 * 72 * 2 + 512);
        // four stages: 91 KB, still two CTAs per SM's 228 KB
        assert_eq!(vit.long_smem_bytes(4), 640 * 72 * 2 + 1024);
        let bert = params(64, 384, 12, 64);
        assert_eq!(bert.launch_config().unwrap().grid.0, 64 * 12 * 3);
        assert_eq!(params(3, 65, 1, 32).long_smem_bytes(2), 384 * 40 * 2 + 512);
        assert_eq!(params(1, 1, 1, 32).launch_config().unwrap().grid.0, 1);
        // no bias, no mask: the persistent window kernel
        assert_eq!(swin1.kernel_name(), "fmha_fwd_window");
        assert_eq!(params(2, 64, 1, 32).kernel_name(), "fmha_fwd_window");
        let mut sep = params(4096, 49, 3, 32);
        sep.has_bias = true;
        sep.mask = AttentionMask::Windows { n_windows: 64 };
        assert_eq!(sep.kernel_name(), "fmha_fwd_short");
        assert_eq!(sep.launch_config().unwrap().shared_bytes, 0);
        let mut comb = params(4096, 49, 3, 32);
        comb.mask = AttentionMask::Combined { n_entries: 64 };
        assert_eq!(comb.kernel_name(), "fmha_fwd_window");
        // two stages of (3 x 64 x 40 + 49 x 56) fp16 elements
        assert_eq!(comb.window_smem_bytes(), 2 * (3 * 64 * 40 + 49 * 56) * 2);
        assert_eq!(comb.launch_config().unwrap().shared_bytes, 41_696);
        assert_eq!(comb.window_grid(132 * 5), 660);
        assert_eq!(params(1, 49, 3, 32).window_grid(660), 3);
        let mut kpm = params(8, 64, 2, 64);
        kpm.mask = AttentionMask::KeyPadding;
        assert_eq!(kpm.kernel_name(), "fmha_fwd_short");
        assert_eq!(params(2, 65, 1, 32).kernel_name(), "fmha_fwd_long");
        assert_eq!(vit.kernel_name(), "fmha_fwd_long");
    }

    #[test]
    fn the_wgmma_kernel_takes_head_dim_64_calls_with_at_most_a_key_mask() {
        let vit = params(64, 197, 12, 64);
        assert!(vit.wgmma_eligible());
        let mut bert = params(64, 384, 12, 64);
        bert.mask = AttentionMask::KeyPadding;
        assert!(bert.wgmma_eligible());
        // two key blocks or fewer: fmha_fwd_long (faster there)
        let mut bert128 = params(64, 128, 12, 64);
        bert128.mask = AttentionMask::KeyPadding;
        assert!(!bert128.wgmma_eligible());
        assert!(params(2, 129, 4, 64).wgmma_eligible());
        // head_dim 32, a per-head bias, per-query window masks, short sequences: fmha_fwd_long
        // or the short kernels, as before
        assert!(!params(64, 197, 12, 32).wgmma_eligible());
        let mut biased = params(2, 100, 4, 64);
        biased.has_bias = true;
        assert!(!biased.wgmma_eligible());
        let mut windows = params(2, 100, 4, 64);
        windows.mask = AttentionMask::Windows { n_windows: 2 };
        assert!(!windows.wgmma_eligible());
        assert!(!params(2, 64, 4, 64).wgmma_eligible());
        // the TMA kernel: the same shapes, from min_seq + 1, with ring - 1 key blocks or more
        assert!(vit.tma_eligible(2, 128));
        assert!(!bert128.tma_eligible(2, 128));
        assert!(bert128.tma_eligible(3, 64));
        assert!(!bert128.tma_eligible(4, 64));
        assert!(params(2, 65, 4, 64).tma_eligible(3, 64));
        assert!(!params(2, 65, 4, 64).tma_eligible(4, 64));
        assert!(!params(2, 64, 4, 64).tma_eligible(2, 0)); // the short kernel's
        assert!(!biased.tma_eligible(2, 0));
        assert!(!windows.tma_eligible(2, 0));
        assert_eq!(tma_min_seq(), 64);
        // two Q slots of 128 rows + K, V 2 x 64 rows of 64 fp16 (no padding); 2 x 64 fp32 key
        // terms; with 3 stages 2 CTAs still fit an H100 SM (228 KiB)
        assert_eq!(vit.wg_smem_bytes(2), 512 * 64 * 2 + 512);
        assert_eq!(vit.wg_smem_bytes(3), 640 * 64 * 2 + 768);
        assert!(2 * (vit.wg_smem_bytes(3) + 1024) <= 228 * 1024);
        // 64 x 12 x 2 items; persistent: at most the resident CTAs
        assert_eq!(vit.wg_grid(264, true), 264);
        assert_eq!(vit.wg_grid(264, false), 1536);
        assert_eq!(params(1, 100, 2, 64).wg_grid(264, true), 2);
        assert!(!wg_overlap());
        assert_eq!(wg_ring(), 2);
        assert!(tma_enabled());
        assert_eq!(tma_ring(), 3);
        // the TMA variant: + alignment slack + 3 x 2 stage barriers + 2 Q-slot barriers
        assert_eq!(vit.tma_smem_bytes(2), vit.wg_smem_bytes(2) + 1024 + 64);
        assert!(2 * (vit.tma_smem_bytes(3) + 1024) <= 228 * 1024);
        // 4 stages: still 2 CTAs per SM
        assert!(2 * (vit.wg_smem_bytes(4) + 1024) <= 228 * 1024);
        assert!(wg_persistent());
        // by default fmha.cu targets compute_90a on sm_90 (the wgmma kernel), nothing else does
        assert!(wgmma_enabled());
        assert_eq!(
            crate::runtime::nvrtc_arch(Source::Fmha, (9, 0)),
            "compute_90a"
        );
        assert_eq!(
            crate::runtime::nvrtc_arch(Source::Window, (9, 0)),
            "compute_90"
        );
        assert_eq!(
            crate::runtime::nvrtc_arch(Source::Fmha, (8, 9)),
            "compute_89"
        );
    }

    #[test]
    fn the_tma_view_is_qkv_as_element_token_slab_batch() {
        // ViT: qkv [64 * 197, 3, 12, 64] fp16: a token row is 3 x 12 x 64 x 2 = 4608 bytes, a
        // head's 64 elements 128 bytes (one swizzled row), a batch entry 197 token rows
        let g = params(64, 197, 12, 64).tma_geometry(LONG_BLOCK_N);
        assert_eq!(g.dims, [64, 197, 36, 64]);
        assert_eq!(g.strides, [4608, 128, 197 * 4608]);
        assert_eq!(g.boxdim, [64, 64, 1, 1]);
        // TMA's rules: strides multiples of 16, the box row within the 128-byte swizzle span
        assert!(g.strides.iter().all(|s| s % 16 == 0));
        assert_eq!(g.boxdim[0] as usize * 2, 128);
        // fmha_fwd_item_tma's box: a whole item's 128 rows (at most 256 per box dimension)
        let g = params(64, 128, 12, 64).tma_geometry(ITEM_KEYS);
        assert_eq!(g.dims, [64, 128, 36, 64]);
        assert_eq!(g.boxdim, [64, 128, 1, 1]);
    }

    #[test]
    fn the_item_kernel_takes_65_to_128_tokens_two_ctas_per_sm() {
        let bert128 = params(64, 128, 12, 64);
        assert!(bert128.item_eligible() && bert128.tma_eligible(3, 64));
        assert!(params(2, 65, 4, 64).item_eligible());
        assert!(!params(2, 64, 4, 64).item_eligible());
        assert!(!params(64, 197, 12, 64).item_eligible());
        // 1 KiB alignment slack, 2 x 48 KiB of Q / K / V, 2 x 512 bytes of per-key terms, 6 barriers
        assert_eq!(bert128.item_smem_bytes(), 1024 + 2 * 49152 + 1024 + 48);
        assert!(2 * (bert128.item_smem_bytes() + 1024) <= 228 * 1024);
        assert!(tma_item());
        // one 128-row query block per item: the persistent grid strides over batch x heads
        assert_eq!(bert128.n_qblocks(), 1);
        assert_eq!(bert128.wg_grid(264, true), 264);
    }

    #[test]
    fn validation_rejects_bad_shapes() {
        assert!(params(1, 49, 3, 48).validate().is_err());
        assert!(params(0, 49, 3, 32).validate().is_err());
        assert!(params(1, 0, 3, 32).validate().is_err());
        let mut p = params(2, 49, 3, 32);
        p.mask = AttentionMask::Windows { n_windows: 0 };
        assert!(p.validate().is_err());
        p.mask = AttentionMask::Windows { n_windows: 3 };
        assert!(p.validate().is_ok());
        p.mask = AttentionMask::Combined { n_entries: 3 };
        assert!(p.validate().is_ok());
        p.has_bias = true;
        assert!(
            p.validate().is_err(),
            "the bias is inside the combined tensor"
        );
        p.has_bias = false;
        p.mask = AttentionMask::Combined { n_entries: 0 };
        assert!(p.validate().is_err());
        let mut long = params(2, 65, 1, 32);
        long.mask = AttentionMask::Combined { n_entries: 1 };
        assert!(long.validate().is_err(), "combined needs seq <= 64");
    }

    #[test]
    fn padded_rows_and_conflict_free_strides() {
        assert_eq!(padded_seq(49), 56);
        assert_eq!(padded_seq(1), 8);
        assert_eq!(padded_seq(64), 64);
        for seq in 1..=64 {
            let s = add_smem_stride(seq);
            assert!(s >= padded_seq(seq) && s.is_multiple_of(8), "{seq}");
            // row stride in 32-bit words is 4 mod 8: rows g = 0..7 of a fragment hit distinct
            // bank quads
            assert_eq!((s / 2) % 8, 4, "{seq}");
        }
        assert_eq!(add_smem_stride(49), 56);
        assert_eq!(add_smem_stride(64), 72);
    }

    #[test]
    fn combined_tensor_gives_the_same_attention_as_bias_plus_mask() {
        let (b, n, h, d, nw) = (5, 13, 2, 32, 3);
        let mut sep = params(b, n, h, d);
        sep.has_bias = true;
        sep.mask = AttentionMask::Windows { n_windows: nw };
        let qkv = noise(sep.sizes().0, 11);
        let bias = noise(sep.sizes().2, 12);
        let mask: Vec<f32> = noise(sep.sizes().3, 13)
            .iter()
            .map(|v| if *v > 0.4 { -100.0 } else { 0.0 })
            .collect();
        let want = attention_reference(&sep, &qkv, Some(&bias), Some(&mask));
        let add = combine_reference(n, h, nw, Some(&bias), Some(&mask));
        let mut comb = params(b, n, h, d);
        comb.mask = AttentionMask::Combined { n_entries: nw };
        assert_eq!(add.len(), comb.sizes().3);
        // padding columns are -inf (they mask the padded keys)
        assert!(add
            .chunks(padded_seq(n))
            .all(|r| r[n..].iter().all(|v| *v == f32::NEG_INFINITY)));
        let got = attention_reference(&comb, &qkv, None, Some(&add));
        for (x, y) in want.iter().zip(&got) {
            assert!((x - y).abs() < 1e-5);
        }
        // bias only: one entry
        let add1 = combine_reference(n, h, 1, Some(&bias), None);
        let mut sep1 = params(b, n, h, d);
        sep1.has_bias = true;
        let want1 = attention_reference(&sep1, &qkv, Some(&bias), None);
        let mut comb1 = params(b, n, h, d);
        comb1.mask = AttentionMask::Combined { n_entries: 1 };
        let got1 = attention_reference(&comb1, &qkv, None, Some(&add1));
        for (x, y) in want1.iter().zip(&got1) {
            assert!((x - y).abs() < 1e-5);
        }
    }

    #[test]
    fn mask_layouts() {
        let mut p = params(8, 49, 3, 32);
        p.mask = AttentionMask::Windows { n_windows: 4 };
        assert_eq!(p.mask_args(), (4, 49));
        assert_eq!(p.sizes().3, 4 * 49 * 49);
        p.mask = AttentionMask::KeyPadding;
        assert_eq!(p.mask_args(), (8, 0));
        assert_eq!(p.sizes().3, 8 * 49);
    }

    #[test]
    fn swin_stage1_byte_floor_matches_anchor() {
        // q, k, v, out for 4096 windows x 3 heads x 49 x 32 in fp16: 154 MB (ANCHORS.md).
        let p = params(4096, 49, 3, 32);
        let (qkv, out, _, _) = p.sizes();
        assert_eq!((qkv + out) * 2, 154_140_672);
    }

    #[test]
    fn single_token_returns_its_value() {
        // N = 1: softmax over one key is 1, so the output is v whatever q, k, bias are.
        let p = AttentionParams {
            has_bias: true,
            ..params(3, 1, 2, 32)
        };
        let qkv = noise(p.sizes().0, 1);
        let bias = noise(p.sizes().2, 2);
        let out = attention_reference(&p, &qkv, Some(&bias), None);
        for b in 0..3 {
            for h in 0..2 {
                for k in 0..32 {
                    let v = qkv[((b * 3 + 2) * 2 + h) * 32 + k];
                    assert!((out[(b * 2 + h) * 32 + k] - v).abs() < 1e-6);
                }
            }
        }
    }

    #[test]
    fn zero_queries_average_the_values() {
        // q = 0 gives equal scores: each output row is the mean of v over the keys.
        let p = params(1, 5, 1, 32);
        let mut qkv = noise(p.sizes().0, 3);
        for row in 0..5 {
            for k in 0..32 {
                qkv[row * 96 + k] = 0.0;
            }
        }
        let out = attention_reference(&p, &qkv, None, None);
        for k in 0..32 {
            let mean: f32 = (0..5).map(|r| qkv[r * 96 + 64 + k]).sum::<f32>() / 5.0;
            for r in 0..5 {
                assert!((out[r * 32 + k] - mean).abs() < 1e-6);
            }
        }
    }

    #[test]
    fn key_padding_mask_hides_keys() {
        // A -1e9 key mask on the last two keys must give the same result as dropping them.
        let mut p = params(1, 6, 2, 32);
        p.mask = AttentionMask::KeyPadding;
        let qkv = noise(p.sizes().0, 4);
        let mask = vec![0.0, 0.0, 0.0, 0.0, -1e9, -1e9];
        let masked = attention_reference(&p, &qkv, None, Some(&mask));
        let short = params(1, 4, 2, 32);
        let short_out = attention_reference(&short, &qkv[..short.sizes().0], None, None);
        for i in 0..4 * 64 {
            assert!((masked[i] - short_out[i]).abs() < 1e-5, "{i}");
        }
    }

    #[test]
    fn window_mask_is_chosen_by_batch_modulo_windows() {
        // Two windows' masks; batch entries 0 and 2 must use window 0, entry 1 window 1.
        let mut p = params(3, 4, 1, 32);
        p.mask = AttentionMask::Windows { n_windows: 2 };
        let mut qkv = noise(p.sizes().0, 5);
        // make all three batch entries identical so only the mask differs
        let per = 4 * 3 * 32;
        let first = qkv[..per].to_vec();
        qkv[per..2 * per].copy_from_slice(&first);
        qkv[2 * per..].copy_from_slice(&first);
        let mut mask = vec![0f32; 2 * 16];
        for v in mask[16..].iter_mut().step_by(3) {
            *v = -100.0;
        }
        let out = attention_reference(&p, &qkv, None, Some(&mask));
        let row = 4 * 32;
        assert_eq!(out[..row], out[2 * row..]);
        assert!(out[..row]
            .iter()
            .zip(&out[row..2 * row])
            .any(|(a, b)| (a - b).abs() > 1e-3));
    }
}
