# Sourced by the device_session*.sh scripts on the GPU machine, from the repository root with .devbundle/ sent
# along: installs the bundle, points Python at it and the checkout, makes fresh data and cache dirs, writes
# versions.txt, and defines demo NAME [ARGS...] (one `bisect demo run` on one shared directory, timed).
# Set COMPILE_BYTECODE=1 to compile the bytecode first: that machine runs the project from source with
# PYTHONDONTWRITEBYTECODE=1, so without it each process compiles ~1.2 s of Python, which no installed copy does.
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
bash .devbundle/install.sh > "$out/install.log" 2>&1 || { echo "bundle install failed" >&2; tail "$out/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PATH=$PATH:/tmp/site/bin
if [ "${COMPILE_BYTECODE:-0}" = 1 ]; then
  python3 -m compileall -q -j 0 /tmp/site bisector workers vocab db kernels benchmarks > /dev/null 2>&1
fi
work=$(mktemp -d)
export BISECT_DATA_DIR=$work/data BISECT_CACHE_DIR=$work/cache
{
  python3 --version
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.device_count())'
  python3 -c 'import ray; print("ray", ray.__version__)'
  python3 -c 'from bisector.workers.images.builder import uv_binary; print("uv", uv_binary())'
  git --version
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nproc
  date -u +%FT%TZ
} > "$out/versions.txt" 2>&1

demo() {  # name, extra args
  local name=$1; shift
  local started code
  started=$(date +%s%N)
  python3 -m bisector demo run --dir "$work/demo" --format json "$@" > "$out/demo-$name.json" 2> "$out/demo-$name.stderr"
  code=$?
  echo "exit $code wall_ms $(( ($(date +%s%N) - started) / 1000000 ))" > "$out/demo-$name.time"
}

own_venv() {  # a virtualenv at $venv (/tmp/own-venv) with no packages of its own: a .pth names the system's package
  # directories, so the same packages import but the .pth files there (a numba-cuda hook) do not run
  venv=/tmp/own-venv
  python3 -m venv --without-pip "$venv"
  local site_dir
  site_dir=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -c 'import site, sys; print("\n".join(p for p in site.getsitepackages() + sys.path if p.endswith("-packages")))' \
    | sort -u > "$site_dir/system-packages.pth"
}
