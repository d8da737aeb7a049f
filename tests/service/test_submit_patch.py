"""`bisect submit --patch FILE` to a real `bisect serve --allow-commands`: the request carries the file's text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from service_process import running_service, service_env, service_home
from synthetic import culprit_history

from bisector.core.spec import BisectSpec
from bisector.db.store import Store

pytestmark = pytest.mark.xdist_group("service")


def test_submit_sends_a_patch_files_text_and_names_a_file_it_cannot_read(tmp_path: Path) -> None:
    history = culprit_history(tmp_path / "repo", 8, 5, sleep_s=0.05)
    patch = tmp_path / "note.diff"
    patch.write_text("--- /dev/null\n+++ b/note.txt\n@@ -0,0 +1 @@\n+applied\n")
    home, db = tmp_path / "home", f"sqlite:///{tmp_path / 'bisect.db'}"
    args = ["--db", db, "--allow-repo", str(history.path), "--allow-commands"]
    with running_service(*args, **service_home(home)) as service:

        def submit(patch_file: Path) -> subprocess.CompletedProcess[str]:
            command = ["submit", "--server", service.base, "--repo", str(history.path), "--good", history.shas[0],
                       "--bad", "main", "--run", "test -e note.txt && bash test.sh", "--no-explain",
                       "--patch", str(patch_file), "--format", "json"]  # fmt: skip
            return subprocess.run([sys.executable, "-m", "bisector", *command], env=service_env(**service_home(home)),
                                  capture_output=True, text=True, timeout=300, check=False)  # fmt: skip

        submitted = submit(patch)
        assert submitted.returncode == 0, submitted.stderr
        bisect_id = json.loads(submitted.stdout)["id"]
        report = service.wait_done(bisect_id)
        assert report["first_bad"]["sha"] == history.shas[5]  # every step saw the patch's file
        missing = submit(tmp_path / "missing.diff")
    assert (missing.returncode, missing.stderr) == (
        2, f"bisect: error: --patch {tmp_path / 'missing.diff'}: cannot read it (No such file or directory)\n"
    )  # fmt: skip
    with Store.open(db) as store:
        [stored] = BisectSpec.from_json(store.get_bisect(bisect_id).spec).test.patches
    assert stored.content == patch.read_text()
