#!/bin/bash
# The kernels' device check and benchmark, from the repository root, with the release cdylib at
# .dev-kernels/libfuseprof_kernels.so (kernels/README.md says how to build it):
#   OUT=/tmp/fk-out bash kernels/bench/run_device.sh [all|check|bench|sanitize|attn|profile]
#
# all:      check with sanitize beside it (correctness only, several processes on the GPU at
#           once), then bench alone, then the comparison with the run of record (compare.txt),
#           within BUDGET_S seconds (default 450): each step's time limit is cut to what is left.
#           At most 8 files in $OUT.
# check:    nvcc's register / spill report of every kernel file (nvcc.log), every correctness
#           check in fp16 and bf16 (check.log, check.json), and beside it the attention checks
#           with FMHA_SM90=0, the portable kernels on this GPU (appended to check.log).
# bench:    ours vs eager / torch.compile / SDPA in one process (bench.log, bench.json, bench.md).
# sanitize: compute-sanitizer memcheck and racecheck of the attention checks on small shapes in
#           fp16 (sanitize.log; the bf16 builds differ only in conversions); SANITIZE_ALL=1:
#           memcheck of every small check, racecheck of every one but the GEMMs (racecheck
#           cannot run cuBLASLt's Hopper kernels), both dtypes.
# attn:     ViT / BERT attention, ours and SDPA's default call interleaved, ATTN_ROUNDS rounds.
# profile:  Nsight Compute on the attention kernels (PROFILE="window vit bert bertnm bertnm_sdpa").
set -u
STEP=${1:-all}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export FUSEPROF_KERNELS_LIB=${FUSEPROF_KERNELS_LIB:-$PWD/.dev-kernels/libfuseprof_kernels.so}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/fk-out}
BUDGET_S=${BUDGET_S:-450}
RECORD=kernels/bench/results/run13-h100
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv

limit() {  # CAP: seconds a step may take, cut to what is left of BUDGET_S (at least 10)
  local left=$((BUDGET_S - SECONDS))
  ((left < $1)) && echo $((left > 10 ? left : 10)) || echo "$1"
}
took() { echo "[$1 done at ${SECONDS}s of ${BUDGET_S}s]"; }

sanitize_start() {  # memcheck and racecheck side by side, in the background
  local only=attention mem_mode=race dtypes=float16
  [[ -n ${SANITIZE_ALL:-} ]] && { only=; mem_mode=small; dtypes=; }
  SAN_DESC="CHECK_ONLY=${only:-all} CHECK_DTYPES=${dtypes:-all}"
  CHECK_ONLY=$only CHECK_DTYPES=$dtypes timeout "$(limit 150)" compute-sanitizer --tool memcheck \
    --print-limit 20 python3 kernels/bench/gpu_check.py --mode $mem_mode --json check_memcheck.json \
    > /tmp/memcheck.log 2>&1 &
  mem_pid=$!
  CHECK_ONLY=$only CHECK_DTYPES=$dtypes timeout "$(limit 150)" compute-sanitizer --tool racecheck \
    --print-limit 20 python3 kernels/bench/gpu_check.py --mode race --json check_racecheck.json \
    > /tmp/racecheck.log 2>&1 &
  race_pid=$!
}
sanitize_finish() {
  wait $mem_pid; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|CHECKS" /tmp/memcheck.log
  wait $race_pid; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|CHECKS" /tmp/racecheck.log
  { echo "==== memcheck ($SAN_DESC)"; cat /tmp/memcheck.log
    echo; echo "==== racecheck ($SAN_DESC, no GEMMs)"; cat /tmp/racecheck.log; } > "$OUT/sanitize.log"
  rm -f "$OUT/check_memcheck.json" "$OUT/check_racecheck.json"
  took sanitize
}

if [[ $STEP == all || $STEP == sanitize ]]; then
  sanitize_start
  [[ $STEP == sanitize ]] && sanitize_finish
