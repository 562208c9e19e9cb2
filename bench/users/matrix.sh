#!/usr/bin/env bash
# Runs the matrix of users' scripts through `fuseprof bench -- python3 bench/users/SCRIPT ARGS`,
# one row at a time on each GPU of the machine (each bench sees one GPU), and keeps each row's
# printed comparison (ROW.txt), its JSON (ROW.json) and its log (ROW.log) in OUT_DIR.
#
#   bench/users/matrix.sh OUT_DIR [SECONDS] [BENCH OPTIONS...] < ROWS
#
# ROWS: one row a line, `name script [script arguments]` ('#' starts a comment). No row starts
# after SECONDS (default 540) have passed; rows not run are listed in OUT_DIR/not_run.txt.
set -u
out=$1
limit=${2:-540}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge 1 ] || { echo "matrix.sh: no GPU found (nvidia-smi -L lists none)" >&2; exit 1; }
mapfile -t rows < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d')
start=$SECONDS

lane() {  # lane GPU: runs rows GPU, GPU + gpus, ...
  local gpu=$1 i
  for (( i = gpu; i < ${#rows[@]}; i += gpus )); do
    read -r name script rest <<<"${rows[$i]}"
    if (( SECONDS - start > limit )); then
      echo "$name" >>"$out/not_run.txt"
      continue
    fi
    local t0=$SECONDS
    # shellcheck disable=SC2086
    CUDA_VISIBLE_DEVICES=$gpu fuseprof bench --quiet "$@" -o "$out/$name.json" -- \
      python3 "$here/$script" $rest >"$out/$name.txt" 2>"$out/$name.log"
    echo "$name: exit $? after $(( SECONDS - t0 )) s on GPU $gpu" >>"$out/done.txt"
  done
}

for (( g = 0; g < gpus; g++ )); do
  lane "$g" "$@" &
done
wait
cat "$out/done.txt"
