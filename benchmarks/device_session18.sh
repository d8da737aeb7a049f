#!/usr/bin/env bash
# Eighteenth session, for docs/benchmarks.md (#14): what a step's cgroup move costs once a launcher joins the cgroup
# ahead of the step (workers/step_launcher.py), and start-up and the core benchmark on the quiet GPU host, in a
# virtualenv of the project's own (see device_session13.sh). The W=1 core run of the tree before the launcher
# (BASE, a `git archive` of it unpacked in base/ by the caller) runs in the same call, for the same machine, where
# base/ was sent along.
#
# On the GPU machine, from the repository root, with .devbundle/ and base/ sent along:
#   bash benchmarks/device_session18.sh
export COMPILE_BYTECODE=1
source benchmarks/device_common.sh

own_venv
py="$venv/bin/python"
[ -d base ] && "$py" -m compileall -q -j 0 base > /dev/null 2>&1
cat /proc/loadavg > "$out/loadavg-start.txt"

timeout 150 "$py" benchmarks/bench_run_shell.py --runs 12 --command "sleep 1" --out "$out/bench_run_shell.json" \
  > "$out/bench_run_shell.log" 2>&1
timeout 120 "$py" benchmarks/bench_startup.py --runs 5 --out "$out/bench_startup.json" > "$out/bench_startup.log" 2>&1
timeout 300 "$py" benchmarks/bench_core.py --commits 1000 --sleep 1 --workers 1,8 --culprits 3 --repeat 1 \
  --out "$out/bench_core.json" > "$out/bench_core.log" 2>&1
echo "bench_core exit $?" >> "$out/bench_core.log"
abs_out=$(cd "$out" && pwd)
if [ -d base ]; then
  (cd base && PYTHONPATH=/tmp/site:$PWD timeout 200 "$py" benchmarks/bench_core.py --commits 1000 --sleep 1 --workers 1 \
    --culprits 3 --repeat 1 --no-git --out "$abs_out/bench_core-base.json" > "$abs_out/bench_core-base.log" 2>&1)
  echo "bench_core base exit $?" >> "$out/bench_core-base.log"
fi
cat /proc/loadavg > "$out/loadavg-end.txt"
cat "$out/versions.txt"
tail -7 "$out/bench_run_shell.log"
tail -22 "$out/bench_startup.log"
grep -v "━\|─" "$out/bench_core.log" | tail -30
[ -d base ] && grep -v "━\|─" "$out/bench_core-base.log" | tail -12
