"""What a ready image's build produced, recorded when the image is made and checked before each reuse of it.

The record (`<id>/contents.json`) lists every entry under the image's src/ and venv/: each directory, each link's
target, each file's mode, size and SHA-256; the image's manifest holds the record's own SHA-256. A check walks the
image again and names what differs (an entry missing, added or changed). A file whose size, mode, inode, mtime and
ctime are the recorded ones is taken as unchanged without being read, as git's index does: any write through the
filesystem moves a file's ctime, which no user can set back. Every other file is read and hashed, so a reuse costs a
stat of each entry, and an image copied from another node (all its files new inodes) is checked byte for byte.
A file changed within RACY_NS before the record began could change again and keep its stat (timestamps move in clock
ticks): it is recorded racy, without a stat signature, and hashed at every check (as git's index treats its racily
clean entries), so the record never waits and a reuse also reads the files the build wrote last.

Triton's and Inductor's caches (tests fill them by design) and the tests' private copies (runs/) are not recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

RECORD = "contents.json"
RECORDED = ("src", "venv")  # the image's tree with its build outputs, and its venv
RACY_NS = 2_000_000_000  # coarser than any filesystem's timestamps (NFS servers on ext3 count whole seconds)
REWRITABLE_MAX_BYTES = 16 << 20  # a private copy rewrites the image's folder in text files up to this size
SNIFF_BYTES = 8192  # a NUL byte in a file's first bytes marks it binary: never rewritten
READ_BYTES = 1 << 20
SHOWN = 3  # differences a damage message names


class ImageDamageError(Exception):
    """The image differs from the record of what its build produced (or has no record): it is never used."""


@dataclass(frozen=True)
class Contents:
    digest: str  # SHA-256 of the record: what the image's manifest holds
    naming_folder: tuple[str, ...]  # text files and links (relative to the image) that name the image's folder
    folder: str  # the image's folder as they name it, where it was recorded ("": unknown, an older record)


def record_contents(folder: Path) -> Contents:
    """Record what the image in folder holds now (its build just ended, or its copy was just relocated here)."""
    started_ns = time.time_ns()
    needle = str(folder).encode()
    entries: dict[str, list[object]] = {}
    naming: list[str] = []
    for name, info in _walk(folder):
        path = folder / name
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(path)
            entries[name] = ["l", target]
            if target.encode().startswith(needle):
                naming.append(name)
        elif stat.S_ISREG(info.st_mode):
            digest, names_folder = _digest(path, needle)
            racy = info.st_ctime_ns >= started_ns - RACY_NS
            entries[name] = ["f", info.st_mode, info.st_size, digest, None if racy else _signature(info)]
            if names_folder:
                naming.append(name)
        else:
            entries[name] = ["d" if stat.S_ISDIR(info.st_mode) else "o", info.st_mode]
    text = json.dumps({"entries": entries, "naming_folder": sorted(naming), "folder": str(folder)}).encode()
    temporary = folder / f".{RECORD}.{os.getpid()}.tmp"
    temporary.write_bytes(text)
    temporary.replace(folder / RECORD)
    return Contents(hashlib.sha256(text).hexdigest(), tuple(sorted(naming)), str(folder))


def check_contents(folder: Path, digest: str) -> Contents:
    """The image's record when the image in folder holds what it records; ImageDamageError saying what differs
    otherwise (also where there is no record, or not the one its manifest names by digest)."""
    if not digest:
        raise ImageDamageError("it has no record of what its build produced (an earlier version made it)")
    try:
        text = (folder / RECORD).read_bytes()
    except OSError as exc:
        raise ImageDamageError(f"its record {RECORD} cannot be read ({exc.strerror})") from None
    if hashlib.sha256(text).hexdigest() != digest:
        raise ImageDamageError(f"its record {RECORD} is not the one its manifest names")
    record = json.loads(text)
    expected: dict[str, list[object]] = record["entries"]
    differences = []
    seen = set()
    try:
        for name, info in _walk(folder):
            seen.add(name)
            wanted = expected.get(name)
            if wanted is None:
                differences.append(f"{name} added")
            elif not _same(folder / name, info, wanted):
                differences.append(f"{name} changed")
    except OSError as exc:  # a folder removed or unreadable mid-walk
        raise ImageDamageError(f"it cannot be read whole ({exc})") from None
    differences += [f"{name} missing" for name in expected if name not in seen]
    if differences:
        more = f" and {len(differences) - SHOWN} more" if len(differences) > SHOWN else ""
        raise ImageDamageError(f"its contents differ from their record: {', '.join(differences[:SHOWN])}{more}")
    return Contents(digest, tuple(record["naming_folder"]), str(record.get("folder", "")))


def _same(path: Path, info: os.stat_result, wanted: list[object]) -> bool:
    kind = wanted[0]
    if kind == "l":
        return stat.S_ISLNK(info.st_mode) and os.readlink(path) == wanted[1]
    if kind != "f":
        return not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode) and info.st_mode == wanted[1]
    _, mode, size, digest, signature = wanted
    if not stat.S_ISREG(info.st_mode) or info.st_mode != mode or info.st_size != size:
        return False
    if signature is not None and _signature(info) == signature:
        return True
    try:
        return _digest(path, b"")[0] == digest
    except OSError:
        return False


def _signature(info: os.stat_result) -> list[int]:
    return [info.st_ino, info.st_mtime_ns, info.st_ctime_ns]


def _digest(path: Path, needle: bytes) -> tuple[str, bool]:
    """The file's SHA-256, and whether it is a text file of at most REWRITABLE_MAX_BYTES that holds needle."""
    hashed = hashlib.sha256()
    found = binary = False
    first, carried = True, b""
    with path.open("rb") as data:
        while block := data.read(READ_BYTES):
            if first:
                binary, first = b"\0" in block[:SNIFF_BYTES], False
            hashed.update(block)
            if needle and not found and not binary:
                found = needle in carried + block
                carried = block[1 - len(needle) :]
    small = path.stat().st_size <= REWRITABLE_MAX_BYTES
    return hashed.hexdigest(), found and small and not binary


def _walk(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Each recorded entry below folder (its path relative to folder) with its lstat."""
    for top in RECORDED:
        try:
            info = os.lstat(folder / top)
        except FileNotFoundError:
            continue
        yield top, info
        if stat.S_ISDIR(info.st_mode):
            yield from _below(folder / top, top)


def _below(directory: Path, name: str) -> Iterator[tuple[str, os.stat_result]]:
    with os.scandir(directory) as entries:
        for entry in entries:
            child = f"{name}/{entry.name}"
            info = entry.stat(follow_symlinks=False)
            yield child, info
            if stat.S_ISDIR(info.st_mode):
                yield from _below(directory / entry.name, child)
