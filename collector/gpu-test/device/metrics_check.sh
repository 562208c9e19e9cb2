#!/bin/bash
# Hardware counters (`collect --metrics`) on the Swin-T fp16 batch-64 inference loop, on the
# GPU machine. Run from the repository root with the release binary and tracer in .dev-bin/,
# PATH and LD_LIBRARY_PATH (libcupti) set, and $OUT an output folder:
#
#   OUT=/tmp/out bash collector/gpu-test/device/metrics_check.sh
#
# (a) collect --metrics memory (tracer debug log kept), `info`, per-kernel DRAM bytes of a
#     GEMM, the softmax, a copy (and a fused attention kernel if any), and how much of the
#     sampled traffic fell inside recorded GPU work (the clocks' alignment);
# (b) overhead: --pytorch none against --pytorch none --metrics memory, ROUNDS rounds
#     interleaved, each run its own process;
# (c) Nsight Compute's dram__bytes_read/write.sum for the same kernels, beside fuseprof's;
# (d) --metrics compute refused in one line (sampling pipe metrics crashed the process).
# Each step has its own timeout; one failing does not stop the others. Everything goes to $OUT.
set -u
: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
ROOT=$PWD
BIN=$ROOT/.dev-bin
FP=$BIN/fuseprof
export FUSEPROF_TRACER=$BIN/libfuseprof_tracer.so PYTHONUNBUFFERED=1
W=$ROOT/collector/gpu-test/device
STEPS=${METRICS_STEPS:-30}
WL="$W/workload.py swin --steps $STEPS --warmup 5"
ANALYSE=$W/metrics_table.py
log() { echo "== $*" | tee -a "$OUT/metrics_check.log"; }

{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } \
  > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

log "(a) collect --metrics memory"
FUSEPROF_TRACER_DEBUG=1 timeout 150 "$FP" collect --metrics memory --pytorch none --force \
  -o "$OUT/memory.sqlite" -- python3 $WL --timing "$OUT/memory.timing.json" \
  > "$OUT/memory.stdout" 2> "$OUT/memory.stderr"
echo "rc=$?"; grep -v "^fuseprof-tracer" "$OUT/memory.stderr" | tail -20
grep "^fuseprof-tracer" "$OUT/memory.stderr" | head -60
timeout 60 "$FP" info "$OUT/memory.sqlite" | tee "$OUT/memory.info.txt"
timeout 60 python3 "$ANALYSE" kernels "$OUT/memory.sqlite" | tee "$OUT/memory.kernels.txt"

log "(b) overhead, ${ROUNDS:-3} rounds"
rm -f "$OUT/metrics_overhead.jsonl"
for r in $(seq 1 "${ROUNDS:-3}"); do
  for cfg in none memory; do
    extra=(); [ "$cfg" = memory ] && extra=(--metrics memory)
    timeout 150 "$FP" collect "${extra[@]}" --pytorch none --force -o /tmp/metrics_o.sqlite \
      -- python3 $WL --timing /tmp/metrics_t.json > /dev/null 2> "$OUT/overhead_${cfg}_$r.stderr" \
      && echo "{\"config\":\"$cfg\",\"round\":$r,\"result\":$(cat /tmp/metrics_t.json)}" \
        >> "$OUT/metrics_overhead.jsonl"
  done
done
timeout 30 python3 "$ANALYSE" overhead "$OUT/metrics_overhead.jsonl" | tee "$OUT/metrics_overhead.txt"

log "(c) Nsight Compute on the same kernels"
if command -v ncu > /dev/null; then
  # After the warm-up: skip the first 1500 matching launches, then 12 of them.
  timeout 240 ncu --csv --page raw \
    --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    -k 'regex:softmax|gemm|cutlass|sm90|copy|elementwise|fmha|flash' \
    --launch-skip 1500 --launch-count 12 \
    python3 "$W/workload.py" swin --steps 2 --warmup 3 > "$OUT/ncu.csv" 2> "$OUT/ncu.stderr"
  echo "rc=$?"; tail -3 "$OUT/ncu.stderr"
  timeout 60 python3 "$ANALYSE" ncu "$OUT/memory.sqlite" "$OUT/ncu.csv" | tee "$OUT/ncu_vs_fuseprof.txt"
else
  echo "no ncu on PATH"
fi

log "(d) the compute set is refused in one line, the trace not started"
timeout 30 "$FP" collect --metrics compute --pytorch none --force -o "$OUT/compute.sqlite" \
  -- python3 -c "print('ran')" > "$OUT/compute.stdout" 2> "$OUT/compute.stderr"
echo "rc=$?"; cat "$OUT/compute.stderr"
log done
