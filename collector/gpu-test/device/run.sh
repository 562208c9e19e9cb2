#!/bin/bash
# The collector's device checks, in one go (see collector/README.md). Needs $OUT and the built
# binaries in .dev-collector/ (fuseprof, libfuseprof_tracer.so, fuseprof-gpu-test, nvtx-bench).
# SECTIONS picks what runs (default: "gpu-test models children faults overhead"; also
# "observer": the op observer against emit_nvtx, and "launch": per-launch cost).
# The recordings, their Kineto pairs and manifests come back in $OUT/recordings.tar.gz.
set -u
D=$PWD/.dev-collector; C="$D/fuseprof collect"; W=$PWD/collector/gpu-test/device
export FUSEPROF_TRACER=$D/libfuseprof_tracer.so PYTHONUNBUFFERED=1
R=$OUT/rec; mkdir -p $R
log() { echo "== $* ($(date +%T))"; }
on() { [[ " ${SECTIONS:-gpu-test models children faults overhead} " == *" $1 "* ]]; }
S=${STEPS:-3}
{
log env
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch,timm,transformers;print('torch',torch.__version__,'cuda',torch.version.cuda,'timm',timm.__version__,'transformers',transformers.__version__)"
ls -l /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so* ; nvcc --version | tail -2
python3 - > $R/env.json <<'PY'
import json, subprocess, glob, os, platform, datetime, torch, timm, transformers
smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.split()[0]
nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
cupti = sorted(os.path.basename(p) for p in glob.glob("/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.*.*"))
print(json.dumps({"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "driver": smi,
  "cuda": f"{torch.version.cuda} ({nvcc})", "cupti": ", ".join(cupti),
  "software": f"python {platform.python_version()}, torch {torch.__version__}, timm {timm.__version__}, transformers {transformers.__version__}"}))
PY
cat $R/env.json
man() { # run name what command [check.json key profiler-command]
  python3 $W/manifest.py $R/$1.sqlite --env $R/env.json --what "$2" --command "$3" \
    ${4:+--check $4 --check-key $5} ${6:+--profiler-command "$6"} --out $R/$1.manifest.json
}
if on observer; then
log "op observer: first use builds it; then one script under the observer and under emit_nvtx"
$C -o /tmp/ob0.sqlite --force --pytorch shapes -- python3 -c "import torch; print('torch', torch.__version__)"; echo "rc=$?"
for m in ${OBSERVER_MODELS:-swin swin_train bert}; do
  $C -o /tmp/ob_$m.sqlite --force --pytorch shapes -- python3 $W/workload.py $m --steps 2 --warmup 1; echo "rc=$?"
  FUSEPROF_OPS_OBSERVER=emit_nvtx $C -o /tmp/en_$m.sqlite --force --pytorch shapes -- python3 $W/workload.py $m --steps 2 --warmup 1; echo "rc=$?"
  echo "compare_ops $m (a = observer, b = emit_nvtx)"; python3 $W/compare_ops.py /tmp/ob_$m.sqlite /tmp/en_$m.sqlite
done
log "nvtx-bench: ns per push/pop pair (plain, through NVTX, through the tracer's direct entry points)"
for r in $(seq 1 ${NVTX_BENCH_ROUNDS:-3}); do
  $D/nvtx-bench 1000000
  $C -o /tmp/nb.sqlite --force --pytorch none -- $D/nvtx-bench 1000000
  $C -o /tmp/nb.sqlite --force --pytorch none -- $D/nvtx-bench 1000000 direct
done
fi
if on gpu-test; then
log gpu-test
$C -o $R/gpu_test.sqlite -- $D/fuseprof-gpu-test > $R/gpu_test.expected.json; echo "rc=$?"
python3 $W/check.py gpu-test $R/gpu_test.expected.json $R/gpu_test.sqlite | tee $R/gpu_test.check.json
man gpu_test "collector/gpu-test: 3 threads x 8 iterations on 3 streams (HtoD copy, 2 kernels, DtoH copy, memset), NVTX push/pop, start/end across threads, marks, domain, category, registered string" \
  "fuseprof collect -o gpu_test.sqlite -- fuseprof-gpu-test > gpu_test.expected.json" $R/gpu_test.check.json check_against_expected
fi
if on models; then
for m in ${MODELS:-swin vit bert swin_train}; do
  mode=shapes; [ $m = swin ] && mode=modules
  case $m in
    swin) f=swin_t_infer_modules; what="Swin-T (timm swin_tiny_patch4_window7_224, random weights, fp16, batch 64) inference";;
    vit) f=vit_b16_infer_shapes; what="ViT-B/16 (timm vit_base_patch16_224, random weights, fp16, batch 64) inference";;
    bert) f=bert_base_infer_shapes; what="BERT-base (transformers BertModel, random weights, fp16, batch 64, seq 128) inference";;
    swin_train) f=swin_t_train_step_shapes; what="Swin-T training step (forward, backward, AdamW; autocast fp16, GradScaler; batch 64)";;
  esac
  log "record $m --pytorch $mode"
  cmd="workload.py $m --steps $S --warmup 3 --window profiler"
  $C -o $R/$f.sqlite --pytorch $mode --capture cudaProfilerApi -- python3 $W/$cmd; echo "rc=$?"
  python3 $W/workload.py $m --steps $S --warmup 3 --window torchprof --kineto $R/$f.kineto.json
  python3 $W/check.py compare $R/$f.sqlite $R/$f.kineto.json | tee $R/$f.compare.json
  man $f "$what, $S steps after 3 warm-up steps" \
    "fuseprof collect -o $f.sqlite --pytorch $mode --capture cudaProfilerApi -- python3 collector/gpu-test/device/$cmd" \
    $R/$f.compare.json check_against_pytorch_profiler \
    "python3 collector/gpu-test/device/workload.py $m --steps $S --warmup 3 --window torchprof (torch.profiler, CPU+CUDA, record_shapes=True), same device, right after"
  rm -f $R/$f.kineto*.json  # the committed Kineto pair (swin_t_infer.kineto.json.gz) stays as it is
