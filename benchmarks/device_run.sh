#!/usr/bin/env bash
# The runs of docs/benchmarks.md that need the lent GPU machine. From the repository root, with .devbundle/ sent along
# (made where a package registry is reachable: `bash ../shared/device/make-bundle.sh uv psycopg psycopg-binary fastapi
# starlette pydantic pydantic-core uvicorn jinja2 markupsafe anyio sniffio h11 httpx httpcore certifi idna
# opentelemetry-api importlib-metadata zipp typing-extensions typing-inspection annotated-types annotated-doc
# python-multipart`; the dashboard and the service need fastapi), one subcommand per device call (each stays under
# 10 minutes):
#   bash benchmarks/device_run.sh demo       the demo twice on one directory (the second builds nothing), then on Ray
#   bash benchmarks/device_run.sh ray2       the demo twice on Ray at --workers 2 (a host of 2+ GPUs), GPUs sampled
#   bash benchmarks/device_run.sh core       bench_core: n = 1000, 1 s test, W=1 and W=8 against `git bisect run`
#   bash benchmarks/device_run.sh startup    bench_run_shell, bench_startup and bench_core; with base/ (a `git archive`
#                                            of another tree) sent along, that tree's W=1 core run on the same machine
#   bash benchmarks/device_run.sh service    bench_service: 20 jobs over 8 slots
#   bash benchmarks/device_run.sh dashboard  bench_dashboard on SQLite
#   bash benchmarks/device_run.sh kernels    tiny GEMM against cuBLAS (also with KERNELS_PDL=0), accept length good and
#                                            bad, the invariance probe
#   bash benchmarks/device_run.sh profile    where `bisect start`'s start-up goes: -X importtime and a cProfile
# Everything goes to $OUT (./device-out when unset), versions.txt first. That machine runs Python with
# PYTHONDONTWRITEBYTECODE=1, so the bytecode is compiled first, as an installed copy has it. The benchmarks run in a
# virtualenv of their own whose one .pth names the system's package directories: the same packages import, but the
# .pth hooks there (numba-cuda's, ~45 ms a process) do not run, as in a user's install.
set -uo pipefail
command=${1:-}
case "$command" in
  demo | ray2 | core | startup | service | dashboard | kernels | profile) ;;
  *) echo "usage: bash benchmarks/device_run.sh demo|ray2|core|startup|service|dashboard|kernels|profile" >&2; exit 2 ;;
esac
out=${OUT:-device-out}
mkdir -p "$out"
bash .devbundle/install.sh > "$out/install.log" 2>&1 || { echo "bundle install failed" >&2; tail "$out/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PATH=$PATH:/tmp/site/bin
python3 -m compileall -q -j 0 /tmp/site bisector workers vocab db kernels benchmarks > /dev/null 2>&1
[ -d base ] && python3 -m compileall -q -j 0 base > /dev/null 2>&1
work=$(mktemp -d)
export BISECT_DATA_DIR=$work/data BISECT_CACHE_DIR=$work/cache
{
  python3 --version
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.device_count())'
  python3 -c 'import triton; print("triton", triton.__version__)'
  python3 -c 'import ray; print("ray", ray.__version__)'
  python3 -c 'from bisector.workers.images.builder import uv_binary; print("uv", uv_binary())'
  git --version
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nproc
  cat /proc/loadavg
  date -u +%FT%TZ
} > "$out/versions.txt" 2>&1

venv=/tmp/own-venv
python3 -m venv --without-pip "$venv"
site_dir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() + sys.path if p.endswith("-packages")))' \
  | sort -u > "$site_dir/system-packages.pth"
py="$venv/bin/python"

demo() {  # name, extra `bisect demo run` args: one run on one shared directory, timed
  local name=$1; shift
  local started; started=$(date +%s%N)
  python3 -m bisector demo run --dir "$work/demo" --format json "$@" > "$out/demo-$name.json" 2> "$out/demo-$name.stderr"
  echo "exit $? wall_ms $(( ($(date +%s%N) - started) / 1000000 ))" > "$out/demo-$name.time"
}

