"""--prune auto: the probe's build under strace. The build command is wrapped so that, where strace can trace, every
file the build's processes open, look up or run (and every directory they list) is written to the probe's folder;
read_build_trace turns that trace into absolute paths. Where it cannot (no strace, strace not allowed to trace,
no build ran: its image came prebuilt), the folder says why and the probe counts every file as a build input.
"""

from __future__ import annotations

import codecs
import posixpath
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

TRACE_FILE = "build.strace"
CWD_FILE = "build.cwd"  # the build's working directory, written as it starts under strace
UNTRACED_FILE = "build.untraced"  # why the build runs without strace
MAX_TRACE_BYTES = 1 << 30
# Successful calls only: a path a call did not find is absent at the bad commit, so a candidate that changes it also
# deletes it before the bad commit, and the probe counts every path the range deletes as seen.
# A call this architecture or this strace lacks (?name) is left out.
STRACE_OPTIONS = "-f -qqq -z -y -s 4096 -e signal=none -e trace=" + ",".join(
    f"?{call}" for call in ("open", "openat", "openat2", "creat", "execve", "execveat", "stat", "lstat",
                            "newfstatat", "statx", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
                            "chdir", "fchdir", "getdents", "getdents64", "clone", "clone3", "fork", "vfork")
)  # fmt: skip
_FORKS = ("clone", "clone3", "fork", "vfork")
_LINE = re.compile(r"(\d+)\s+(\w+)\((.*)")
_PATH_ARG = re.compile(r'^(?:(AT_FDCWD|\d+)<((?:[^>\\]|\\.)*)>,\s*)?"((?:[^"\\]|\\.)*)"')
_FD_ARG = re.compile(r"^(?:AT_FDCWD|\d+)<((?:[^>\\]|\\.)*)>")
_RETURNED = re.compile(r"\)\s+=\s+(\d+)")


def traced_build(build_cmd: str, out_env: str, label: str) -> str:
    """build_cmd run under strace, writing into the folder named by the variable out_env (which its own processes
    no longer see); label makes the command, and so the key of an image it builds, the probe's own."""
    build = shlex.quote(build_cmd)
    return (
        f"# gpu-bisect --prune probe: {label}\n"
        f'out="${out_env}"; mkdir -p "$out"\n'
        f'if ! command -v strace >/dev/null; then why="strace is not installed on $HOSTNAME"\n'
        f"elif ! err=$(strace {STRACE_OPTIONS} -o /dev/null true 2>&1); then\n"
        f"  why=\"strace cannot trace on $HOSTNAME: $(printf %s \"$err\" | head -c 300 | tr '\\n' ' ')\"\n"
        f'else unset {out_env}; pwd -P >"$out/{CWD_FILE}"\n'
        f'  exec strace {STRACE_OPTIONS} -o "$out/{TRACE_FILE}" bash -c {build}\nfi\n'
        f'printf "%s\\n" "$why" >"$out/{UNTRACED_FILE}"; exec bash -c {build}\n'
    )


@dataclass
class BuildTrace:
    """What the traced build's processes touched, as absolute paths."""

    cwd: str
    touched: set[str] = field(default_factory=set)  # files and directories opened, looked up, run
    listed: set[str] = field(default_factory=set)  # directories listed


def read_build_trace(out_dir: Path) -> BuildTrace | str:
    """The build's trace in out_dir, or why there is none to read."""
    untraced = out_dir / UNTRACED_FILE
    if untraced.exists():
        return untraced.read_text(errors="replace").strip() or "strace could not run"
    cwd_file, trace_file = out_dir / CWD_FILE, out_dir / TRACE_FILE
    if not cwd_file.exists() or not trace_file.exists():
        return "the probe ran no build (its image was reused or came prebuilt)"
    size = trace_file.stat().st_size
    if size > MAX_TRACE_BYTES:
        return f"the build's trace is {size >> 20} MiB, over the {MAX_TRACE_BYTES >> 20} MiB read"
    trace = BuildTrace(cwd_file.read_text(errors="surrogateescape").strip())
    with trace_file.open(encoding="utf-8", errors="surrogateescape") as lines:
        _read(lines, trace)
    return trace


def _read(lines: Iterable[str], trace: BuildTrace) -> None:
    parsed = [m.groups() for line in lines if (m := _LINE.match(line))]
    parent: dict[str, str] = {}
    for pid, call, rest in parsed:
        if call in _FORKS and (child := _RETURNED.search(rest)):
            parent.setdefault(child.group(1), pid)
    cwd: dict[str, str] = {}

    def cwd_of(pid: str) -> str:
        """The process's working directory: the last it named, else its parent's now (it started there)."""
        ancestor, seen = pid, {pid}
        while ancestor not in cwd and parent.get(ancestor, ancestor) not in seen:
            ancestor = parent[ancestor]
            seen.add(ancestor)
        return cwd.setdefault(pid, cwd.get(ancestor, trace.cwd))

    for pid, call, rest in parsed:
        if call in ("getdents", "getdents64", "fchdir"):
            if named := _FD_ARG.match(rest):
                directory = _unescape(named.group(1))
                if call == "fchdir":
                    cwd[pid] = directory
                else:
                    trace.listed.add(directory)
            continue
        if not (arg := _PATH_ARG.match(rest)):  # the first argument names the path (readlink's second, its target)
            continue
        fd, base, path = arg.groups()
        if fd == "AT_FDCWD":
            cwd[pid] = _unescape(base)
        full = posixpath.normpath(posixpath.join(_unescape(base) if fd else cwd_of(pid), _unescape(path)))
        trace.touched.add(full)
        if call == "chdir":
            cwd[pid] = full


def _unescape(text: str) -> str:
    """A string as strace prints it (C escapes) back to the path."""
    if "\\" not in text:
        return text
    raw: bytes = codecs.escape_decode(text.encode("utf-8", "surrogateescape"))[0]
    return raw.decode("utf-8", "surrogateescape")
