#!/bin/bash
# Where the collector's overhead comes from: the Swin-T loop under each tracing configuration,
# at batch 1 (CPU-bound: time per step = host cost of one step) and at batch 64 (the loop the
# overhead target is about). Each configuration runs in its own process; rounds are interleaved.
# DIAG_SET=all (every diagnostic), issue (the README's table), main, final, final2, observer, writer (where the writer's work lands), cuda_only (untraced, CUDA-only and two of its suspects), shapes, shapes2 or shapes3 (the configurations the README reports);
# ROUNDS_ALT>0 adds in-process comparisons (--window alternate).
# Writes $OUT/diag.jsonl (one row per process, with per-step times) and $OUT/diag.log.
# Needs .dev-collector/ (fuseprof, libfuseprof_tracer.so).
set -u
D=$PWD/.dev-collector; C="$D/fuseprof collect"; W=$PWD/collector/gpu-test/device
export FUSEPROF_TRACER=$D/libfuseprof_tracer.so PYTHONUNBUFFERED=1
LOG=$OUT/diag.log
one() { # name batch steps "workload args" env... -- command...
  local name=$1 batch=$2 steps=$3 wargs=$4; shift 4
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  rm -f /tmp/t.json
  echo "== $name b$batch r$r $(date +%T)" >> $LOG
  env "${envs[@]}" "$@" $W/workload.py swin --batch $batch --steps $steps --warmup 10 $wargs --timing /tmp/t.json >> $LOG 2>&1
  [ -f /tmp/t.json ] && echo "{\"config\":\"$name\",\"batch\":$batch,\"round\":$r,\"result\":$(cat /tmp/t.json)}" >> $OUT/diag.jsonl
}
T="$C -o /tmp/o.sqlite --force"
configs() { # batch steps
  local b=$1 n=$2
  case "${DIAG_SET:-all}" in
  all)
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  one cuda_zeroed_buffers $b $n "" FUSEPROF_CUPTI_ZERO=1 -- $T --pytorch none -- python3
  one cuda_kernels_only $b $n "" FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset -- $T --pytorch none -- python3
  one cuda_no_driver $b $n "" FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset,runtime,sync,overhead -- $T --pytorch none -- python3
  one cuda_per_thread $b $n "" FUSEPROF_CUPTI_PER_THREAD=1 -- $T --pytorch none -- python3
  one cuda_hw_trace $b $n "" FUSEPROF_CUPTI_HW_TRACE=1 -- $T --pytorch none -- python3
  one cuda_no_flush_period $b $n "" FUSEPROF_CUPTI_FLUSH_PERIOD_MS=0 -- $T --pytorch none -- python3
  one torchprof_cuda $b $n "--window torchprof_cuda" X=1 -- python3
  one nvtx_shapes_no_cupti $b $n "" FUSEPROF_CUPTI_KINDS=none -- $T --pytorch shapes -- python3
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one emit_nvtx_shapes_no_tracer $b $n "" PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  one torchprof_cpu_shapes $b $n "--window torchprof_cpu" X=1 -- python3
  ;;
  main)
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  one cuda_zeroed_buffers $b $n "" FUSEPROF_CUPTI_ZERO=1 -- $T --pytorch none -- python3
  one cuda_per_thread $b $n "" FUSEPROF_CUPTI_PER_THREAD=1 -- $T --pytorch none -- python3
  one torchprof_cuda $b $n "--window torchprof_cuda" X=1 -- python3
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one emit_nvtx_shapes_no_tracer $b $n "" PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  ;;
  final)
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one emit_nvtx_shapes_no_tracer $b $n "" PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  ;;
  shapes)
  one emit_nvtx_shapes_no_tracer $b $n "" PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes -- python3
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one cuda_shapes_spool_in_shm $b $n "" TMPDIR=/dev/shm -- $T --pytorch shapes -- python3
  one nvtx_shapes_no_cupti $b $n "" FUSEPROF_CUPTI_KINDS=none -- $T --pytorch shapes -- python3
  one shapes_gpu_activity_only $b $n "" FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset -- $T --pytorch shapes -- python3
  ;;
  final2)
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  one cuda_no_flush_period $b $n "" FUSEPROF_CUPTI_FLUSH_PERIOD_MS=0 -- $T --pytorch none -- python3
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one cuda_shapes_no_flush_period $b $n "" FUSEPROF_CUPTI_FLUSH_PERIOD_MS=0 -- $T --pytorch shapes -- python3
  one cuda_shapes_per_thread $b $n "" FUSEPROF_CUPTI_PER_THREAD=1 -- $T --pytorch shapes -- python3
  one emit_nvtx_shapes_no_tracer $b $n "" PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  ;;
  cuda_only)
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  # two suspects for CUDA-only's cost on a loaded host: a gettid() per API record (the system
  # thread ids that match NVTX's), and the driver-API records under every runtime call
  one cuda_default_tid $b $n "" FUSEPROF_CUPTI_DEFAULT_TID=1 -- $T --pytorch none -- python3
  one cuda_no_driver $b $n "" FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset,runtime,sync,overhead -- $T --pytorch none -- python3
  # and the PyTorch profiler's CUDA-only mode: CUPTI's cost as Kineto pays it, same rounds
  one torchprof_cuda $b $n "--window torchprof_cuda" X=1 -- python3
  ;;
  issue)
  # the issue's table: untraced, CUDA only, CUDA + shapes, and the PyTorch profiler in both modes
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one torchprof_cuda $b $n "--window torchprof_cuda" X=1 -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  ;;
  writer)
  # the writer's decoding during the run (FUSEPROF_CUPTI_DEFER=1 holds CUPTI's buffers until the
  # end, as the PyTorch profiler does), the kinds the profiler's CUDA mode records, kernels only
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  one cuda_defer $b $n "" FUSEPROF_CUPTI_DEFER=1 -- $T --pytorch none -- python3
  one cuda_profiler_kinds $b $n "" FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset,runtime,driver -- $T --pytorch none -- python3
  one cuda_kernels_only $b $n "" FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset -- $T --pytorch none -- python3
  one torchprof_cuda $b $n "--window torchprof_cuda" X=1 -- python3
  ;;
  observer)
  one base $b $n "" X=1 -- python3
  one cuda $b $n "" X=1 -- $T --pytorch none -- python3
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one cuda_shapes_emit_nvtx $b $n "" FUSEPROF_OPS_OBSERVER=emit_nvtx -- $T --pytorch shapes -- python3
  one emit_nvtx_shapes_no_tracer $b $n "" PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  ;;
  shapes2)
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one cuda_shapes_no_sync_overhead $b $n "" FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset,runtime,driver -- $T --pytorch shapes -- python3
  one cuda_shapes_all_api $b $n "" X=1 -- $T --all-api --pytorch shapes -- python3
  one emit_nvtx_shapes_no_tracer $b $n "" PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  ;;
  shapes3)
  one cuda_shapes $b $n "" X=1 -- $T --pytorch shapes -- python3
  one cuda_shapes_default_tid $b $n "" FUSEPROF_CUPTI_DEFAULT_TID=1 -- $T --pytorch shapes -- python3
  one cuda_shapes_4mb_buffers $b $n "" FUSEPROF_CUPTI_BUFFER_MB=4 -- $T --pytorch shapes -- python3
  one cuda_shapes_kineto_like $b $n "" FUSEPROF_CUPTI_DEFAULT_TID=1 FUSEPROF_CUPTI_BUFFER_MB=4 FUSEPROF_CUPTI_ZERO=1 -- $T --pytorch shapes -- python3
  one torchprof $b $n "--window torchprof" X=1 -- python3
  ;;
  esac
}
# Traced and untraced steps of one process: recording switched on and off every 25 steps.
alternate() { # batch steps
  one alt_cuda $1 $2 "--window alternate --period 25" X=1 -- $T --pytorch none --capture cudaProfilerApi -- python3
  one alt_cuda_zeroed_buffers $1 $2 "--window alternate --period 25" FUSEPROF_CUPTI_ZERO=1 -- $T --pytorch none --capture cudaProfilerApi -- python3
}
for r in $(seq 1 ${ROUNDS_ALT:-0}); do alternate 64 ${STEPS_ALT:-400}; done
for r in $(seq 1 ${ROUNDS_B1:-1}); do configs 1 ${STEPS_B1:-150}; done
for r in $(seq 1 ${ROUNDS_B64:-1}); do configs 64 ${STEPS_B64:-150}; done
