#!/usr/bin/env bash
# Sixth session on one H200, for docs/benchmarks.md: the demo with its build step on worker images (twice on
# one directory: the second must build nothing), the same through Ray, #14's core benchmark against
# `git bisect run` on a quiet 16-core host, and the dashboard queries on SQLite there.
#
# Where a package registry is reachable, first (the dashboard needs fastapi and its opentelemetry too):
#   bash ../shared/device/make-bundle.sh uv psycopg psycopg-binary fastapi starlette pydantic pydantic-core \
#     uvicorn jinja2 markupsafe anyio sniffio h11 httpx httpcore certifi idna opentelemetry-api
# Then on the GPU machine, from the repository root, with .devbundle/ sent along:
#   bash benchmarks/device_session6.sh demo     # then, in a second call (each must stay under 10 minutes):
#   bash benchmarks/device_session6.sh bench            # or: bench-bytecode
# bench-bytecode compiles the bytecode first: that machine runs the project from source with
# PYTHONDONTWRITEBYTECODE=1, so without it each process compiles ~1.2 s of Python (benchmarks/device_startup.sh),
# which no installed copy does.
# Everything goes to $OUT (./device-out when unset): versions.txt, demo-*.json/.stderr/.time, bench_core.*,
# bench_dashboard.*.
[ "${1:-demo}" = bench-bytecode ] && export COMPILE_BYTECODE=1
source benchmarks/device_common.sh
if [ "${1:-demo}" = demo ]; then
  demo first
  demo second
  demo ray --executor ray
  exit 0
fi

env | grep -E '^PYTHON' > "$out/python-env.txt"
timeout 330 python3 benchmarks/bench_core.py --commits 1000 --sleep 1 --workers 1,8 --culprits 3 --repeat 1 \
  --out "$out/bench_core.json" > "$out/bench_core.log" 2>&1
echo "bench_core exit $?" >> "$out/bench_core.log"
timeout 240 python3 benchmarks/bench_dashboard.py --runs 10 --out "$out/bench_dashboard.json" \
  > "$out/bench_dashboard.log" 2>&1
echo "bench_dashboard exit $?" >> "$out/bench_dashboard.log"
