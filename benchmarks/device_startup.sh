#!/usr/bin/env bash
# Where a bisect's start-up goes on the GPU machine: nvidia-smi, imports (-X importtime) and a cProfile of one
# `bisect start` over a 1000-commit synthetic history with a near-instant test; then the dashboard benchmark.
#   bash benchmarks/device_startup.sh    (with .devbundle sent along; results under $OUT)
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
bash .devbundle/install.sh > "$out/install.log" 2>&1 || { echo "bundle install failed" >&2; tail "$out/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
work=$(mktemp -d)
export BISECT_DATA_DIR=$work/data BISECT_CACHE_DIR=$work/cache
{ time nvidia-smi -L; } > "$out/nvidia-smi.txt" 2>&1
good=$(python3 -c "
from pathlib import Path
from bisector.synthetic import culprit_history
print(culprit_history(Path('$work/repo'), 1000, 500).shas[0])")
start() { python3 "$@" -m bisector start --repo "$work/repo" --good "$good" --bad main --run 'bash test.sh' \
  --no-explain --db "sqlite:///$work/s$RANDOM.db" --format json; }
TIMEFORMAT="total %R s"
for i in 1 2 3; do
  { time start > /dev/null 2>&1; } 2>> "$out/start-times.txt"
done
start -X importtime > /dev/null 2> "$out/importtime.txt"
start -m cProfile -o "$out/start.prof" > /dev/null 2>&1
python3 -c "
import pstats; pstats.Stats('$out/start.prof').sort_stats('cumulative').print_stats(60)" > "$out/start-profile.txt"
timeout 300 python3 benchmarks/bench_dashboard.py --runs 10 --out "$out/bench_dashboard.json" \
  > "$out/bench_dashboard.log" 2>&1
echo "bench_dashboard exit $?" >> "$out/bench_dashboard.log"
