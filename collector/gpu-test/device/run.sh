#!/bin/bash
# The collector's device checks, in one go (see collector/README.md). Needs $OUT and the built
# binaries in .dev-collector/ (fuseprof, libfuseprof_tracer.so, fuseprof-gpu-test).
set -u
D=$PWD/.dev-collector; C="$D/fuseprof collect"; W=$PWD/collector/gpu-test/device
export FUSEPROF_TRACER=$D/libfuseprof_tracer.so PYTHONUNBUFFERED=1
R=$OUT/rec; mkdir -p $R
log() { echo "== $* ($(date +%T))"; }
S=${STEPS:-3}
{
log env
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch,timm,transformers;print('torch',torch.__version__,'cuda',torch.version.cuda,'timm',timm.__version__,'transformers',transformers.__version__)"
ls -l /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so* ; nvcc --version | tail -2
log gpu-test
$C -o $R/gpu-test.sqlite -- $D/fuseprof-gpu-test > $R/gpu-test.expected.json; echo "rc=$?"
python3 $W/check.py gpu-test $R/gpu-test.expected.json $R/gpu-test.sqlite
for m in ${MODELS:-swin vit bert swin_train}; do
  mode=shapes; [ $m = swin ] && mode=modules
  log "record $m --pytorch $mode"
  $C -o $R/$m.sqlite --pytorch $mode --capture cudaProfilerApi -- python3 $W/workload.py $m --steps $S --warmup 3 --window profiler; echo "rc=$?"
  python3 $W/workload.py $m --steps $S --warmup 3 --window torchprof --kineto $R/$m.kineto.json
  python3 $W/check.py compare $R/$m.sqlite $R/$m.kineto.json
  python3 $W/check.py summary $R/$m.sqlite
done
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
log faults
timeout --preserve-status -s TERM 15 $C -o $R/f_term.sqlite --pytorch none -- python3 $W/workload.py swin --steps 100000 --warmup 0; echo "rc=$? (SIGTERM to collect)"
$C -o $R/f_kill.sqlite --pytorch none -- python3 -c "
import os,time,torch
x=torch.randn(1024,1024,device='cuda'); t=time.time()
while time.time()-t<3: y=x@x
torch.cuda.synchronize(); time.sleep(1.5); os.kill(os.getpid(),9)"; echo "rc=$? (SIGKILL inside)"
CUDA_VISIBLE_DEVICES= $C -o $R/f_nogpu.sqlite -- python3 -c "import torch; torch.ones(1).cuda()" 2>&1 | tail -3; echo "rc=${PIPESTATUS[0]} (no GPU)"
$C -o $R/f_multi.sqlite --pytorch none -- sh -c 'for i in 1 2; do python3 -c "import torch; x=torch.ones(256,device=\"cuda\"); [x.add_(1) for _ in range(10)]; torch.cuda.synchronize()" & done; wait'; echo "rc=$? (two processes)"
$C -o $R/f_capnvtx.sqlite --pytorch none --capture nvtx:step2 -- python3 -c "
import torch; x=torch.randn(512,512,device='cuda')
for i in range(5):
    torch.cuda.nvtx.range_push('step%d'%i); y=x@x; torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()"; echo "rc=$? (capture nvtx:step2)"
$C -o $R/f_inner.sqlite --pytorch none -- python3 $W/workload.py swin --steps 2 --warmup 1 --window torchprof --kineto /tmp/inner.json; echo "rc=$? (torch profiler inside)"
for f in f_term f_kill f_nogpu f_multi f_capnvtx f_inner; do echo "$f $(python3 $W/check.py summary $R/$f.sqlite | cut -c1-400)"; done
log done
} 2>&1 | tee $OUT/log.txt
rm -f $R/f_*.sqlite
cd $OUT && tar czf recordings.tar.gz rec && rm -rf rec
