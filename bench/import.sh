#!/usr/bin/env bash
# Import throughput and peak memory, on one core (taskset -c 0), for
#   1. a >= 2 million event Kineto trace made by repeating a real trace's steps (plain, gzip),
#   2. a >= 2 million event nsys export made by repeating a real export's event tables, and
#   3. the real nsys export fixture.
# `fuseprof import` ends by keeping the explorer's summaries in the run (its lane summary and the
# analysis, so that `fuseprof tui` opens it exact at once): the table gives that step's seconds
# and the throughput of the whole command and of the import before it.
# Prints a markdown table. Usage: bench/import.sh [COPIES [NSYS_COPIES]]
#   (defaults 420 -> 2.02 M Kineto events, 64 -> 2.06 M nsys events; 2100 -> 10.1 M Kineto)
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-420}
nsys_copies=${2:-64}
work=${BENCH_DIR:-$(mktemp -d)}
cargo build --release -q -p fuseprof --bin fuseprof
cargo build --release -q -p fuseprof-collector --example gen_kineto --example gen_nsys
target=${CARGO_TARGET_DIR:-target}
# FUSEPROF_BIN: another build to measure (e.g. the one before a change) on the same inputs.
bin=${FUSEPROF_BIN:-$target/release/fuseprof}
src=fixtures/kineto/hta_timeline_analysis_sampled_rank-0.json.gz
big=$work/kineto-big.json
[ -f "$big" ] || $target/release/examples/gen_kineto "$src" "$copies" "$big"
[ -f "$big.gz" ] || gzip -kf -1 "$big"
nsys_src=fixtures/nsys/nsysai_mfu_2gpu_before.sqlite
nsys_big=$work/nsys-big.sqlite
[ -f "$nsys_big" ] || $target/release/examples/gen_nsys "$nsys_src" "$nsys_copies" "$nsys_big"

row() { # label input
  local label=$1 input=$2 out=$work/run.sqlite log=$work/time.log
  rm -f "$out"
  taskset -c 0 /usr/bin/time -v "$bin" import "$input" -o "$out" 2> "$log" || { cat "$log"; exit 1; }
  local events secs cpu rss_kb size_mb sum_s
  events=$(grep -o 'from [0-9]* source events' "$log" | grep -o '[0-9]*')
  sum_s=$(grep -o "kept the explorer's summaries.* in [0-9.]* s" "$log" | grep -o '[0-9.]* s$' | grep -o '[0-9.]*' || true)
  secs=$(grep 'Elapsed (wall clock)' "$log" | awk '{print $NF}' | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
  cpu=$(grep -E '(User|System) time \(seconds\)' "$log" | awk '{s += $NF} END {print s}')
  rss_kb=$(grep 'Maximum resident set size' "$log" | awk '{print $NF}')
  case "$input" in
    *.gz) size_mb=$(gzip -dc "$input" | wc -c | awk '{print $1/1e6}') ;;
    *) size_mb=$(stat -c %s "$input" | awk '{print $1/1e6}') ;;
  esac
  awk -v l="$label" -v e="$events" -v s="$secs" -v c="$cpu" -v r="$rss_kb" -v m="$size_mb" -v k="${sum_s:-0}" 'BEGIN {
    printf "| %s | %d | %.1f | %.2f | %.2f | %.2f | %.2f M/s | %.2f M/s | %.0f | %.2fx |\n", l, e, m, s, k, c, e/s/1e6, e/(s-k)/1e6, r/1024, (r*1024)/(m*1e6) }'
}

echo "| input | events | uncompressed MB | wall s | of it, summaries s | CPU s | events/s | events/s without summaries | peak RSS MiB | peak / input |"
echo "|---|---|---|---|---|---|---|---|---|---|"
row "Kineto JSON (timeline_analysis x$copies)" "$big"
row "same, gzip" "$big.gz"
row "nsys export (nsysai_mfu_2gpu_before x$nsys_copies)" "$nsys_big"
row "nsys export (nsysai_mfu_2gpu_before)" "$nsys_src"
