"""The venv templates that images' venvs are copied from (workers/images/builder.py's make_venv), and their removal by
the image cache's LRU pass (workers/images/cache.py): real venvs made by uv, real processes holding and killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from bisect_helpers import cli_env, wait_for

from bisector.workers.images.builder import make_venv
from bisector.workers.images.cache import TEMPLATE_UNUSED_S, ImageCache, LockTimeoutError, file_lock

MAKE_VENV = "import sys, pathlib, bisector.workers.images.builder as b; b.make_venv(*map(pathlib.Path, sys.argv[1:]))"
ENDLESS_CP = '#!/bin/sh\necho "$@" > "$CP_STARTED"\nexec sleep 600\n'  # its caller is caught mid-copy


def _last_used(path: Path, seconds_ago: float) -> None:
    then = time.time() - seconds_ago
    os.utime(path, (then, then))


def _names(folder: Path) -> set[str]:
    return {entry.name for entry in folder.iterdir()}


def _template(templates: Path) -> Path:
    (template,) = [entry for entry in templates.iterdir() if entry.is_dir() and not entry.name.startswith(".")]
    return template


def _caught_mid_copy(tmp_path: Path, venv: Path, templates: Path) -> subprocess.Popen[bytes]:
    """A process making venv from templates, caught in its first copy (a cp that never ends), in a session of its
    own: a copy from the template, or (where there is none) of the venv uv made into the template's draft."""
    bin_dir = tmp_path / "endless-cp"
    bin_dir.mkdir()
    (bin_dir / "cp").write_text(ENDLESS_CP)
    (bin_dir / "cp").chmod(0o755)
    started = tmp_path / "cp-started"
    env = cli_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", CP_STARTED=str(started))
    process = subprocess.Popen(
        [sys.executable, "-c", MAKE_VENV, str(venv), str(templates)], env=env, start_new_session=True
    )
    wait_for(started.exists, what="the copy to start")
    return process


def _kill(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_templates_unused_for_a_day_go_with_the_lru_pass_and_those_used_since_stay(tmp_path: Path):
    cache = ImageCache(tmp_path / "images")
    templates = cache.templates_dir
    make_venv(tmp_path / "one" / "venv", templates)
    current = _template(templates)
    # Another cache path's template stands for another interpreter's or uv's: named otherwise, never used here
    make_venv(tmp_path / "two" / "venv", tmp_path / "elsewhere")
    elsewhere = _template(tmp_path / "elsewhere")
    old, young = templates / ("0" * 16), templates / ("1" * 16)
    for copy in (old, young):
        subprocess.run(["cp", "-a", str(elsewhere), str(copy)], check=True)
    (templates / f"{old.name}.lock").touch()
    _last_used(old, TEMPLATE_UNUSED_S + 3600)
    _last_used(young, TEMPLATE_UNUSED_S - 3600)
    _last_used(current, TEMPLATE_UNUSED_S + 3600)
    make_venv(tmp_path / "three" / "venv", templates)  # from the current template: used now
    assert cache.evict(1 << 62) == []
    assert _names(templates) == {current.name, f"{current.name}.lock", young.name}
    make_venv(tmp_path / "four" / "venv", templates)
    assert (tmp_path / "four" / "venv" / "bin" / "python").exists()


def test_a_template_s_draft_stays_while_its_writer_lives_and_goes_once_the_writer_was_killed(tmp_path: Path):
    cache = ImageCache(tmp_path / "images")
    writer = _caught_mid_copy(tmp_path, tmp_path / "one" / "venv", cache.templates_dir)  # no template yet: a draft
    try:
        (draft,) = [entry for entry in cache.templates_dir.iterdir() if entry.name.startswith(".")]
        cache.evict(1 << 62)
        assert draft.is_dir()
    finally:
        _kill(writer)
    cache.evict(1 << 62)
    assert _names(cache.templates_dir) == set()


def test_an_unused_template_stays_while_a_process_copies_it_and_goes_once_that_process_was_killed(tmp_path: Path):
    cache = ImageCache(tmp_path / "images")
    make_venv(tmp_path / "one" / "venv", cache.templates_dir)
    template = _template(cache.templates_dir)
    _last_used(template, TEMPLATE_UNUSED_S + 3600)
    user = _caught_mid_copy(tmp_path, tmp_path / "two" / "venv", cache.templates_dir)
    try:
        cache.evict(1 << 62)
        assert template.is_dir()
    finally:
        _kill(user)
    cache.evict(1 << 62)
    assert _names(cache.templates_dir) == set()


def test_a_lock_whose_file_its_holder_removed_is_taken_on_the_file_now_at_its_path(tmp_path: Path):
    """The LRU pass removes a template's lock file while it holds it: one who waited for it must not hold a lock
    that no longer keeps the next remover out."""
    path = tmp_path / "template.lock"
    waiting, release = threading.Event(), threading.Event()
    holds_path: list[bool] = []

    def wait_shared() -> None:
        with file_lock(path, shared=True, on_wait=waiting.set) as fd:
            holds_path.append(path.exists() and os.fstat(fd).st_ino == path.stat().st_ino)
            release.wait()

    waiter = threading.Thread(target=wait_shared)
    with file_lock(path):
        waiter.start()
        assert waiting.wait(60)
        path.unlink()
    wait_for(lambda: bool(holds_path), what="the waiter to take the lock")
    try:
        with pytest.raises(LockTimeoutError), file_lock(path, timeout_s=0):
            pass
    finally:
        release.set()
        waiter.join()
    assert holds_path == [True]
