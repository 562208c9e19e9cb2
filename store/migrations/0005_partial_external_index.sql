-- Ranges without a Kineto External id (NVTX ranges, CUDA syncs: every range of an nsys export
-- or a `collect` run) are left out of the External id index, which only lookups of an id use:
-- SQLite reads `external_id = ?` through a partial index like this one. Applied to older runs
-- when they are next migrated; they open as before.
DROP INDEX ranges_by_external;
CREATE INDEX ranges_by_external ON ranges (external_id) WHERE external_id IS NOT NULL;
