#!/bin/bash
# One device call: resource report (nvcc), correctness, benchmarks, compute-sanitizer.
# Run from the repository root with the release cdylib at .dev-kernels/libfuseprof_kernels.so:
#   bash kernels/bench/run_device.sh [check|bench|sanitize|all|sweep|longsweep|wgcheck|tmacheck|sets|attn|profile]
set -u
STEP=${1:-all}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export FUSEPROF_KERNELS_LIB=${FUSEPROF_KERNELS_LIB:-$PWD/.dev-kernels/libfuseprof_kernels.so}
OUT=${OUT:-/tmp/fk-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv

# Shared by the attention steps below.
fmha_src() {  # fmha.cu as NVRTC sees it, for nvcc's resource reports
  { cat kernels/src/cu/common.cuh; echo "#line 1 \"fmha.cu\""; cat kernels/src/cu/fmha.cu; } > /tmp/k_fmha.cu
}
nvcc_report() {  # KERNEL_REGEX -DDEFINE...: registers, spills and ptxas warnings of the kernels matched
  local kernel=$1; shift
  nvcc -arch=sm_90a -cubin -o /tmp/k.cubin -Xptxas -v -DHEAD_DIM=64 "$@" /tmp/k_fmha.cu 2>&1 \
    | grep -E -A3 "error|warn|entry function .$kernel" | grep -E "error|warn|Compiling|registers|spill" | head -10
}
all_passed() { grep -q "CHECKS: \([0-9]*\)/\1 passed" "$1"; }
sweep() {  # DEFINES...: the sweep's times, each set of FUSEPROF_KERNELS_DEFINES in its own process
  for defs in "$@"; do
    FUSEPROF_KERNELS_DEFINES="$defs" timeout 90 python3 kernels/bench/gpu_check.py --mode sweep 2>&1 \
      | grep -E "SWEEP|rror" | tail -2
  done
}
attn_sets() {  # DEFINES...: ours and SDPA's default call interleaved (gpu_check.py --mode attn), each set in its own process
  for defs in "$@"; do
    FUSEPROF_KERNELS_DEFINES="$defs" timeout 150 python3 kernels/bench/gpu_check.py --mode attn 2>&1 \
      | grep -E "ATTN|rror" | tail -2
  done
}
sanitize_attention() {  # DEFINES TAG: memcheck and racecheck of the small attention checks
  for tool in memcheck racecheck; do
    FUSEPROF_KERNELS_DEFINES="$1" CHECK_ONLY=attention timeout 150 compute-sanitizer --tool $tool \
      --print-limit 10 python3 kernels/bench/gpu_check.py --mode race > "$OUT/$2_$tool.log" 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|CHECKS" "$OUT/$2_$tool.log"
  done
}

if [[ $STEP == all || $STEP == check ]]; then
  # Register / spill / stack report of every variant, and a second compiler's opinion on syntax.
  for f in fmha_short fmha_long fmha_sm90 window elementwise; do for bf in 0 1; do for hd in 32 64; do
    [[ $f != fmha_* && $hd == 64 ]] && continue
    [[ $f == fmha_sm90 && $hd == 32 ]] && continue
    echo "== $f bf16=$bf head_dim=$hd"
    arch=sm_90; [[ $f == fmha_sm90 ]] && arch=sm_90a  # wgmma and TMA: sm_90a only
    nvcc -arch=$arch -cubin -o /tmp/k_$f.cubin -Xptxas -v -DFP_BF16=$bf -DHEAD_DIM=$hd kernels/src/cu/$f.cu 2>&1 \
      | grep -E "error|warning|Compiling|registers|spill|stack" | sed 's/ptxas info    ://' | head -60
  done; done; done > "$OUT/nvcc.log" 2>&1
  grep -c error "$OUT/nvcc.log" | sed 's/^/nvcc error lines: /'
  timeout 150 python3 kernels/bench/gpu_check.py --mode check > "$OUT/check.log" 2>&1
  echo "check rc=$?"
  grep -E "^FAIL|CHECKS|PRECOMPILE|Error|error" "$OUT/check.log" | head -40
fi
if [[ $STEP == all || $STEP == bench ]]; then
  timeout 280 python3 kernels/bench/gpu_check.py --mode bench > "$OUT/bench.log" 2>&1
  echo "bench rc=$?"
  grep -vE "^\s*$" "$OUT/bench.log" | grep -E "^(window|fMHA|LN|reverse|padded|aligned|GEMM|bias|ceil|\|)" | head -80
fi
if [[ $STEP == sweep ]]; then
  # Tuning constants (FUSEPROF_KERNELS_DEFINES): each set in its own process; the sets vary
  # independent constants of different kernels together (VPT/EW_*: bias+residual, RPT/WO_THREADS:
  # window ops, WIN_MIN_BLOCKS: window fMHA), so one process answers for three kernels.
  for f in fmha; do for mb in 1 4 5; do
    { cat kernels/src/cu/common.cuh; echo "#line 1 \"$f.cu\""; cat kernels/src/cu/$f.cu; } > /tmp/k_$f.cu
    echo "== WIN_MIN_BLOCKS=$mb"; nvcc -arch=sm_90 -cubin -o /tmp/k.cubin -Xptxas -v -DFP_BF16=0 -DHEAD_DIM=32 \
      -DWIN_MIN_BLOCKS=$mb /tmp/k_$f.cu 2>&1 | grep -A3 "entry function .fmha_fwd_window" | grep -E "registers|spill" | head -3
  done; done
  while read -r defs; do
    FUSEPROF_KERNELS_DEFINES="$defs" timeout 90 python3 kernels/bench/gpu_check.py --mode sweep 2>&1 | grep -E "SWEEP|Error|error" | tail -2
  done <<'SETS'

VPT=1 RPT=1 WIN_MIN_BLOCKS=5
VPT=4 RPT=4 WIN_MIN_BLOCKS=4
VPT=4 EW_THREADS=128 RPT=1 WO_THREADS=128
EW_STREAM=1 WO_THREADS=512
VPT=4 EW_STREAM=1 RPT=1 WO_THREADS=512
EW_THREADS=512 RPT=4 WO_THREADS=128
VPT=1 EW_STREAM=1 RPT=2 WO_THREADS=64

SETS
fi
if [[ $STEP == longsweep ]]; then
  # fmha_fwd_long's tuning constants (FUSEPROF_KERNELS_DEFINES): registers and spills from nvcc,
  # the attention checks (fresh inputs, both dtypes) and the ViT / BERT times, each set in its
  # own process. The empty set is the default (on sm_90, fmha_fwd_long_tma for head_dim-64
  # sequences over 64); LONG_TMA=0: fmha_fwd_long_wg over 128 (kernels/NOTES.md rounds 5-7);
  # with LONG_WGMMA=0 as well: fmha_fwd_long. Earlier sets (LONG_SUB, LONG_MIN_BLOCKS,
  # LONG_RING) are in bench/results/longsweep-h100-2026-11-23.
  fmha_src
  while read -r defs; do
    echo "== [$defs]"
    nvcc_report fmha_fwd_long -DFP_BF16=0 $(for d in $defs; do echo -D$d; done)
    FUSEPROF_KERNELS_DEFINES="$defs" CHECK_ONLY=attention timeout 120 python3 kernels/bench/gpu_check.py --mode check 2>&1 \
      | grep -E "^FAIL|CHECKS" | head -5
    sweep "$defs"
  done <<'SETS'

LONG_TMA=0
LONG_TMA=0 LONG_WGMMA=0
LONG_TMA=0 WG_TAIL=0
LONG_TMA=0 WG_RING=3
LONG_TMA=0 WG_OVERLAP=1
LONG_TMA=0 WG_MIN_BLOCKS=1
LONG_TMA=0 WG_MIN_BLOCKS=3
SETS
fi
if [[ $STEP == wgcheck ]]; then
  # fmha_fwd_long_wg (LONG_TMA=0 in every set, since fmha_fwd_long_tma takes its calls by
  # default): nvcc's report (registers, spills, ptxas warnings, e.g. a serialised wgmma
  # chain) for the default loop and the overlapped one (WG_OVERLAP=1) with 3 / 4 stages; the
  # attention checks of the overlapped loop with 3 and 4 stages (two processes at once); if both
  # pass, the sweep's times of the variants, the default and fmha_fwd_long (LONG_WGMMA=0) in
  # the same call, memcheck and racecheck of its small attention checks, and Nsight Compute on
  # the ViT call (default loop).
  fmha_src
  for d in "" "-DWG_OVERLAP=1 -DWG_RING=3" "-DWG_OVERLAP=1 -DWG_RING=4"; do
    nvcc_report fmha_fwd_long_wg -DFP_BF16=0 $d
  done
  for r in 3 4; do
    (FUSEPROF_KERNELS_DEFINES="LONG_TMA=0 WG_OVERLAP=1 WG_RING=$r" CHECK_ONLY=attention timeout 120 \
      python3 kernels/bench/gpu_check.py --mode check > "$OUT/check_wg_ring$r.log" 2>&1) &
  done
  wait
  for r in 3 4; do echo "== WG_RING=$r"; grep -E "^FAIL|CHECKS|rror" "$OUT/check_wg_ring$r.log" | head -8; done
  if all_passed "$OUT/check_wg_ring3.log" && all_passed "$OUT/check_wg_ring4.log"; then
    sweep "LONG_TMA=0" "LONG_TMA=0 WG_OVERLAP=1" "LONG_TMA=0 WG_OVERLAP=1 WG_RING=4" "LONG_TMA=0 LONG_WGMMA=0"
    sanitize_attention "LONG_TMA=0 WG_OVERLAP=1" wg
    FUSEPROF_KERNELS_DEFINES="LONG_TMA=0" PROFILE="vit" OUT=$OUT bash "$0" profile | grep -v "^name\|^NVIDIA"
  fi
fi
if [[ $STEP == tmacheck ]]; then
  # fmha_fwd_long_tma (kernels/NOTES.md rounds 8-9) under each ';'-separated set of
  # FUSEPROF_KERNELS_DEFINES in CHECK_SETS (default "TMA_RING=3", the default build): nvcc's report (registers,
  # spills, ptxas warnings), the attention checks of every set at once (a broken hand-off traps
  # after ~16 M polls instead of hanging; the timeout is the second guard); if all pass, the
  # sweep's times of SWEEP_SETS (default: the check sets and LONG_TMA=0), memcheck and
  # racecheck of the first set's small attention checks, and with PROFILE=vit, Nsight Compute on
  # the ViT call under the first set. NVCC_KERNEL: the kernel nvcc reports on (default
  # fmha_fwd_long_tma); ATTN=1: the sweep is gpu_check.py --mode attn (ours and SDPA interleaved).
  fmha_src
  IFS=';' read -ra csets <<< "${CHECK_SETS:-TMA_RING=3}"
  IFS=';' read -ra ssets <<< "${SWEEP_SETS:-${CHECK_SETS:-TMA_RING=3};LONG_TMA=0}"
  for defs in "${csets[@]}"; do
    for bf in 0 1; do
      echo "== nvcc [$defs] bf16=$bf"
      nvcc_report "${NVCC_KERNEL:-fmha_fwd_long_tma}" -DFP_BF16=$bf $(for d in $defs; do echo -D$d; done)
    done
  done
  for i in "${!csets[@]}"; do
    (FUSEPROF_KERNELS_DEFINES="${csets[$i]}" CHECK_ONLY=attention timeout 150 \
      python3 kernels/bench/gpu_check.py --mode check > "$OUT/check_tma$i.log" 2>&1) &
  done
  wait
  ok=1
  for i in "${!csets[@]}"; do
    echo "== checks [${csets[$i]}]"; grep -E "^FAIL|CHECKS|rror" "$OUT/check_tma$i.log" | head -12
    all_passed "$OUT/check_tma$i.log" || ok=0
  done
  if [[ $ok == 1 ]]; then
    if [[ -n ${ATTN:-} ]]; then  # ours and SDPA interleaved, attention shapes only
      attn_sets "${ssets[@]}"
    else
      sweep "${ssets[@]}"
    fi
    sanitize_attention "${csets[0]}" tma
    if [[ -n ${PROFILE:-} ]]; then
      FUSEPROF_KERNELS_DEFINES="${csets[0]}" OUT=$OUT bash "$0" profile | grep -v "^name\|^NVIDIA"
      for w in $PROFILE; do mv "$OUT/ncu_$w.summary.txt" "$OUT/ncu_${w}_tma.summary.txt"; done
      mv "$OUT/ncu_full.tar.gz" "$OUT/ncu_full_tma.tar.gz"
    fi
  fi
fi
if [[ $STEP == sets ]]; then
  # The sweep's times only, for each ';'-separated set of FUSEPROF_KERNELS_DEFINES in SETS.
  IFS=';' read -ra sets <<< "${SETS:-}"
  sweep "${sets[@]}"
fi
if [[ $STEP == attn ]]; then
  # ViT / BERT attention, ours and SDPA's default call interleaved (gpu_check.py --mode attn), for
  # each ';'-separated set of FUSEPROF_KERNELS_DEFINES in SETS (default: the default build).
  IFS=';' read -ra sets <<< "${SETS:-}"
  [[ ${#sets[@]} == 0 ]] && sets=("")
  attn_sets "${sets[@]}"
fi
if [[ $STEP == profile ]]; then
  # Nsight Compute on the attention kernels (PROFILE="window vit bert"): a summary per kernel
  # (ncu_summary.py: throughput, occupancy, warp stalls, instruction counts) in $OUT, and the
  # full details pages and per-instruction SASS tables (sass_mix.py reads them) in ncu_full.tar.gz.
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
if [[ $STEP == all || $STEP == sanitize ]]; then
  timeout 170 compute-sanitizer --tool memcheck --print-limit 20 python3 kernels/bench/gpu_check.py --mode small \
    > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|CHECKS" "$OUT/memcheck.log"
  # racecheck: our kernels only (it cannot run cuBLASLt's Hopper GEMMs, see gpu_check.py --help)
  timeout ${RACE_TIMEOUT:-200} compute-sanitizer --tool racecheck --print-limit 20 \
    python3 kernels/bench/gpu_check.py --mode race > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|ERROR SUMMARY|CHECKS" "$OUT/racecheck.log"
fi
# at most 8 files come back from the device
rm -f "$OUT/check_small.json"
[[ -f $OUT/bench.json ]] && rm -f "$OUT/bench_partial.json"
ls "$OUT"
