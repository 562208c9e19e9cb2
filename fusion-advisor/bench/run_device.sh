#!/usr/bin/env bash
# `fuseprof bench -- CMD` on the GPU machine: the models of bench/ before and after the bundled
# kernels are swapped in. Run from the repository root with fuseprof, libfuseprof_tracer.so and
# libfuseprof_kernels.so in .dev-bin/ (cargo build --release -p fuseprof -p fuseprof-tracer
# -p fuseprof-kernels, then copy them there and carry .dev-bin):
#
#   OUT=/some/dir bash fusion-advisor/bench/run_device.sh [JOB ...]
#
# JOBs (default: all of them): swin swin_gelu vit bert train; a _gelu job also applies
# gemm_gelu (exact GELU computed in its tanh form). Each writes JOB.txt (the table) and
# JOB.json (fuseprof bench -o) under $OUT, and env.txt says which machine ran them.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to the folder for the results}"
mkdir -p "$OUT"
export PATH="$PWD/.dev-bin:$PATH" PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH="/usr/local/cuda/targets/x86_64-linux/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
ROUNDS=${ROUNDS:-3}
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, timm, transformers; print("torch", torch.__version__, "timm", timm.__version__, "transformers", transformers.__version__)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

bench() {  # NAME ARGS... -- CMD
  local name=$1; shift
  echo "== $name: fuseprof bench $*"
  local t0=$SECONDS
  fuseprof bench --rounds "$ROUNDS" -o "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2> "$OUT/$name.err"
  echo "exit $? in $((SECONDS - t0)) s"
  head -n 16 "$OUT/$name.txt"; tail -n 5 "$OUT/$name.err"
}

jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(swin swin_gelu vit bert train)
for job in "${jobs[@]}"; do
  model=${job%_gelu}
  apply=()
  [ "$job" = "$model" ] || apply=(--apply default,gemm_gelu)
  case $model in
    swin) modes=${SWIN_MODES:-eager,graphs,compile:default,compile:reduce-overhead,compile:max-autotune} ;;
    vit|bert) modes=${MODES:-eager,graphs,compile:default,compile:reduce-overhead} ;;
    train) modes=eager ;;
    *) echo "unknown job $job"; exit 2 ;;
  esac
  script=bench/${model}_infer.py
  [ "$model" = train ] && script=bench/swin_train.py
  bench "$job" --modes "$modes" "${apply[@]}" -- python3 "$script"
done
