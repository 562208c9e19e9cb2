#!/bin/bash
# Tracing overhead on the Swin-T inference loop (fp16, batch 64): wall time per iteration,
# each configuration in its own process, ROUNDS rounds interleaved. Writes $OUT/overhead.jsonl.
set -u
D=$PWD/.dev-collector; C="$D/fuseprof collect"; W=$PWD/collector/gpu-test/device
export FUSEPROF_TRACER=$D/libfuseprof_tracer.so PYTHONUNBUFFERED=1
N=${OVERHEAD_STEPS:-100}; WL="$W/workload.py swin --steps $N --warmup 10"
one() { # name, command...
  local name=$1; shift
  "$@" --timing /tmp/t.json > /dev/null 2>&1
  echo "{\"config\":\"$name\",\"round\":$r,\"result\":$(cat /tmp/t.json)}" >> $OUT/overhead.jsonl
}
for r in $(seq 1 ${ROUNDS:-3}); do
  one base python3 $WL
  one cuda $C -o /tmp/o.sqlite --force --pytorch none -- python3 $WL
  one cuda_all_api $C --all-api -o /tmp/o.sqlite --force --pytorch none -- python3 $WL
  one cuda_shapes $C -o /tmp/o.sqlite --force --pytorch shapes -- python3 $WL
  PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes one emit_nvtx_shapes_no_tracer python3 $WL
  one torch_profiler python3 $WL --window torchprof
done
cat $OUT/overhead.jsonl
