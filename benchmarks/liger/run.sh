#!/usr/bin/env bash
# A real GPU bisect: linkedin/Liger-Kernel's cross-entropy true-class gradient regression (#1268, found by #1329),
# `git bisect run` and `bisect start --image venv` side by side on the same test (docs/benchmarks.md).
# First, where a clone or mirror of Liger-Kernel is: MIRROR=/path/to/Liger-Kernel/.git bash make-repo.sh (writes
# liger.bundle and map.txt here, both git-ignored). Then on the GPU machine, from gpu-bisect's root:
#   bash benchmarks/liger/run.sh        (device: carry .devbundle and benchmarks/liger/liger.bundle)
# What it writes under $OUT (6 files): summary.txt, precheck.log, gitbisect.log, gpubisect.log, report.txt, report.json.
# CPU dry run (no GPU: Triton's interpreter, a metric instead of pass/fail):  DRY_CPU=1 bash run.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/tb-out}; mkdir -p "$OUT"
R=${R:-/tmp/r}; TB=${TB:-/tmp/tb}
# Rewritten SHAs (map.txt: upstream -> here). Upstream: good 37c91c0e (#1275), bad 91ae44ae (#1304), culprit e44a5fe8 (#1268).
GOOD=4e8e3fbe5134912dd2e2c09a49d32946ad26ef98
BAD=0dfd57d4f3798c9ca63079bfe693f5b60ce7faad
EXPECTED=ca2f32b5cdf3c4e4a60fa6e5d74fbbf3ac420857
BISECTOR=${BISECTOR:-python3 -m bisector}   # gpu-bisect through PYTHONPATH on the device

rm -rf "$R" "$TB" && mkdir -p "$TB"
git clone -q "$here/liger.bundle" "$R" || exit 1
git -C "$R" config user.email tb@example.org; git -C "$R" config user.name tb
cp "$here/test_ce_true_class_grad.py" "$here/conftest.py" "$here/pytest.ini" "$TB/"
# The test: Liger's own regression test from #1329, one case (bf16, label_smoothing 0, reduction sum), run against the
# commit's tree: src/ on PYTHONPATH (after whatever is there: gpu-bisect's trace hook must stay first) for git bisect;
# under gpu-bisect's image the editable install gives the same, and src/ on the path changes nothing.
TEST="python3 -m pytest -p no:cacheprovider -q -s $TB/test_ce_true_class_grad.py -k sum-0.0-dtype0"
RUN="PYTHONPATH=\"\${PYTHONPATH:+\$PYTHONPATH:}\$PWD/src\" $TEST"
# The image's build: an editable install into the image venv, offline. The venv (uv venv, seeded with a .pth naming
# the base's site-packages) sees the base's torch, triton, pytest and setuptools, so --no-build-isolation needs nothing.
# Without setuptools in the base (it is a dependency of torch on Python 3.12, so expected) that cannot work: then the
# build only byte-compiles src/ (needs nothing) and the run finds the package through src/ on PYTHONPATH.
if python3 -c "import setuptools" 2>/dev/null; then
  BUILD="uv pip install --offline --quiet --no-deps --no-build-isolation -e ."
else
  BUILD="python3 -m compileall -q src"
fi
EXTRA=()
[ "${TRACE_KERNELS:-1}" = 1 ] && EXTRA+=(--trace-kernels)   # the explainer's traced re-runs of both sides
if [ "${DRY_CPU:-}" = 1 ]; then   # no GPU: interpreter, and the liger error as a metric (the test passes on the CPU)
  export TRITON_INTERPRET=1
  EXTRA+=(--metric 'true-class grad error: liger ([0-9.e+-]+)' --expect '< 1e-3')
  GITBISECT_TEST="out=\$($RUN 2>&1); echo \"\$out\" | tail -3; v=\$(echo \"\$out\" | sed -n 's/.*error: liger \\([0-9.e+-]*\\).*/\\1/p' | head -1); [ -n \"\$v\" ] || exit 125; python3 -c \"import sys; sys.exit(0 if \$v < 1e-3 else 1)\""
else
  GITBISECT_TEST="$RUN"
fi

{
echo "host: $(hostname)  $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"
echo "good $GOOD  bad $BAD  expected $EXPECTED"
} | tee "$OUT/summary.txt"

echo "build: $BUILD" | tee -a "$OUT/summary.txt"
echo "run:   $RUN" | tee -a "$OUT/summary.txt"

