//! The records a run holds. Importers and the collector build these; readers get them back.

use serde::Serialize;

/// Index of an interned string in the store's `strings` table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct StrId(pub i64);

/// A GPU kernel execution.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub start_ns: i64,
    pub end_ns: i64,
    pub device_id: i64,
    pub stream_id: i64,
    /// The launching process, where the source says.
    pub pid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub external_id: Option<i64>,
    pub name: StrId,
    pub grid: Option<[i64; 3]>,
    pub block: Option<[i64; 3]>,
    pub registers_per_thread: Option<i64>,
    pub static_smem_bytes: Option<i64>,
    pub dynamic_smem_bytes: Option<i64>,
    /// The CUDA graph this kernel ran in; `None` for a direct launch.
    pub graph_id: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemopKind {
    Memcpy,
    Memset,
}

impl MemopKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MemopKind::Memcpy => "memcpy",
            MemopKind::Memset => "memset",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "memcpy" => Some(MemopKind::Memcpy),
            "memset" => Some(MemopKind::Memset),
            _ => None,
        }
    }
}

/// Direction of a copy, named as CUPTI's `CUpti_ActivityMemcpyKind` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    Unknown,
    HtoD,
    DtoH,
    HtoA,
    AtoH,
    AtoA,
    AtoD,
    DtoA,
    DtoD,
    HtoH,
    PtoP,
}

impl CopyKind {
    /// From CUPTI's numeric kind (also what `nsys export` writes in `copyKind`).
    pub fn from_cupti(kind: i64) -> Self {
        match kind {
            1 => CopyKind::HtoD,
            2 => CopyKind::DtoH,
            3 => CopyKind::HtoA,
            4 => CopyKind::AtoH,
            5 => CopyKind::AtoA,
            6 => CopyKind::AtoD,
            7 => CopyKind::DtoA,
            8 => CopyKind::DtoD,
            9 => CopyKind::HtoH,
            10 => CopyKind::PtoP,
            _ => CopyKind::Unknown,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            CopyKind::Unknown => "Unknown",
            CopyKind::HtoD => "HtoD",
            CopyKind::DtoH => "DtoH",
            CopyKind::HtoA => "HtoA",
            CopyKind::AtoH => "AtoH",
            CopyKind::AtoA => "AtoA",
            CopyKind::AtoD => "AtoD",
            CopyKind::DtoA => "DtoA",
            CopyKind::DtoD => "DtoD",
            CopyKind::HtoH => "HtoH",
            CopyKind::PtoP => "PtoP",
        }
    }
    pub fn parse(s: &str) -> Self {
        match s {
            "HtoD" => CopyKind::HtoD,
            "DtoH" => CopyKind::DtoH,
            "HtoA" => CopyKind::HtoA,
            "AtoH" => CopyKind::AtoH,
            "AtoA" => CopyKind::AtoA,
            "AtoD" => CopyKind::AtoD,
            "DtoA" => CopyKind::DtoA,
            "DtoD" => CopyKind::DtoD,
            "HtoH" => CopyKind::HtoH,
            "PtoP" => CopyKind::PtoP,
            _ => CopyKind::Unknown,
        }
    }
}

/// Where one side of a copy lies, named as CUPTI's `CUpti_ActivityMemoryKind` does (its
/// static variants folded into their kind). Host memory is `Pageable` or `Pinned`: a copy from
/// pageable memory is staged by the driver through a pinned buffer, so it runs slower and the
/// host waits for it even when it was asked not to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    Pageable,
    Pinned,
    Device,
    Managed,
    Array,
}

impl MemoryKind {
    /// From CUPTI's numeric `CUpti_ActivityMemoryKind` (the live tracer's `srcKind` and
    /// `dstKind`): 0 unknown, 1 pageable, 2 pinned, 3 device, 4 array, 5 managed, 6 device
    /// static, 7 managed static. `None` for unknown and for values CUPTI does not define.
    pub fn from_cupti(kind: u32) -> Option<Self> {
        match kind {
            1 => Some(MemoryKind::Pageable),
            2 => Some(MemoryKind::Pinned),
            3 | 6 => Some(MemoryKind::Device),
            4 => Some(MemoryKind::Array),
            5 | 7 => Some(MemoryKind::Managed),
            _ => None,
        }
    }
    /// From a label as Nsight Systems' `ENUM_CUDA_MEM_KIND` and Kineto's copy names spell it
    /// (`Pageable`, `Pinned`, `Device`, `Array`, `Managed`, `Device Static`, `Managed
    /// Static`), in any case. `None` for `Unknown` and for what names no kind (ROCm's `Host`).
    pub fn from_label(label: &str) -> Option<Self> {
        let l = label.trim().to_ascii_lowercase();
        match l.strip_suffix(" static").unwrap_or(&l) {
            "pageable" => Some(MemoryKind::Pageable),
            "pinned" => Some(MemoryKind::Pinned),
            "device" => Some(MemoryKind::Device),
            "array" => Some(MemoryKind::Array),
            "managed" => Some(MemoryKind::Managed),
            _ => None,
        }
    }
    /// The text the store keeps (`pageable`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Pageable => "pageable",
            MemoryKind::Pinned => "pinned",
            MemoryKind::Device => "device",
            MemoryKind::Managed => "managed",
            MemoryKind::Array => "array",
        }
    }
    /// The store's text back; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pageable" => Some(MemoryKind::Pageable),
            "pinned" => Some(MemoryKind::Pinned),
            "device" => Some(MemoryKind::Device),
            "managed" => Some(MemoryKind::Managed),
            "array" => Some(MemoryKind::Array),
            _ => None,
        }
    }
}

