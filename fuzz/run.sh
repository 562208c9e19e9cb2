#!/usr/bin/env bash
# Runs the fuzz targets (fuzz/fuzz_targets) for SECONDS each (default 60), one after another,
# from a scratch copy of the committed corpora; crashes land in fuzz/artifacts/TARGET and make
# the script exit 1. Needs a nightly toolchain; installs cargo-fuzz from crates.io if missing.
# With FUZZ_RUNS=N each target instead runs N inputs from a fixed seed, which is what CI runs:
# the mutations then follow the same sequence from the same corpus on every machine (coverage
# feedback that depends on timing can still vary a little).
#
#   bash fuzz/run.sh [SECONDS] [TARGET ...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(kineto nsys spool store ranks tui outputs)
if ! cargo +nightly --version > /dev/null 2>&1; then
  echo "fuzz: no nightly toolchain here; the corpora still run as tests (cargo test)"
  exit 0
fi
cargo +nightly fuzz --version > /dev/null 2>&1 || cargo +nightly install -q cargo-fuzz --locked
declare -A max_len=([kineto]=131072 [nsys]=262144 [spool]=65536 [store]=131072 [ranks]=262144 [tui]=131072 [outputs]=131072)
failed=0
for t in "${targets[@]}"; do
  work=fuzz/corpus-work/$t
  rm -rf "$work" && mkdir -p "$work" && cp fuzz/corpus/"$t"/* "$work"/
  if [ -n "${FUZZ_RUNS:-}" ]; then
    budget=(-runs="$FUZZ_RUNS" -seed=1)
    echo "fuzz: $t for $FUZZ_RUNS inputs from seed 1"
  else
    budget=(-max_total_time="$secs")
    echo "fuzz: $t for $secs s"
  fi
  # No leak check, during the run (-detect_leaks=0) or at its exit (ASAN_OPTIONS): a thread
  # still exiting when an input ends (sqlx's connection workers are not joined) leaves its
  # thread-local destructors' registrations and its handle, which LeakSanitizer reads as a
  # leak at random; runaway memory is caught by the RSS limit.
  if ! ASAN_OPTIONS=detect_leaks=0 cargo +nightly fuzz run -O "$t" "$work" -- "${budget[@]}" \
      -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 -detect_leaks=0 \
      -print_final_stats=1 \
      > "fuzz/corpus-work/$t.log" 2>&1; then
    failed=1
    tail -n 30 "fuzz/corpus-work/$t.log"
  fi
  grep -E '^stat::number_of_executed_units|^stat::new_units_added' "fuzz/corpus-work/$t.log" \
    | sed "s/^/fuzz: $t: /"
done
exit $failed
