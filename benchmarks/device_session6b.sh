#!/usr/bin/env bash
# #14's core benchmark and #16's dashboard queries again on the GPU machine, with the bytecode compiled first: it
# runs the project from source and without a bytecode cache each process compiled ~1.2 s of Python (cProfile:
# benchmarks/device_startup.sh), which no installed copy does.
#   bash benchmarks/device_session6b.sh    (with .devbundle sent along; results under $OUT)
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
bash .devbundle/install.sh > "$out/install.log" 2>&1 || { echo "bundle install failed" >&2; tail "$out/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
env | grep -E '^PYTHON' > "$out/python-env.txt"
python3 -m compileall -q -j 0 /tmp/site bisector workers vocab db kernels benchmarks > /dev/null 2>&1
timeout 300 python3 benchmarks/bench_core.py --commits 1000 --sleep 1 --workers 1,8 --culprits 3 --repeat 1 \
  --out "$out/bench_core.json" > "$out/bench_core.log" 2>&1
echo "bench_core exit $?" >> "$out/bench_core.log"
timeout 240 python3 benchmarks/bench_dashboard.py --runs 10 --out "$out/bench_dashboard.json" \
  > "$out/bench_dashboard.log" 2>&1
echo "bench_dashboard exit $?" >> "$out/bench_dashboard.log"
