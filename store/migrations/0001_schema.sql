-- fuseprof store, schema version 1. One file holds one run.
-- Times are integer nanoseconds on the run's own clock (the source's clock, unshifted).
-- Text that repeats (kernel names, API names, NVTX texts, domains) is interned in `strings`.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE strings (
    id    INTEGER PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE run (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    source_format   TEXT NOT NULL,      -- 'kineto' | 'nsys' | 'cupti'
    source_path     TEXT,
    command         TEXT,
    host            TEXT,
    start_unix_ns   INTEGER,            -- wall-clock start where the source records it
    tool            TEXT,               -- producer of the source (e.g. 'PyTorch Profiler', 'NVIDIA Nsight Systems 2026.2.1')
    tool_version    TEXT,
    cuda_runtime_version TEXT,
    cuda_driver_version  TEXT,
    cupti_version   TEXT,
    fuseprof_version TEXT NOT NULL,
    imported_unix_ns INTEGER NOT NULL,
    complete        INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE processes (
    pid  INTEGER PRIMARY KEY,
    name TEXT
);

CREATE TABLE threads (
    pid  INTEGER NOT NULL,
    tid  INTEGER NOT NULL,
    name TEXT,
    PRIMARY KEY (pid, tid)
) WITHOUT ROWID;

CREATE TABLE devices (
    id                 INTEGER PRIMARY KEY,   -- the source's device ordinal
    name               TEXT,
    compute_major      INTEGER,
    compute_minor      INTEGER,
    sm_count           INTEGER,
    memory_bytes       INTEGER,
    clock_khz          INTEGER,
    mem_bandwidth_bytes_per_s REAL,
    peak_flops_fp16    REAL,
    peak_source        TEXT                   -- 'measured' | 'nominal' | NULL when unknown
);

-- GPU kernels (CUPTI CONCURRENT_KERNEL, Kineto cat=kernel, nsys CUPTI_ACTIVITY_KIND_KERNEL).
CREATE TABLE kernels (
    id             INTEGER PRIMARY KEY,
    start_ns       INTEGER NOT NULL,
    end_ns         INTEGER NOT NULL,
    device_id      INTEGER NOT NULL,
    stream_id      INTEGER NOT NULL,
    pid            INTEGER,                  -- launching process, where known
    correlation_id INTEGER,
    external_id    INTEGER,                  -- Kineto 'External id' (links to cpu_op)
    name_id        INTEGER NOT NULL REFERENCES strings(id),
    grid_x INTEGER, grid_y INTEGER, grid_z INTEGER,
    block_x INTEGER, block_y INTEGER, block_z INTEGER,
    registers_per_thread INTEGER,
    static_smem_bytes    INTEGER,
    dynamic_smem_bytes   INTEGER,
    graph_id       INTEGER                   -- CUDA graph the kernel ran in, NULL when launched directly
);

-- Copies and fills on the GPU. kind: 'memcpy' | 'memset'.
CREATE TABLE memops (
    id             INTEGER PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN ('memcpy', 'memset')),
    start_ns       INTEGER NOT NULL,
    end_ns         INTEGER NOT NULL,
    device_id      INTEGER NOT NULL,
    stream_id      INTEGER NOT NULL,
    pid            INTEGER,
    correlation_id INTEGER,
    external_id    INTEGER,
    bytes          INTEGER,
    copy_kind      TEXT,                     -- 'HtoD' | 'DtoH' | 'DtoD' | 'HtoH' | 'PtoP' | ... (memcpy only)
    value          INTEGER                   -- memset value
);

-- CUDA runtime and driver API calls on host threads. api: 'runtime' | 'driver'.
CREATE TABLE api_calls (
    id             INTEGER PRIMARY KEY,
    api            TEXT NOT NULL CHECK (api IN ('runtime', 'driver')),
    start_ns       INTEGER NOT NULL,
    end_ns         INTEGER NOT NULL,
    pid            INTEGER NOT NULL,
    tid            INTEGER NOT NULL,
    correlation_id INTEGER,
    external_id    INTEGER,
    name_id        INTEGER NOT NULL REFERENCES strings(id),
    return_code    INTEGER
);

-- Host-side ranges and marks: NVTX push/pop and start/end ranges, NVTX marks, PyTorch ops
-- (Kineto cpu_op), user annotations, python functions, synchronisation spans and GPU-side
-- annotations (Kineto gpu_user_annotation: pid/tid are then device/stream).
-- kind: 'nvtx_push_pop' | 'nvtx_start_end' | 'nvtx_mark' | 'cpu_op' | 'user_annotation'
--       | 'gpu_user_annotation' | 'python_function' | 'cuda_sync' | 'other'
-- end_ns is NULL for marks and for ranges that never closed.
CREATE TABLE ranges (
    id             INTEGER PRIMARY KEY,
    kind           TEXT NOT NULL,
    start_ns       INTEGER NOT NULL,
    end_ns         INTEGER,
    pid            INTEGER NOT NULL,
    tid            INTEGER NOT NULL,
    end_tid        INTEGER,                  -- start/end ranges may end on another thread
    domain_id      INTEGER REFERENCES strings(id),
    name_id        INTEGER NOT NULL REFERENCES strings(id),
    category_id    INTEGER REFERENCES strings(id), -- NVTX category (name or number), or the Kineto 'cat' for kind 'other'
    color          INTEGER,                  -- ARGB
    depth          INTEGER,                  -- nesting depth on its thread, 0 = outermost
    external_id    INTEGER,                  -- Kineto 'External id'
    correlation_id INTEGER,                  -- Kineto cuda_sync / gpu annotations
    input_dims_id  INTEGER REFERENCES strings(id), -- JSON text, e.g. [[64,3136,96],[96]]
    input_types_id INTEGER REFERENCES strings(id)  -- JSON text, e.g. ["c10::Half","c10::Half"]
);

-- Flow arrows as the source recorded them (Kineto ac2g launch->kernel, fwdbwd forward->backward).
-- phase: 's' start | 't' step | 'f' finish; arrows with the same (category, flow_id) connect.
CREATE TABLE flows (
    id          INTEGER PRIMARY KEY,
    category_id INTEGER NOT NULL REFERENCES strings(id),
    flow_id     INTEGER NOT NULL,
    phase       TEXT NOT NULL CHECK (phase IN ('s', 't', 'f')),
    ts_ns       INTEGER NOT NULL,
    pid         INTEGER NOT NULL,
    tid         INTEGER NOT NULL
);

INSERT INTO meta (key, value) VALUES ('format', 'fuseprof-store'), ('schema_version', '1');
