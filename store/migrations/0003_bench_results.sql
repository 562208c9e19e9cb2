-- `fuseprof bench` results: one row per measured proposal, written back into the run so that
-- `advise`, the reports and the TUI show measured next to expected. Applied to an existing run
-- when its first results are written (schema 1 runs open as before and have no results).
CREATE TABLE bench_results (
    proposal_id     TEXT PRIMARY KEY,
    pattern         TEXT NOT NULL,
    shape           TEXT NOT NULL,
    -- passed | failed (numerics) | error (did not run)
    status          TEXT NOT NULL,
    -- medians per call, ns: the replacement, the eager chain, the chain under torch.compile
    ours_ns         REAL,
    baseline_ns     REAL,
    compiled_ns     REAL,
    -- what advise expected per call when bench ran
    expected_ns     REAL,
    -- ||out - ref|| / ||ref|| against a float32 reference, and the dtype's tolerance
    max_rel_error   REAL,
    tolerance       REAL,
    device          TEXT,
    driver          TEXT,
    torch_version   TEXT,
    measured_unix_ns INTEGER NOT NULL,
    -- everything else the bench printed for it (rounds, per-output errors), as JSON
    detail          TEXT
);
UPDATE meta SET value = '2' WHERE key = 'schema_version';
