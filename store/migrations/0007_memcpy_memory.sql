-- Where each copy reads and writes: 'pageable' | 'pinned' (host memory), 'device', 'managed',
-- 'array'; NULL when the source did not record it (memsets, older runs, Kineto traces from
-- ROCm). A copy from pageable host memory is staged by the driver through a pinned buffer: it
-- runs slower and the host waits for it. Older readers read these runs as before (they name
-- the columns they select), so the schema version stays; older runs get the columns, NULL,
-- when they are next migrated, and open as before.
ALTER TABLE memops ADD COLUMN src_memory TEXT
    CHECK (src_memory IN ('pageable', 'pinned', 'device', 'managed', 'array'));
ALTER TABLE memops ADD COLUMN dst_memory TEXT
    CHECK (dst_memory IN ('pageable', 'pinned', 'device', 'managed', 'array'));
