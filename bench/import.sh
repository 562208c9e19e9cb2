#!/usr/bin/env bash
# Import throughput and peak memory, on one core (taskset -c 0) and on two (taskset -c 0,1), for
#   1. a >= 2 million event Kineto trace made by repeating a real trace's steps (plain, gzip),
#   2. a >= 2 million event nsys export made by repeating a real export's event tables, and
#   3. the real nsys export fixture.
# `fuseprof import` ends by keeping the explorer's summaries in the run (its lane summary and the
# analysis, so that `fuseprof tui` opens it exact at once): the table gives that step's seconds
# and the throughput of the whole command and of the import before it.
# Prints a markdown table, each row the best wall time of REPEAT runs (default 3); with
# BEFORE_BIN=<an earlier build>, a row for each build, their runs taking turns.
# Usage: bench/import.sh [COPIES [NSYS_COPIES]]
#   (defaults 420 -> 2.02 M Kineto events, 64 -> 2.06 M nsys events; 2100 -> 10.1 M Kineto)
#
# bench/import.sh ranks [RANKS [COPIES]]: one job's ranks in one import: RANKS
# Kineto traces (default 2) of COPIES copies of the HTA rank traces' steps each (default 200:
# about 0.95 M events, 320 MB a rank), imported together on one core (taskset -c 0) and on two
# (taskset -c 0,1); each row is the best wall time of REPEAT runs (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=single
if [ "${1:-}" = ranks ]; then
  mode=ranks
  shift
fi
copies=${1:-420}
nsys_copies=${2:-64}
work=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$work"
target=${CARGO_TARGET_DIR:-target}
# FUSEPROF_BIN: the build to measure, if not this checkout's.
# GEN_DIR: where gen_kineto and gen_nsys are. With both given, nothing is built: a machine
# without a Rust toolchain (the GPU host) runs the benchmark on binaries built elsewhere.
bin=${FUSEPROF_BIN:-$target/release/fuseprof}
gen=${GEN_DIR:-$target/release/examples}
# GNU time where it is installed, else a stand-in that prints the lines read below.
if [ -x /usr/bin/time ]; then timer=(/usr/bin/time); else timer=(python3 bench/time.py); fi
if [ -z "${FUSEPROF_BIN:-}" ] || [ -z "${GEN_DIR:-}" ]; then
  cargo build --release -q -p fuseprof --bin fuseprof
  cargo build --release -q -p fuseprof-collector --example gen_kineto --example gen_nsys
fi

# BEFORE_BIN: a second build (the one before a change) measured on the same inputs in the same
# loop, its runs taking turns with this build's, so that both see the machine alike; each row
# is then printed for both builds ("this" and "before").
builds=("$bin")
names=(this)
if [ -n "${BEFORE_BIN:-}" ]; then
  builds+=("$BEFORE_BIN")
  names+=(before)
fi