/// A copy or fill on the GPU.
#[derive(Clone, Debug, PartialEq)]
pub struct Memop {
    pub kind: MemopKind,
    pub start_ns: i64,
    pub end_ns: i64,
    pub device_id: i64,
    pub stream_id: i64,
    pub pid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub external_id: Option<i64>,
    pub bytes: Option<i64>,
    /// Memcpy only.
    pub copy_kind: Option<CopyKind>,
    /// Memset only.
    pub value: Option<i64>,
    /// Memcpy only: where the copy reads and writes, where the source recorded it (runs
    /// written before schema migration 7 read as `None`).
    pub src_memory: Option<MemoryKind>,
    pub dst_memory: Option<MemoryKind>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Runtime,
    Driver,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Runtime => "runtime",
            Api::Driver => "driver",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "runtime" => Some(Api::Runtime),
            "driver" => Some(Api::Driver),
            _ => None,
        }
    }
}

/// A CUDA runtime or driver API call on a host thread.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiCall {
    pub api: Api,
    pub start_ns: i64,
    pub end_ns: i64,
    pub pid: i64,
    pub tid: i64,
    pub correlation_id: Option<i64>,
    pub external_id: Option<i64>,
    pub name: StrId,
    pub return_code: Option<i64>,
}

/// What a range is. Stored as text so that a reader can see it in plain SQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeKind {
    NvtxPushPop,
    NvtxStartEnd,
    NvtxMark,
    CpuOp,
    UserAnnotation,
    GpuUserAnnotation,
    PythonFunction,
    CudaSync,
    Instant,
    Other,
}

impl RangeKind {
    pub const ALL: [RangeKind; 10] = [
        RangeKind::NvtxPushPop,
        RangeKind::NvtxStartEnd,
        RangeKind::NvtxMark,
        RangeKind::CpuOp,
        RangeKind::UserAnnotation,
        RangeKind::GpuUserAnnotation,
        RangeKind::PythonFunction,
        RangeKind::CudaSync,
        RangeKind::Instant,
        RangeKind::Other,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            RangeKind::NvtxPushPop => "nvtx_push_pop",
            RangeKind::NvtxStartEnd => "nvtx_start_end",
            RangeKind::NvtxMark => "nvtx_mark",
            RangeKind::CpuOp => "cpu_op",
            RangeKind::UserAnnotation => "user_annotation",
            RangeKind::GpuUserAnnotation => "gpu_user_annotation",
            RangeKind::PythonFunction => "python_function",
            RangeKind::CudaSync => "cuda_sync",
            RangeKind::Instant => "instant",
            RangeKind::Other => "other",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::from_bytes(s.as_bytes())
    }
    /// [`RangeKind::parse`] on the stored bytes, without a UTF-8 check: the scans read
    /// `ranges.kind` once per row.
    pub fn from_bytes(text: &[u8]) -> Option<Self> {
        Some(match text {
            b"nvtx_push_pop" => RangeKind::NvtxPushPop,
            b"nvtx_start_end" => RangeKind::NvtxStartEnd,
            b"nvtx_mark" => RangeKind::NvtxMark,
            b"cpu_op" => RangeKind::CpuOp,
            b"user_annotation" => RangeKind::UserAnnotation,
            b"gpu_user_annotation" => RangeKind::GpuUserAnnotation,
            b"python_function" => RangeKind::PythonFunction,
            b"cuda_sync" => RangeKind::CudaSync,
            b"instant" => RangeKind::Instant,
            b"other" => RangeKind::Other,
            _ => return None,
        })
    }
    /// Ranges that sit on GPU tracks: their `pid`/`tid` are device/stream.
    pub fn is_gpu_side(self) -> bool {
        matches!(self, RangeKind::GpuUserAnnotation | RangeKind::CudaSync)
    }
}

