#!/usr/bin/env bash
# Eighth session, for docs/benchmarks.md: the demo with worker images through Ray on two H200s of one host
# (kind nvidia-h200-x2; #15), and the service benchmark (#17) and core benchmark (#14) on that quiet host.
#
# Where a package registry is reachable, first (the service needs fastapi, which needs opentelemetry-api):
#   bash ../shared/device/make-bundle.sh uv psycopg psycopg-binary fastapi starlette pydantic pydantic-core \
#     uvicorn jinja2 markupsafe anyio sniffio h11 httpx httpcore certifi idna opentelemetry-api \
#     importlib-metadata zipp typing-extensions typing-inspection annotated-types annotated-doc python-multipart
# Then on the GPU machine, from the repository root, with .devbundle/ sent along (each call under 10 minutes):
#   bash benchmarks/device_session8.sh ray2      # the demo twice on one directory, Ray, --workers 2
#   bash benchmarks/device_session8.sh service   # bench_service: 20 jobs over 8 slots
#   bash benchmarks/device_session8.sh core      # bench_core W=1 and W=8 against git bisect run
# The machine runs the project from source with PYTHONDONTWRITEBYTECODE=1, so the bytecode is compiled
# first (an installed copy has it). Everything goes to $OUT (./device-out when unset).
export COMPILE_BYTECODE=1
source benchmarks/device_common.sh

case "${1:-ray2}" in
  ray2)
    unset BISECT_GPUS  # the executor finds both GPUs (nvidia-smi) and declares them to its local Ray cluster
    nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv -l 1 > "$out/nvidia-smi.csv" 2>&1 &
    sampler=$!
    demo ray2-first --executor ray --workers 2
    demo ray2-second --executor ray --workers 2
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    [ -d "$BISECT_DATA_DIR/logs" ] && cp -r "$BISECT_DATA_DIR/logs" "$out/logs"
    python3 -m bisector images ls --format json > "$out/images.json" 2> "$out/images.stderr"
    ;;
  service)
    timeout 560 python3 benchmarks/bench_service.py --json "$out/bench_service.json" > "$out/bench_service.log" 2>&1
    echo "bench_service exit $?" >> "$out/bench_service.log"
    ;;
  core)
    timeout 560 python3 benchmarks/bench_core.py --commits 1000 --sleep 1 --workers 1,8 --culprits 3 --repeat 1 \
      --out "$out/bench_core.json" > "$out/bench_core.log" 2>&1
    echo "bench_core exit $?" >> "$out/bench_core.log"
    ;;
esac
cat "$out"/*.time "$out/versions.txt" 2>/dev/null
tail -3 "$out"/*.log "$out"/*.stderr 2>/dev/null | tail -40
