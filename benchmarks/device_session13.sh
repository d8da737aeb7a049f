#!/usr/bin/env bash
# Thirteenth session, for docs/benchmarks.md (#14): start-up and the core benchmark in a virtualenv of the
# project's own, as a user installs it, rather than the GPU machine's system Python, whose site-packages run a
# numba-cuda .pth hook at every interpreter start (~45 ms) that no installed gpu-bisect has.
#
# On the GPU machine, from the repository root, with .devbundle/ sent along (see device_session8.sh):
#   bash benchmarks/device_session13.sh
# The virtualenv has no pip and no packages of its own: a .pth names the system's package directories, so the
# same packages import, but .pth files in those directories are not run (Python runs those of site directories
# only). Everything goes to $OUT (./device-out when unset).
export COMPILE_BYTECODE=1
source benchmarks/device_common.sh

own_venv
{
  echo "site directories of the system python3:"; python3 -c 'import site; print(site.getsitepackages())'
  echo ".pth files there:"; python3 -c 'import site, glob; [print(p) for d in site.getsitepackages() for p in glob.glob(d + "/*.pth")]'
  echo "venv sys.path:"; "$venv/bin/python" -c 'import sys; print(sys.path)'
} > "$out/pythons.txt" 2>&1

for py in python3 "$venv/bin/python"; do  # the interpreter alone, 20 times each
  name=$(basename "$(dirname "$(dirname "$py")")")
  for _ in $(seq 20); do
    s=$(date +%s%N); "$py" -c pass; echo $(( ($(date +%s%N) - s) / 1000 ))
  done > "$out/interpreter-$name.us"
done
"$venv/bin/python" -X importtime -c "import bisector.cli, bisector.config, bisector.app, workers.local, workers.local_forkserver, bisector.live, vocab.gitrepo" 2> "$out/importtime-venv.txt"

timeout 120 python3 benchmarks/bench_startup.py --runs 5 --out "$out/bench_startup-system.json" > "$out/bench_startup-system.log" 2>&1
timeout 120 "$venv/bin/python" benchmarks/bench_startup.py --runs 5 --out "$out/bench_startup-venv.json" > "$out/bench_startup-venv.log" 2>&1
timeout 300 "$venv/bin/python" benchmarks/bench_core.py --commits 1000 --sleep 1 --workers 1,8 --culprits 3 --repeat 1 \
  --out "$out/bench_core.json" > "$out/bench_core.log" 2>&1
echo "bench_core exit $?" >> "$out/bench_core.log"
cat "$out/versions.txt" "$out/pythons.txt"
tail -25 "$out/bench_startup-venv.log" "$out/bench_core.log"