/// A host range or mark: NVTX, a PyTorch op, a user annotation. `end_ns` is `None` for
/// marks and for ranges that never closed.
#[derive(Clone, Debug, PartialEq)]
pub struct Range {
    pub kind: RangeKind,
    pub start_ns: i64,
    pub end_ns: Option<i64>,
    pub pid: i64,
    pub tid: i64,
    pub end_tid: Option<i64>,
    pub domain: Option<StrId>,
    pub name: StrId,
    pub category: Option<StrId>,
    pub color: Option<i64>,
    pub depth: Option<i64>,
    pub external_id: Option<i64>,
    pub correlation_id: Option<i64>,
    pub input_dims: Option<StrId>,
    pub input_types: Option<StrId>,
}

impl Range {
    /// A range with only the required fields set.
    pub fn new(kind: RangeKind, name: StrId, pid: i64, tid: i64, start_ns: i64) -> Self {
        Range {
            kind,
            start_ns,
            end_ns: None,
            pid,
            tid,
            end_tid: None,
            domain: None,
            name,
            category: None,
            color: None,
            depth: None,
            external_id: None,
            correlation_id: None,
            input_dims: None,
            input_types: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowPhase {
    Start,
    Step,
    Finish,
}

impl FlowPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            FlowPhase::Start => "s",
            FlowPhase::Step => "t",
            FlowPhase::Finish => "f",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "s" => Some(FlowPhase::Start),
            "t" => Some(FlowPhase::Step),
            "f" => Some(FlowPhase::Finish),
            _ => None,
        }
    }
}

/// One end of a flow arrow as the source recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct Flow {
    pub category: StrId,
    pub flow_id: i64,
    pub phase: FlowPhase,
    pub ts_ns: i64,
    pub pid: i64,
    pub tid: i64,
}

/// A GPU as the source describes it; peaks are `None` where unknown.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Device {
    pub id: i64,
    pub name: Option<String>,
    pub compute_major: Option<i64>,
    pub compute_minor: Option<i64>,
    pub sm_count: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub clock_khz: Option<i64>,
    pub mem_bandwidth_bytes_per_s: Option<f64>,
    pub peak_flops_fp16: Option<f64>,
    /// `"measured"` or `"nominal"` when the peaks are set.
    pub peak_source: Option<String>,
}

/// Where a run came from. Written once, when the writer finishes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunInfo {
    /// `"kineto"`, `"nsys"` or `"cupti"`.
    pub source_format: String,
    pub source_path: Option<String>,
    pub command: Option<String>,
    pub host: Option<String>,
    pub start_unix_ns: Option<i64>,
    pub tool: Option<String>,
    pub tool_version: Option<String>,
    pub cuda_runtime_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    pub cupti_version: Option<String>,
}

/// The columns of a [`Range`] that building an operator tree needs, read by
/// [`crate::Store::for_each_lean_range`]: a scan that reads fewer columns is faster (SQLite
/// decodes every column it returns, for every row).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeanRange {
    pub kind: RangeKind,
    pub start_ns: i64,
    pub end_ns: Option<i64>,
    pub pid: i64,
    pub tid: i64,
    pub domain: Option<StrId>,
    pub name: StrId,
    pub category: Option<StrId>,
    pub input_dims: Option<StrId>,
    pub input_types: Option<StrId>,
    /// The nesting depth the source stored (fuseprof's own runs), for the timeline.
    pub depth: Option<i64>,
}

/// The columns of an [`ApiCall`] that joining GPU records to their launch and drawing the
/// call need, read by [`crate::Store::for_each_lean_call`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeanCall {
    pub start_ns: i64,
    pub end_ns: i64,
    pub pid: i64,
    pub tid: i64,
    pub correlation_id: Option<i64>,
}

/// The columns of an [`ApiCall`] that joining GPU records to their launch needs, read by
/// [`crate::Store::for_each_lean_launch`] (calls without a correlation id are left out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeanLaunch {
    pub start_ns: i64,
    pub pid: i64,
    pub tid: i64,
    pub correlation_id: i64,
}

/// The columns of a [`Kernel`] that attributing GPU time and drawing it on its stream need
/// (no launch shape or resources), read by [`crate::Store::for_each_lean_kernel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeanKernel {
    pub start_ns: i64,
    pub end_ns: i64,
    pub device_id: i64,
    pub stream_id: i64,
    pub pid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub external_id: Option<i64>,
    pub name: StrId,
    pub graph_id: Option<i64>,
}

/// The columns of a [`Memop`] that attributing GPU time and drawing it on its stream need (no
/// bytes or value), read by [`crate::Store::for_each_lean_memop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeanMemop {
    pub kind: MemopKind,
    pub start_ns: i64,
    pub end_ns: i64,
    pub device_id: i64,
    pub stream_id: i64,
    pub pid: Option<i64>,
    pub correlation_id: Option<i64>,
    pub external_id: Option<i64>,
    /// Memcpy only.
    pub copy_kind: Option<CopyKind>,
}
