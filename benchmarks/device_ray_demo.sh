#!/usr/bin/env bash
# The demo bisect with the Ray executor on the GPU machine (one H200), for docs/benchmarks.md ("Ray executor").
#
# Where a package registry is reachable, first:   bash ../shared/device/make-bundle.sh
# Then on the GPU machine, from the repository root, with .devbundle/ sent along:
#   bash benchmarks/device_ray_demo.sh
# Everything it records goes to $OUT (./device-out when $OUT is unset):
#   versions.txt         python, ray, torch, triton, git, GPU model and driver (nvidia-smi)
#   nvidia-smi.csv       GPU utilization and memory, sampled every second while the bisect runs
#   demo-ray.json        the report (`--format json`): status, culprit, steps with worker, node and GPUs
#   demo-ray.stderr      progress lines and any error
#   timing.txt           exit code and wall time of the bisect command (Ray's local cluster start included)
#   logs/                the step logs
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
if [ -d .devbundle ]; then
  bash .devbundle/install.sh || { echo "bundle install failed" >&2; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
work=$(mktemp -d)
export BISECT_DATA_DIR=$work/data BISECT_CACHE_DIR=$work/cache
unset BISECT_GPUS  # let the executor find the GPU (nvidia-smi) and declare it to its local Ray cluster

{
  python3 --version
  python3 -c 'import ray; print("ray", ray.__version__)'
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
  python3 -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
  git --version
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
} > "$out/versions.txt" 2>&1

nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 1 > "$out/nvidia-smi.csv" 2>&1 &
sampler=$!
started=$(date +%s.%N)
python3 -m bisector demo run --executor ray --workers 1 --format json > "$out/demo-ray.json" 2> "$out/demo-ray.stderr"
rc=$?
ended=$(date +%s.%N)
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
echo "exit $rc wall_s $(python3 -c "print(round($ended - $started, 2))")" > "$out/timing.txt"
[ -d "$BISECT_DATA_DIR/logs" ] && cp -r "$BISECT_DATA_DIR/logs" "$out/logs"
cat "$out/timing.txt" "$out/versions.txt"
tail -5 "$out/demo-ray.stderr"
exit "$rc"