done
fi
if on children; then
log "children: DataLoader workers"
$C -o $R/c_loader.sqlite --pytorch none -- python3 $W/children.py dataloader; echo "rc=$?"
python3 $W/check.py pids $R/c_loader.sqlite
log "children: torchrun, 2 ranks"
$C -o $R/c_torchrun.sqlite --pytorch none -- torchrun --standalone --nproc_per_node=2 $W/children.py rank; echo "rc=$?"
python3 $W/check.py pids $R/c_torchrun.sqlite
log "children: a shell script that starts python"
printf '#!/bin/sh\necho script pid $$\nexec python3 -c "import torch; x=torch.ones(64,device=\\"cuda\\"); x.add_(1); torch.cuda.synchronize(); print(\\"child done\\")"\n' > /tmp/start.sh
chmod +x /tmp/start.sh; cat /tmp/start.sh
$C -o $R/c_script.sqlite --pytorch none -- sh -c '/tmp/start.sh; /tmp/start.sh'; echo "rc=$?"
python3 $W/check.py pids $R/c_script.sqlite
rm -f $R/c_*.sqlite
fi
if on overhead; then
log overhead
N=${OVERHEAD_STEPS:-100}
WL="$W/workload.py swin --steps $N --warmup 10"
python3 $WL --timing $OUT/t_1_base.json
$C -o /tmp/o_cuda.sqlite --pytorch none -- python3 $WL --timing $OUT/t_2_cuda.json
$C --all-api -o /tmp/o_cuda_all.sqlite --pytorch none -- python3 $WL --timing $OUT/t_3_cuda_all_api.json
$C -o /tmp/o_ops.sqlite --pytorch ops -- python3 $WL --timing $OUT/t_4_cuda_ops.json
$C -o /tmp/o_shapes.sqlite --pytorch shapes -- python3 $WL --timing $OUT/t_5_cuda_shapes.json
PYTHONPATH=$PWD/collector/python FUSEPROF_PYTORCH=shapes python3 $WL --timing $OUT/t_6_emit_nvtx_shapes_no_tracer.json
python3 $WL --window torchprof --timing $OUT/t_7_torch_profiler.json
python3 $WL --timing $OUT/t_8_base_again.json
for f in $OUT/t_*.json; do echo "$(basename $f) $(cat $f)"; done
fi
if on faults; then
log faults
timeout --preserve-status -s TERM 15 $C -o $R/f_term.sqlite --pytorch none -- python3 $W/workload.py swin --steps 100000 --warmup 0; echo "rc=$? (SIGTERM to collect)"
$C -o $R/f_kill.sqlite --pytorch none -- python3 -c "
import os,time,torch
x=torch.randn(1024,1024,device='cuda'); t=time.time()
while time.time()-t<3: y=x@x
torch.cuda.synchronize(); time.sleep(1.5); os.kill(os.getpid(),9)"; echo "rc=$? (SIGKILL inside)"
FUSEPROF_CUPTI_FLUSH_PERIOD_MS=500 $C -o $R/f_kill_period.sqlite --pytorch none -- python3 -c "
import os,time,torch
x=torch.randn(1024,1024,device='cuda'); t=time.time()
while time.time()-t<3: y=x@x
torch.cuda.synchronize(); time.sleep(1.5); os.kill(os.getpid(),9)"; echo "rc=$? (SIGKILL inside, 500 ms periodic flush)"
for how in "ctypes.string_at(0)" "os.abort()"; do
$C -o $R/f_crash.sqlite --force --pytorch none -- python3 -c "
import ctypes,os,torch
x=torch.randn(1024,1024,device='cuda')
for _ in range(200): y=x@x
torch.cuda.synchronize(); $how"; echo "rc=$? (crash inside: $how; 200 matmul kernels before it)"
echo "f_crash $(python3 $W/check.py summary $R/f_crash.sqlite | cut -c1-200)"
done
CUDA_VISIBLE_DEVICES= $C -o $R/f_nogpu.sqlite -- python3 -c "import torch; torch.ones(1).cuda()" 2>&1 | tail -3; echo "rc=${PIPESTATUS[0]} (no GPU)"
$C -o $R/f_multi.sqlite --pytorch none -- sh -c 'for i in 1 2; do python3 -c "import torch; x=torch.ones(256,device=\"cuda\"); [x.add_(1) for _ in range(10)]; torch.cuda.synchronize()" & done; wait'; echo "rc=$? (two processes)"
$C -o $R/f_capnvtx.sqlite --pytorch none --capture nvtx:step2 -- python3 -c "
import torch; x=torch.randn(512,512,device='cuda')
for i in range(5):
    torch.cuda.nvtx.range_push('step%d'%i); y=x@x; torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()"; echo "rc=$? (capture nvtx:step2)"
