"""The server's secret key (the key of its forms' CSRF tokens): drawn once, kept in a file only its owner may read,
and read at every start after, so that a form a page served before a restart is still accepted after it."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import tempfile
import time
from pathlib import Path

from bisector.vocab.errors import InputError

KEY_BYTES = 32
NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}  # os.link's errors where none are made
KEY_WRITE_WAIT_S = 2.0  # how long an empty key file is read again: its maker may not have written it yet
ABANDONED_AFTER_S = 60.0  # an empty key file or a draft this old was left by a maker killed mid-write


def secret_key(path: Path) -> bytes:
    """The key kept at path, made there first if there is none (mode 0600; the first maker's key is kept, so that
    two servers or threads starting at once read the same key). InputError, naming the file, when it cannot be made
    or read, is not a key, or others may read it."""
    try:
        _remove_abandoned(path)
        if not path.exists():
            _create(path)
        mode = path.stat().st_mode
        text = _read(path).strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"the server's key file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_IMODE(mode) & 0o077:
        raise InputError(f"the server's key file {path} may be read by others: chmod 600 it")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise InputError(f"the server's key file {path} holds no key: remove it and a new one is made at the start")
    return key


def _remove_abandoned(path: Path) -> None:
    """Drafts and an empty key file that a maker killed mid-write left (the key file is empty only where the
    filesystem makes no hard links): old enough that no live maker is still writing them."""
    now = time.time()
    leftovers = [*path.parent.glob(f".{path.name}.*"), *([path] if path.exists() and not path.stat().st_size else [])]
    for leftover in leftovers:
        with contextlib.suppress(FileNotFoundError):
            if now - leftover.stat().st_mtime > ABANDONED_AFTER_S:
                leftover.unlink()


def _create(path: Path) -> None:
    """A key written whole in a draft of this call's own, then linked into place unless a key is there already.
    Where the filesystem makes no hard links, the key file is created exclusively and written after (_read waits
    for its first writer)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    line = secrets.token_hex(KEY_BYTES) + "\n"
    descriptor, draft = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(line)
        try:
            os.link(draft, path)
        except FileExistsError:  # another maker got there first: theirs is kept
            pass
        except OSError as exc:
            if exc.errno not in NO_HARD_LINKS:
                raise
            _create_exclusive(path, line)
    finally:
        Path(draft).unlink(missing_ok=True)


def _create_exclusive(path: Path, line: str) -> None:
    with (
        contextlib.suppress(FileExistsError),  # another maker got there first: theirs is kept
        os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="ascii") as file,
    ):
        file.write(line)


def _read(path: Path) -> str:
    deadline = time.monotonic() + KEY_WRITE_WAIT_S
    while not (text := path.read_text(encoding="ascii")) and time.monotonic() < deadline:
        time.sleep(0.01)
    return text