bench() {  # name, timeout in seconds, then the benchmark and its args: its log and exit code in $out/NAME.log
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$py" "$@" > "$out/$name.log" 2>&1
  echo "$name exit $?" >> "$out/$name.log"
}

core_args=(--commits 1000 --sleep 1 --workers 1,8 --culprits 3 --repeat 1)
case "$command" in
  demo)
    demo first
    demo second
    demo ray --executor ray
    ;;
  ray2)
    unset BISECT_GPUS  # the executor finds the GPUs (nvidia-smi) and declares them to its local Ray cluster
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -l 1 > "$out/nvidia-smi.csv" 2>&1 &
    sampler=$!
    demo ray2-first --executor ray --workers 2
    demo ray2-second --executor ray --workers 2
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    python3 -m bisector images ls --format json > "$out/images.json" 2> "$out/images.stderr"
    ;;
  core)
    bench bench_core 560 benchmarks/bench_core.py "${core_args[@]}" --out "$out/bench_core.json"
    ;;
  startup)
    bench bench_run_shell 150 benchmarks/bench_run_shell.py --runs 12 --command "sleep 1" --out "$out/bench_run_shell.json"
    bench bench_startup 120 benchmarks/bench_startup.py --runs 5 --out "$out/bench_startup.json"
    bench bench_core 300 benchmarks/bench_core.py "${core_args[@]}" --out "$out/bench_core.json"
    if [ -d base ]; then
      abs_out=$(cd "$out" && pwd)
      (cd base && PYTHONPATH=/tmp/site:$PWD timeout 200 "$py" benchmarks/bench_core.py --commits 1000 --sleep 1 --workers 1 \
        --culprits 3 --repeat 1 --no-git --out "$abs_out/bench_core-base.json" > "$abs_out/bench_core-base.log" 2>&1)
      echo "bench_core-base exit $?" >> "$out/bench_core-base.log"
    fi
    ;;
  service)
    bench bench_service 560 benchmarks/bench_service.py --out "$out/bench_service.json"
    ;;
  dashboard)
    bench bench_dashboard 300 benchmarks/bench_dashboard.py --runs 15 --out "$out/bench_dashboard.json"
    ;;
  kernels)
    bad='{"144x7168": 2, "896x7168": 2, "1536x128": 2}'  # the culprit's rows: MMA from m = 2
    {
      echo "== shipped table (twice)"
      python3 -m bisector.kernels.bench accept-length --k 3
      python3 -m bisector.kernels.bench accept-length --k 3
      echo "== the culprit's rows (twice)"
      KERNELS_DISPATCH_OVERRIDE=$bad python3 -m bisector.kernels.bench accept-length --k 3
      KERNELS_DISPATCH_OVERRIDE=$bad python3 -m bisector.kernels.bench accept-length --k 3
    } > "$out/accept-length.txt" 2>&1
    python3 -m bisector.kernels.probe batch-invariance > "$out/probe.txt" 2>&1
    python3 -m bisector.kernels.bench gemm --json-out "$out/gemm.json" > "$out/gemm.txt" 2>&1
    KERNELS_PDL=0 python3 -m bisector.kernels.bench gemm --json-out "$out/gemm-no-pdl.json" > "$out/gemm-no-pdl.txt" 2>&1
    ;;
  profile)
    good=$(PYTHONPATH="$PWD/benchmarks:$PYTHONPATH" "$py" -c "
from pathlib import Path
from synthetic import culprit_history
print(culprit_history(Path('$work/repo'), 1000, 500).shas[0])")
    start() { "$py" "$@" -m bisector start --repo "$work/repo" --good "$good" --bad main --run 'bash test.sh' \
      --no-explain --db "sqlite:///$work/s$RANDOM.db" --format json > /dev/null; }
    start -X importtime 2> "$out/importtime.txt"
    start -m cProfile -o "$out/start.prof" 2> /dev/null
    "$py" -c "import pstats; pstats.Stats('$out/start.prof').sort_stats('cumulative').print_stats(60)" \
      > "$out/start-profile.txt"
    ;;
esac
cat "$out/versions.txt"
tail -n 30 "$out"/*.log "$out"/*.time "$out"/*.txt 2>/dev/null | grep -v "━\|─" | tail -n 60