$C -o $R/f_inner.sqlite --pytorch none -- python3 $W/workload.py swin --steps 2 --warmup 1 --window torchprof --kineto /tmp/inner.json; echo "rc=$? (torch profiler inside)"
for f in f_term f_kill f_kill_period f_nogpu f_multi f_capnvtx f_inner; do echo "$f $(python3 $W/check.py summary $R/$f.sqlite | cut -c1-400)"; done
fi
if on launch; then
log "launch cost: CPU-bound loop of tiny kernels, with and without an NVTX range per launch"
LB="$W/launch_bench.py --launches ${LAUNCHES:-20000} --rounds ${LAUNCH_ROUNDS:-7}"
lb() { # name env... -- (tracer|plain|prof MODE)
  local name=$1; shift; local envs=(X=1); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local how=$1 res
  case $how in
    plain) res=$(env "${envs[@]}" python3 $LB 2>/dev/null | grep plain_ns);;
    prof) res=$(env "${envs[@]}" python3 $LB --profiler $2 2>/dev/null | grep plain_ns);;
    tracer) shift; res=$(env "${envs[@]}" $C -o /tmp/l.sqlite --force --pytorch none "$@" -- python3 $LB 2>/dev/null | grep plain_ns);;
  esac
  echo "launch $name r$r $res"
}
for r in $(seq 1 ${LAUNCH_REPEATS:-2}); do
  case ${LAUNCH_SET:-kinds} in
  kinds)
  lb base -- plain
  lb tracer_default -- tracer
  lb tracer_no_cupti FUSEPROF_CUPTI_KINDS=none -- tracer
  lb tracer_gpu_activity FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset -- tracer
  lb tracer_api_only FUSEPROF_CUPTI_KINDS=runtime,driver -- tracer
  lb torchprof_cuda -- prof cuda
  lb torchprof_cpu_cuda -- prof cpu_cuda
  ;;
  filters)
  lb base -- plain
  lb tracer_default -- tracer
  lb tracer_all_api -- tracer --all-api
  lb tracer_no_driver FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset,runtime,sync,overhead -- tracer
  lb tracer_no_runtime FUSEPROF_CUPTI_KINDS=kernel,memcpy,memset,driver,sync,overhead -- tracer
  lb tracer_per_thread FUSEPROF_CUPTI_PER_THREAD=1 -- tracer
  lb tracer_all_api_per_thread FUSEPROF_CUPTI_PER_THREAD=1 -- tracer --all-api
  lb torchprof_cuda -- prof cuda
  ;;
  esac
done
fi
log done
} 2>&1 | tee $OUT/log.txt
rm -f $R/f_*.sqlite
cd $OUT && tar czf recordings.tar.gz rec && rm -rf rec