# 0. Premise (PRECHECK=0 skips it): the test passes at GOOD and fails at BAD on this machine; if not, stop here.
if [ "${PRECHECK:-1}" = 1 ]; then
  export TRITON_CACHE_DIR=/tmp/tb-triton-precheck
  for end in GOOD BAD; do
    sha=${!end}; git -C "$R" checkout -q "$sha"
    s0=$(date +%s.%N); ( cd "$R" && bash -c "$GITBISECT_TEST" ) > /tmp/tb-precheck-$end.log 2>&1; rc=$?; { echo "=== $end $sha exit $rc"; cat /tmp/tb-precheck-$end.log; } >> "$OUT/precheck.log"; s1=$(date +%s.%N)
    printf 'precheck %s %s: exit %s in %.1fs  %s\n' "$end" "${sha:0:12}" "$rc" "$(awk "BEGIN{print $s1 - $s0}")" \
      "$(grep -h -o 'true-class grad error: .*' /tmp/tb-precheck-$end.log | head -1)" | tee -a "$OUT/summary.txt"
    eval "pre_$end=$rc"
  done
  git -C "$R" checkout -q "$BAD"; unset TRITON_CACHE_DIR
  if [ "$pre_GOOD" != 0 ] || [ "$pre_BAD" = 0 ] || [ "$pre_BAD" = 125 ]; then
    echo "premise fails on this machine (good must exit 0, bad 1..127 but 125): no bisect run" | tee -a "$OUT/summary.txt"
    tail -n 40 "$OUT/precheck.log"; exit 3
  fi
fi

# 1. git bisect run (git tests no endpoint: it trusts them); GIT_BISECT=0 skips it
if [ "${GIT_BISECT:-1}" = 1 ]; then
export TRITON_CACHE_DIR=/tmp/tb-triton-gitbisect; rm -rf "$TRITON_CACHE_DIR"
t0=$(date +%s.%N)
( cd "$R" && git bisect start "$BAD" "$GOOD" && git bisect run bash -c "$GITBISECT_TEST" ) > "$OUT/gitbisect.log" 2>&1
t1=$(date +%s.%N)
git_culprit=$(git -C "$R" rev-parse refs/bisect/bad 2>/dev/null)
git_runs=$(grep -c '^running ' "$OUT/gitbisect.log")
git -C "$R" bisect log >> "$OUT/gitbisect.log" 2>&1; git -C "$R" bisect reset >/dev/null 2>&1; unset TRITON_CACHE_DIR
printf 'git bisect run: culprit %s  wall %.1fs  runs %s  %s\n' "$git_culprit" "$(awk "BEGIN{print $t1 - $t0}")" "$git_runs" \
  "$([ "$git_culprit" = "$EXPECTED" ] && echo RIGHT || echo WRONG)" | tee -a "$OUT/summary.txt"
fi

# 2. gpu-bisect with images and builds ahead
export BISECT_DB=/tmp/tb-bisect-$$.db   # not under $OUT: at most 8 files come back
# a fresh cache (images, worktrees) and data dir each time, so a warm machine or a second call measures the same
export BISECT_CACHE_DIR=$(mktemp -d /tmp/tb-bisect-cache.XXXX) BISECT_DATA_DIR=$(mktemp -d /tmp/tb-bisect-data.XXXX)
t0=$(date +%s.%N)
$BISECTOR start --repo "$R" --good "$GOOD" --bad "$BAD" --run "$RUN" --image venv --build "$BUILD" \
  --workers 1 --build-ahead 2 --timeout 300 --format text \
  --link https://github.com/linkedin/Liger-Kernel/pull/1329 "${EXTRA[@]}" > "$OUT/gpubisect.log" 2>&1
rc=$?
t1=$(date +%s.%N)
id=$($BISECTOR list --format json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d[0]['id'] if isinstance(d,list) and d else 1)" 2>/dev/null || echo 1)
$BISECTOR report "${id:-1}" --format text > "$OUT/report.txt" 2>&1
$BISECTOR report "${id:-1}" --format json > "$OUT/report.json" 2>&1
gb_culprit=$(python3 - "$OUT/report.json" <<'P'
import json, sys, re
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print(""); sys.exit()
s = json.dumps(d)
m = re.search(r'"(?:culprit|first_bad)[a-z_]*"\s*:\s*(?:\{[^{}]*?"sha"\s*:\s*)?"([0-9a-f]{40})"', s)
print(m.group(1) if m else "")
P
)
printf 'gpu-bisect: exit %s  culprit %s  wall %.1fs  %s\n' "$rc" "$gb_culprit" "$(awk "BEGIN{print $t1 - $t0}")" \
  "$([ "$gb_culprit" = "$EXPECTED" ] && echo RIGHT || echo WRONG/unparsed: read report.txt)" | tee -a "$OUT/summary.txt"
grep -i -E 'steps?|runs?|builds?|images?|gpu-seconds|wall' "$OUT/report.txt" | head -20 | tee -a "$OUT/summary.txt"
echo "--- report $id" ; cat "$OUT/report.txt"
