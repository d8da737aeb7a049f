"""The probe of an image's python (workers/ray_image_host.py), where gpu-bisect is installed: the one import root
`bisector`, without the repository's own folders (workers/, vocab/) on the path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bisect_helpers import ROOT

pytest.importorskip("ray")

from bisector.workers.ray_image_host import probe_python  # needs Ray


def test_an_image_python_that_imports_gpu_bisect_as_installed_passes_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    installed = tmp_path / "site-packages"
    installed.mkdir()
    (installed / "bisector").symlink_to(ROOT / "bisector")  # its links reach workers/, vocab/ as bisector.workers...
    monkeypatch.chdir(tmp_path)  # python -c puts the working directory first on its path
    monkeypatch.setenv("PYTHONPATH", str(installed))
    assert probe_python(sys.executable) == ""