# best_of LABEL CPUS INPUT...: imports INPUT... REPEAT times (default 3) with each build in turn
# on CPUS (runs of one build vary here) and prints, one line per build, its fastest run by wall
# time as "wall_s cpu_s peak_rss_kb events summaries_s".
best_of() {
  local label=$1 cpus=$2 out=$work/run.sqlite log=$work/time.log k b secs cpu rss_kb events sum_s
  local best=()
  shift 2
  for ((k = 0; k < ${REPEAT:-3}; k++)); do
    for b in "${!builds[@]}"; do
      rm -f "$out"
      taskset -c "$cpus" "${timer[@]}" -v "${builds[$b]}" import "$@" -o "$out" 2> "$log" || { cat "$log" >&2; exit 1; }
      # One file's source events, or the events of a job's ranks.
      events=$(grep -o 'from [0-9]* source events' "$log" | grep -o '[0-9]*' \
        || grep -o 'ranks: [0-9]* kernels, [0-9]* events' "$log" | grep -o '[0-9]* events' | grep -o '[0-9]*')
      sum_s=$(grep -o "kept the explorer's summaries.* in [0-9.]* s" "$log" | grep -o '[0-9.]* s$' | grep -o '[0-9.]*' || true)
      secs=$(grep 'Elapsed (wall clock)' "$log" | awk '{print $NF}' | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
      cpu=$(grep -E '(User|System) time \(seconds\)' "$log" | awk '{s += $NF} END {print s}')
      rss_kb=$(grep 'Maximum resident set size' "$log" | awk '{print $NF}')
      echo "  $label, ${names[$b]} build, on cpus $cpus, run $((k + 1)): $secs s wall, $cpu s CPU, $rss_kb KB" >&2
      if [ -z "${best[$b]:-}" ] || awk -v a="$secs" -v c="${best[$b]%% *}" 'BEGIN {exit !(a < c)}'; then
        best[$b]="$secs $cpu $rss_kb $events ${sum_s:-0}"
      fi
    done
  done
  for b in "${!builds[@]}"; do
    echo "${best[$b]}"
  done
}

if [ "$mode" = ranks ]; then
  ranks=${1:-2}
  copies=${2:-200}
  inputs=()
  size_mb=0
  for ((r = 0; r < ranks; r++)); do
    # The HTA job's two traces, taken in turn (rank 2 repeats rank 0's steps, ...).
    case $((r % 2)) in
      0) src=fixtures/kineto/hta_timeline_analysis_sampled_rank-0.json.gz ;;
      1) src=fixtures/kineto/hta_trace_filter_sampled_rank-1.json.gz ;;
    esac
    f=$work/job-x$copies-rank-$r.json
    [ -f "$f" ] || $gen/gen_kineto "$src" "$copies" "$f" 2> /dev/null
    inputs+=("$f")
    size_mb=$(awk -v a="$size_mb" -v b="$(stat -c %s "$f")" 'BEGIN {print a + b/1e6}')
  done
  echo "| input | build | cores | events | uncompressed MB | wall s | CPU s | events/s | peak RSS MiB | peak / input |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for cpus in 0 0,1; do
    mapfile -t bests < <(best_of "$ranks ranks" $cpus "${inputs[@]}")
    [ "${#bests[@]}" -eq "${#builds[@]}" ] || exit 1  # a failed import stops the script
    for b in "${!builds[@]}"; do
      read -r secs cpu rss_kb events _ <<< "${bests[$b]}"
      awk -v l="$ranks ranks (HTA job x$copies), Kineto JSON" -v w="${names[$b]}" -v n="$(echo $cpus | tr , '\n' | wc -l)" -v e="$events" -v s="$secs" -v c="$cpu" -v r="$rss_kb" -v m="$size_mb" 'BEGIN {
        printf "| %s | %s | %d | %d | %.1f | %.2f | %.2f | %.2f M/s | %.0f | %.2fx |\n", l, w, n, e, m, s, c, e/s/1e6, r/1024, (r*1024)/(m*1e6) }'
    done
  done
  exit 0
fi
src=fixtures/kineto/hta_timeline_analysis_sampled_rank-0.json.gz
big=$work/kineto-big.json
[ -f "$big" ] || $gen/gen_kineto "$src" "$copies" "$big"
[ -f "$big.gz" ] || gzip -kf -1 "$big"
nsys_src=fixtures/nsys/nsysai_mfu_2gpu_before.sqlite
nsys_big=$work/nsys-big.sqlite
[ -f "$nsys_big" ] || $gen/gen_nsys "$nsys_src" "$nsys_copies" "$nsys_big"

row() { # label input cpus
  local label=$1 input=$2 cpus=$3 bests secs cpu rss_kb events sum_s size_mb
  # The input read once first, so that the row times the import and not the disk.
  cat "$input" > /dev/null
  mapfile -t bests < <(best_of "$label" "$cpus" "$input")
  [ "${#bests[@]}" -eq "${#builds[@]}" ] || exit 1  # a failed import stops the script
  case "$input" in
    *.gz) size_mb=$(gzip -dc "$input" | wc -c | awk '{print $1/1e6}') ;;
    *) size_mb=$(stat -c %s "$input" | awk '{print $1/1e6}') ;;
  esac
  for b in "${!builds[@]}"; do
    read -r secs cpu rss_kb events sum_s <<< "${bests[$b]}"
    awk -v l="$label" -v w="${names[$b]}" -v n="$(echo "$cpus" | tr , '\n' | wc -l)" -v e="$events" -v s="$secs" -v c="$cpu" -v r="$rss_kb" -v m="$size_mb" -v k="$sum_s" 'BEGIN {
      printf "| %s | %s | %d | %d | %.1f | %.2f | %.2f | %.2f | %.2f M/s | %.2f M/s | %.2f M/s | %.0f | %.2fx |\n", l, w, n, e, m, s, k, c, e/s/1e6, e/(s-k)/1e6, e/c/1e6, r/1024, (r*1024)/(m*1e6) }'
  done
}

# events/s: by wall time (which includes waiting for the disk at the end of writing the run);
# events per CPU s: by user + system time, which depends less on what else the machine does.
# On two cores a gzip trace is inflated on a thread of its own and the summaries' two parts
# run side by side; one core does the same work in turn.
echo "| input | build | cores | events | uncompressed MB | wall s | of it, summaries s | CPU s | events/s | events/s without summaries | events per CPU s | peak RSS MiB | peak / input |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for cpus in 0 0,1; do
  row "Kineto JSON (timeline_analysis x$copies)" "$big" $cpus
  row "same, gzip" "$big.gz" $cpus
  row "nsys export (nsysai_mfu_2gpu_before x$nsys_copies)" "$nsys_big" $cpus
  row "nsys export (nsysai_mfu_2gpu_before)" "$nsys_src" $cpus
done
