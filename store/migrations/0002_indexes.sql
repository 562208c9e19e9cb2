-- Indexes for the queries fuseprof runs. A separate migration so that the writer can load a
-- run without maintaining them row by row, and build each once, sorted, when it finishes.
CREATE INDEX kernels_by_stream_time ON kernels (device_id, stream_id, start_ns);
CREATE INDEX kernels_by_correlation ON kernels (correlation_id, pid);
CREATE INDEX memops_by_stream_time  ON memops (device_id, stream_id, start_ns);
CREATE INDEX memops_by_correlation  ON memops (correlation_id, pid);
CREATE INDEX api_calls_by_correlation ON api_calls (correlation_id, pid);
CREATE INDEX api_calls_by_thread_time ON api_calls (pid, tid, start_ns);
CREATE INDEX ranges_by_thread_time  ON ranges (pid, tid, start_ns);
CREATE INDEX ranges_by_external     ON ranges (external_id);

