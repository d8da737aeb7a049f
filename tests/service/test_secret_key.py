"""The server's secret key file: made once (0600), read the same after; a file that cannot serve stops `bisect serve`
at start-up in one line, before its store is opened."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from service_process import service_env, service_home
from synthetic import culprit_history

from bisector.service.secret_key import secret_key
from bisector.vocab.errors import InputError


def test_the_key_is_made_once_for_its_owner_alone_and_read_the_same_after(tmp_path: Path) -> None:
    path = tmp_path / "data" / "serve-form.key"
    first = secret_key(path)
    assert len(first) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret_key(path) == first
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no draft left behind


@pytest.mark.parametrize(
    ("text", "mode", "problem"),
    [
        ("not hex\n", 0o600, "holds no key: remove it"),
        ("abcd\n", 0o600, "holds no key: remove it"),
        ("ab" * 32 + "\n", 0o644, "may be read by others: chmod 600 it"),
    ],
)
def test_a_key_file_that_cannot_serve_stops_the_server_in_one_line(
    tmp_path: Path, text: str, mode: int, problem: str
) -> None:
    env = service_home(tmp_path)
    path = Path(env["BISECT_DATA_DIR"]) / "serve-form.key"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    path.chmod(mode)
    with pytest.raises(InputError, match=problem):
        secret_key(path)

    repo, db = culprit_history(tmp_path / "repo", 4, 2).path, tmp_path / "bisect.db"
    done = subprocess.run(
        [sys.executable, "-m", "bisector", "serve", "--port", "0", "--allow-repo", str(repo), "--db", str(db)],
        env=service_env(**env), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(f"bisect: error: the server's key file {path} ")
    assert problem in done.stderr
    assert done.stderr.count("\n") == 1
    assert not db.exists()  # refused before the store was opened
    assert path.read_text() == text  # never replaced


def test_a_draft_of_another_thread_of_this_process_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "data" / "serve-form.key"
    path.parent.mkdir()
    others = path.with_name(f".{path.name}.{os.getpid()}")  # named as a draft of this process would be
    others.write_text("another thread's draft\n")
    key = secret_key(path)
    assert others.read_text() == "another thread's draft\n"
    assert secret_key(path) == key


def test_without_hard_links_the_first_maker_wins_and_every_thread_reads_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_hard_links(source: object, target: object) -> None:  # as vfat answers os.link
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_hard_links)
    path = tmp_path / "data" / "serve-form.key"
    start = threading.Barrier(8)
    keys: list[bytes] = []

    def start_a_server() -> None:
        start.wait()
        keys.append(secret_key(path))

    threads = [threading.Thread(target=start_a_server) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(keys) == 8
    assert len(set(keys)) == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]


def test_what_a_maker_killed_mid_write_left_is_removed_once_it_is_old(tmp_path: Path) -> None:
    path = tmp_path / "data" / "serve-form.key"
    path.parent.mkdir()
    path.touch(mode=0o600)  # created exclusively (no hard links), killed before it wrote the key
    draft = path.parent / f".{path.name}.k1ll3d"
    draft.write_text("ab" * 32 + "\n")
    young = path.parent / f".{path.name}.wr1t1ng"  # a live maker's draft
    young.write_text("")
    old = time.time() - 3600
    for left in (path, draft):
        os.utime(left, (old, old))

    key = secret_key(path)

    assert len(key) == 32
    assert path.read_text().strip() == key.hex()
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, young.name])
