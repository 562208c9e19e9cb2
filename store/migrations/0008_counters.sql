-- Hardware counters recorded with the trace (`fuseprof collect --metrics SET`). A run without
-- them has these tables empty; runs written before this migration lack them and read as runs
-- without counters.

-- One counter as it was collected on one device.
CREATE TABLE counter_metrics (
    id          INTEGER PRIMARY KEY,
    device_id   INTEGER NOT NULL,
    -- the metric name the collection API accepted (e.g. dram__bytes_read.sum)
    name        TEXT NOT NULL,
    -- what fuseprof reads it as: dram_read_bytes, dram_write_bytes, l2_hit_pct,
    -- tensor_pipe_pct, fma_pipe_pct, warps_active_pct, sm_active_pct
    quantity    TEXT NOT NULL,
    -- 'sum': a count over the sample's interval, split between the kernels that ran in it;
    -- 'average': a rate or percentage, averaged over each kernel's time
    kind        TEXT NOT NULL,
    unit        TEXT NOT NULL,
    -- 'pm_sampling' (device-wide samples at a fixed interval)
    method      TEXT NOT NULL,
    interval_ns INTEGER
);

-- One sample of one counter: its value over [start_ns, end_ns) on the run's clock.
CREATE TABLE counter_samples (
    metric_id INTEGER NOT NULL,
    start_ns  INTEGER NOT NULL,
    end_ns    INTEGER NOT NULL,
    value     REAL NOT NULL
);
CREATE INDEX counter_samples_by_metric_time ON counter_samples (metric_id, start_ns);

-- The samples attributed to kernels (written by `collect` once the run is complete): a
-- 'sum' counter's sample is split between the kernels and copies that ran during it, in
-- proportion to the time each ran in it; an 'average' is each kernel's time-weighted mean.
CREATE TABLE kernel_counters (
    kernel_id  INTEGER NOT NULL,
    metric_id  INTEGER NOT NULL,
    device_id  INTEGER NOT NULL,
    stream_id  INTEGER NOT NULL,
    start_ns   INTEGER NOT NULL,
    value      REAL NOT NULL,
    -- the fraction of the kernel's time that samples covered (below 1: samples were lost)
    coverage   REAL NOT NULL,
    -- 1: another kernel or copy ran on the device at the same time, so the value is shared
    shared     INTEGER NOT NULL,
    -- 1: no sample lay wholly inside the kernel (shorter than the interval): its value is
    -- its share of longer samples, an estimate
    estimated  INTEGER NOT NULL,
    PRIMARY KEY (kernel_id, metric_id)
) WITHOUT ROWID;
UPDATE meta SET value = '4' WHERE key = 'schema_version';
