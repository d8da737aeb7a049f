#!/usr/bin/env bash
# Third-session H200 run (docs/benchmarks.md): the tiny GEMM with the shipped table against cuBLAS, accept
# length good and bad, the batch-invariance probe, the GPU demo bisect, and the core benchmark on the GPU
# host's 16 CPUs. Run from the repository root on the GPU machine with .devbundle (results in $OUT).
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
bash .devbundle/install.sh || { echo "bundle install failed" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
{
  date -u; nproc; python3 --version; git --version; git log -1 --format='%h %s'
  python3 -c 'import torch, triton, pygit2; print("torch", torch.__version__, "triton", triton.__version__, "pygit2", pygit2.__version__)'
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
} > "$out/versions.txt" 2>&1
bad='{"144x7168": 2, "896x7168": 2, "1536x128": 2}'
{
  echo "== shipped table (twice)"
  python3 -m kernels.bench accept-length --k 3
  python3 -m kernels.bench accept-length --k 3
  echo "== the culprit's rows: MMA from m = 2 (twice)"
  KERNELS_DISPATCH_OVERRIDE=$bad python3 -m kernels.bench accept-length --k 3
  KERNELS_DISPATCH_OVERRIDE=$bad python3 -m kernels.bench accept-length --k 3
} > "$out/accept-length.txt" 2>&1
python3 -m kernels.probe batch-invariance > "$out/probe.txt" 2>&1
python3 -m kernels.bench gemm --json-out "$out/gemm.json" > "$out/gemm.txt" 2>&1
work=$(mktemp -d)
BISECT_DATA_DIR=$work/data BISECT_CACHE_DIR=$work/cache \
  python3 -m bisector demo run --dir "$work/demo" --format json > "$out/demo.json" 2> "$out/demo.err"
echo "demo exit $?" >> "$out/demo.err"
uptime > "$out/core-load.txt"
python3 benchmarks/bench_core.py --out "$out/core-16cpu.json" > "$out/core-16cpu.txt" 2>&1
uptime >> "$out/core-load.txt"
