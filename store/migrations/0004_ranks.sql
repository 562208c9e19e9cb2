-- Distributed runs: the ranks of one job merged into one run (`fuseprof import rank*.json.gz`,
-- or one nsys export / `collect` of a torchrun job whose processes each drive one GPU). A run
-- of one process has no rows here and NULL rank columns. Applied to older runs when they are
-- next migrated; they open as before.
CREATE TABLE ranks (
    rank              INTEGER PRIMARY KEY,
    -- the file the rank came from
    source_path       TEXT,
    -- where the rank number came from: 'trace' (Kineto distributedInfo.rank), 'file_name'
    -- (rank-3, rank3), 'order' (position among the inputs), 'device' (one export holding
    -- several processes, numbered by the GPU each drives)
    rank_source       TEXT NOT NULL,
    world_size        INTEGER,
    backend           TEXT,
    -- how the rank's times were put on the run's clock: 'wall_clock' (Kineto
    -- baseTimeNanoseconds, or timestamps already on the Unix epoch), 'collectives' (shifted so
    -- that its NCCL kernels end with the reference rank's), 'same_clock' (one capture of one
    -- host), 'unaligned' (left on its own clock: compare its times with care)
    clock             TEXT NOT NULL,
    -- added to every time of the rank's source (ns)
    clock_offset_ns   INTEGER NOT NULL DEFAULT 0,
    -- of that, the correction found from the collectives (ns; 0 when none was applied)
    clock_correction_ns INTEGER NOT NULL DEFAULT 0,
    -- collective kernels of the rank, and how many found a partner on the reference rank
    collectives       INTEGER NOT NULL DEFAULT 0,
    matched_collectives INTEGER NOT NULL DEFAULT 0,
    -- median |end difference| of the matched collectives after alignment (ns)
    residual_ns       INTEGER
);
ALTER TABLE processes ADD COLUMN rank INTEGER;
ALTER TABLE devices ADD COLUMN rank INTEGER;
-- the source's own ordinal where `id` was renumbered to keep ranks' GPUs apart
ALTER TABLE devices ADD COLUMN ordinal INTEGER;
UPDATE meta SET value = '3' WHERE key = 'schema_version';