fi
if [[ $STEP == all || $STEP == check ]]; then
  # nvcc's report, each build in its own process (a second compiler's opinion on the sources)
  (for f in fmha_short fmha_long fmha_sm90 window elementwise mlp mlp_sm90; do for bf in 0 1; do for hd in 32 64; do
    [[ $f != fmha_* && $f != mlp* && $hd == 64 ]] && continue
    [[ $f == fmha_sm90 && $hd == 32 ]] && continue
    arch=sm_90; [[ $f == *_sm90 ]] && arch=sm_90a  # wgmma and TMA: sm_90a only
    { echo "== $f bf16=$bf head_dim=$hd"
      # the MLP's variant is its width: 96 and 192 stand in for the two head dims
      nvcc -arch=$arch -cubin -o /tmp/k_${f}_${bf}_$hd.cubin -Xptxas -v -DFP_BF16=$bf -DHEAD_DIM=$hd -DMLP_C=$((hd * 3)) \
        kernels/src/cu/$f.cu 2>&1 | grep -E "error|warning|Compiling|registers|spill|stack" \
        | sed 's/ptxas info    ://' | head -60; } > /tmp/nvcc_${f}_${bf}_$hd.log &
  done; done; done; wait; cat /tmp/nvcc_*.log > "$OUT/nvcc.log" 2>&1) &
  nvcc_pid=$!
  # the portable kernels on this GPU, beside the main checks (correctness only, no timing)
  (FUSEPROF_KERNELS_DEFINES="FMHA_SM90=0" CHECK_ONLY=attention timeout "$(limit 200)" \
    python3 kernels/bench/gpu_check.py --mode check --json check_portable.json > /tmp/check_portable.log 2>&1) &
  portable_pid=$!
  timeout "$(limit 200)" python3 kernels/bench/gpu_check.py --mode check > "$OUT/check.log" 2>&1
  echo "check rc=$?"
  grep -E "^FAIL|CHECKS|PRECOMPILE|Error|error" "$OUT/check.log" | head -40
  wait $portable_pid
  echo "check FMHA_SM90=0 rc=$?"
  { echo; echo "==== FUSEPROF_KERNELS_DEFINES=FMHA_SM90=0 CHECK_ONLY=attention (the portable kernels)"
    cat /tmp/check_portable.log; } >> "$OUT/check.log"
  grep -E "^FAIL|CHECKS|PRECOMPILE|Error|error" /tmp/check_portable.log | head -20
  rm -f "$OUT/check_portable.json"
  wait $nvcc_pid
  grep -c error "$OUT/nvcc.log" | sed 's/^/nvcc error lines: /'
  grep -E "spill" "$OUT/nvcc.log" | grep -v " 0 bytes spill stores, 0 bytes spill loads" | sort | uniq -c | head
  took check
fi
[[ $STEP == all ]] && sanitize_finish  # before the bench: nothing else on the GPU while it times
if [[ $STEP == all || $STEP == bench ]]; then
  timeout "$(limit 300)" python3 kernels/bench/gpu_check.py --mode bench > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"
  grep -E "^ceilings|Error|error" "$OUT/bench.log" | head -5
  took bench
fi
if [[ $STEP == all ]]; then
  python3 kernels/bench/compare_record.py "$RECORD" "$OUT" | tee "$OUT/compare.txt"
fi
if [[ $STEP == attn ]]; then
  # ours and SDPA's default call interleaved (gpu_check.py --mode attn), one JSON line
  timeout "$(limit 300)" python3 kernels/bench/gpu_check.py --mode attn 2>&1 | grep -E "ATTN|rror" | tee "$OUT/attn.txt"
fi
if [[ $STEP == profile ]]; then
  # Nsight Compute on the attention kernels: a summary per kernel (ncu_summary.py: throughput,
  # occupancy, warp stalls, instruction counts) in $OUT, and the full details pages and
  # per-instruction SASS tables (sass_mix.py reads them) in ncu_full.tar.gz.
  mkdir -p /tmp/ncu_full
  for w in ${PROFILE:-window vit bert}; do
    kn=regex:fmha_fwd; [[ $w == *sdpa ]] && kn="regex:sdpa|fmha|flash|attn|cudnn"
    timeout 120 ncu --kernel-name "$kn" --launch-skip 2 --launch-count 1 --set full \
      --import-source no -o /tmp/prof_$w -f python3 kernels/bench/profile_attention.py $w > /tmp/ncu_$w.log 2>&1
    echo "ncu $w rc=$?"; tail -2 /tmp/ncu_$w.log
    ncu --import /tmp/prof_$w.ncu-rep --page details --print-details all > /tmp/ncu_full/ncu_$w.txt 2>&1
    ncu --import /tmp/prof_$w.ncu-rep --page source --print-source sass --csv > /tmp/ncu_full/ncu_${w}_sass.csv 2>&1
    python3 kernels/bench/ncu_summary.py /tmp/ncu_full/ncu_$w.txt > "$OUT/ncu_$w.summary.txt"
    grep -E "Duration|Registers Per|Achieved Occupancy|Issued Warp|Executed Instructions  " "$OUT/ncu_$w.summary.txt" | sort -u
  done
  tar czf "$OUT/ncu_full.tar.gz" -C /tmp ncu_full
fi
rm -f "$OUT/check_small.json"
# at most 8 files come back from the device: a finished bench's partial file, or else the
# comparison (also on stdout), gives way
if [[ -f $OUT/bench.json ]]; then rm -f "$OUT/bench_partial.json"; else rm -f "$OUT/compare.txt"; fi
echo "[$STEP: ${SECONDS}s]"
ls "$OUT"
