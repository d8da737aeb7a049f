"""The server's secret key (the key of its forms' CSRF tokens): drawn once, kept in a file only its owner may read,
and read at every start after, so that a form a page served before a restart is still accepted after it."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from bisector.vocab.errors import InputError

KEY_BYTES = 32


def secret_key(path: Path) -> bytes:
    """The key kept at path, made there first if there is none (mode 0600, written whole before it appears, so that
    two servers starting at once read the same key). InputError, naming the file, when it cannot be made or read, is
    not a key, or others may read it."""
    try:
        if not path.exists():
            _create(path)
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii").strip()
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


def _create(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            file.write(secrets.token_hex(KEY_BYTES) + "\n")
        with contextlib.suppress(FileExistsError):  # another server made it meanwhile: theirs is kept
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)
