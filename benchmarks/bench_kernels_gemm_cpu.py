"""`python -m kernels.bench gemm` on CPU: the CPU twins timed, checked and reported like the Triton kernels."""

import json
import subprocess
import sys
from pathlib import Path

from bisector.kernels import gemm_bench

ROOT = Path(gemm_bench.__file__).resolve().parents[1]


def test_gemm_bench_on_cpu_checks_and_times_both_kernels_and_the_reference(tmp_path: Path):
    out = tmp_path / "gemm.json"
    done = subprocess.run(
        [sys.executable, "-m", "bisector.kernels.bench", "gemm", "--device", "cpu", "--m", "1,2",
         "--json-out", str(out)],
        capture_output=True, text=True, cwd=ROOT, check=True, timeout=600,
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert report["backend"] == "cpu"
    assert [(s["n"], s["k"]) for s in report["shapes"]] == gemm_bench.SHAPES
    for shape in report["shapes"]:
        for kernel in ("simt", "mma"):
            run = shape[kernel]
            assert run["error"] == ""
            assert set(run["us"]) == {"1", "2"}
            assert all(us > 0 for us in run["us"].values())
            check = run["check"]
            assert check["invariant_by_m"]
            assert check["invariant_by_position"]
            assert check["repeatable"]
            assert check["rel_err_fp32"] < 1e-5
        assert set(shape["linear_us"]) == {"1", "2"}
    table = done.stdout.splitlines()
    assert any(line.split()[:2] == ["896x7168", "1"] for line in table)
    assert report["copy_bandwidth_bytes_per_s"] is None
    assert all(shape["hbm_bound_us"] is None for shape in report["shapes"])
    # nothing meaningless on CPU: no bandwidth, no HBM column, one line saying why
    assert "inf" not in done.stdout.replace("info", "")
    assert "TB/s" not in done.stdout
    assert "hbm bound" not in done.stdout
    assert "no copy bandwidth or HBM bound: the CPU has no HBM to measure" in done.stdout
