-- The history database: one row per pushed run, keyed by an idempotency key derived from the
-- run itself, so pushing the same run twice (or from two CI jobs at once) stores it once.
-- Written to run unchanged on SQLite and PostgreSQL.
CREATE TABLE history_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO history_meta (key, value) VALUES ('schema_version', '1');

CREATE TABLE history_runs (
    run_key TEXT PRIMARY KEY,
    pushed_unix_ns BIGINT NOT NULL,
    recorded_unix_ns BIGINT NOT NULL,
    file TEXT NOT NULL,
    source_format TEXT NOT NULL,
    command TEXT,
    host TEXT,
    device TEXT,
    driver TEXT,
    cuda_runtime TEXT,
    tool_version TEXT,
    steps BIGINT NOT NULL,
    gpu_ns BIGINT NOT NULL,
    step_gpu_median_ns DOUBLE PRECISION NOT NULL,
    step_gpu_mean_ns DOUBLE PRECISION NOT NULL,
    step_gpu_stddev_ns DOUBLE PRECISION NOT NULL
);
CREATE INDEX history_runs_by_time ON history_runs (recorded_unix_ns);

CREATE TABLE history_labels (
    run_key TEXT NOT NULL REFERENCES history_runs (run_key),
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (run_key, name)
);
CREATE INDEX history_labels_by_value ON history_labels (name, value);

CREATE TABLE history_steps (
    run_key TEXT NOT NULL REFERENCES history_runs (run_key),
    step_index BIGINT NOT NULL,
    gpu_ns BIGINT NOT NULL,
    wall_ns BIGINT NOT NULL,
    PRIMARY KEY (run_key, step_index)
);

CREATE TABLE history_ops (
    run_key TEXT NOT NULL REFERENCES history_runs (run_key),
    name TEXT NOT NULL,
    instances BIGINT NOT NULL,
    self_ns BIGINT NOT NULL,
    PRIMARY KEY (run_key, name)
);

CREATE TABLE history_classes (
    run_key TEXT NOT NULL REFERENCES history_runs (run_key),
    class TEXT NOT NULL,
    records BIGINT NOT NULL,
    total_ns BIGINT NOT NULL,
    PRIMARY KEY (run_key, class)
);
