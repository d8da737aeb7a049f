#!/usr/bin/env bash
# The multi-GPU run (docs/benchmarks.md, "Multi-GPU"): the demo history (1000 commits) bisected with the
# Ray executor at W = 1 and W = 2 GPU workers, with --gpus-per-step 2, and with `git bisect run` on the
# same history, on one host with 2+ GPUs. Run from the repository root on the GPU machine with .devbundle:
#   bash benchmarks/device_multi_gpu.sh            (results in $OUT, default ./device-out)
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
bash .devbundle/install.sh || { echo "bundle install failed" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
work=$(mktemp -d)
export BISECT_DATA_DIR=$work/data BISECT_CACHE_DIR=$work/cache
commits=${COMMITS:-1000}
{
  date -u; nproc; python3 --version; git --version
  python3 -c 'import ray, torch, triton; print("ray", ray.__version__, "torch", torch.__version__, "triton", triton.__version__)'
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
} > "$out/versions.txt" 2>&1

python3 -m bisector demo init "$work/repo" --commits "$commits" --seed 7 > "$out/demo-init.txt" 2>&1 || exit 1
good=$(git -C "$work/repo" rev-parse demo-good)
bad=$(git -C "$work/repo" rev-parse main)
run='echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; python3 -m kernels.bench accept-length --k 3'

bisect_run() {  # label, then extra `bisect start` options
  local label=$1; shift
  local t0; t0=$(date +%s.%N)
  python3 -m bisector start --repo "$work/repo" --good "$good" --bad "$bad" --run "$run" \
    --metric 'accept length: ([0-9.]+)' --expect '>= 4.0' --no-explain --executor ray --format json \
    --db "sqlite:///$work/$label.db" "$@" > "$out/$label.json" 2> "$work/$label.stderr"
  echo "$label exit=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" >> "$out/times.txt"
  grep -h "CUDA_VISIBLE_DEVICES=\|\"device\"" "$BISECT_DATA_DIR"/logs/*/step-*.log 2>/dev/null | sort | uniq -c \
    > "$out/$label.devices.txt"
  rm -rf "$BISECT_DATA_DIR/logs"
}

gitbisect_run() {
  git clone -q "$work/repo" "$work/repo-git"
  cat > "$work/judge.sh" <<'EOS'
#!/usr/bin/env bash
out=$(python3 -m kernels.bench accept-length --k 3) || exit 125
echo "$out"
python3 -c "import re, sys; v = float(re.search(r'accept length: ([0-9.]+)', sys.argv[1]).group(1)); sys.exit(0 if v >= 4.0 else 1)" "$out"
EOS
  local t0; t0=$(date +%s.%N)
  (cd "$work/repo-git" && git bisect start "$bad" "$good" >/dev/null && CUDA_VISIBLE_DEVICES=1 git bisect run bash "$work/judge.sh" > "$work/git-bisect.log" 2>&1)
  echo "git-bisect-run exit=$? wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))") steps=$(grep -c '^running' "$work/git-bisect.log") culprit=$(grep -o '^[0-9a-f]\{40\} is the first bad commit' "$work/git-bisect.log")" >> "$out/times.txt"
}

# W=1 on GPU 0 while `git bisect run` runs on GPU 1; then W=2 on both; then one step on 2 GPUs.
CUDA_VISIBLE_DEVICES=0 bisect_run ray-w1 --workers 1 &
gitbisect_run
wait
bisect_run ray-w2 --workers 2
bisect_run ray-w1-2gpus --workers 1 --gpus-per-step 2
echo "planted culprit: $(git -C "$work/repo" log --format=%H -G '\(1536, 128\)' "$good..$bad" -- kernels/tiny_gemm.py)" >> "$out/times.txt"
cat "$out/times.txt"
