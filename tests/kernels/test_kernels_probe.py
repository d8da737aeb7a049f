"""The batch-invariance probe CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

from bisector.kernels import probe, tiny_gemm

ROOT = Path(probe.__file__).resolve().parents[1]


def _probe(*args, override=""):
    env = {**os.environ, tiny_gemm.OVERRIDE_ENV: override}
    done = subprocess.run(
        [sys.executable, "-m", "bisector.kernels.probe", "batch-invariance", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
        timeout=300,
    )
    *lines, last = done.stdout.strip().splitlines()
    return lines, json.loads(last)


def test_probe_reports_where_each_shape_turns_variant():
    override = json.dumps({"144x1024": 2, "896x1024": 5})
    lines, report = _probe("--shape", "144x1024", "--shape", "896x1024", "--shape", "1536x128", override=override)
    by_shape = {(s["n"], s["k"]): s for s in report["shapes"]}
    assert by_shape[(144, 1024)]["variant_from_m"] == 2
    assert by_shape[(144, 1024)]["reason"] == "override"
    assert by_shape[(896, 1024)]["variant_from_m"] == 5
    assert by_shape[(1536, 128)]["variant_from_m"] is None
    assert by_shape[(1536, 128)]["mma_min_m"] == "simt"
    text = "\n".join(lines)
    assert "BATCH-VARIANT from m=2" in text
    assert "BATCH-VARIANT from m=5" in text
    assert "batch-invariant" in text


def test_probe_covers_every_tabled_shape_by_default():
    _, report = _probe("--m-max", "3")
    probed = {(s["n"], s["k"]) for s in report["shapes"]}
    assert probed == set(tiny_gemm.tuned_table())
    for shape in report["shapes"]:
        threshold = shape["mma_min_m"]
        # MMA from 1 is one kernel at every m: invariant, like SIMT_ONLY
        expected = threshold if isinstance(threshold, int) and 2 <= threshold <= 3 else None
        assert shape["variant_from_m"] == expected
