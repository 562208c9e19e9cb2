-- No reader looks ranges up by Kineto External id: the analysis joins External ids in memory
-- from one scan of the ranges. The index only cost the import its sort and writes (6.5% of a
-- Kineto run's pages). Applied to older runs when they are next migrated; they open as before.
DROP INDEX ranges_by_external;
