"""A step's output, bounded whatever the test prints: a capped log on disk and a capped window in memory.

The worker reads a command's output from a pipe in chunks of READ_CHUNK_BYTES (never a whole stream, never a
whole line) and passes each chunk to two places:

- ``StepLog``: the step's log file. It holds at most ``cap_bytes`` (LOG_CAP_BYTES, 64 MiB, or
  ``$BISECT_LOG_CAP_BYTES``): the first bytes up to the cap less LOG_END_BYTES, then, if more came, a line saying
  how many bytes were left out, then the last LOG_END_BYTES of the output (so the log still ends where the test
  ended). A write error (ENOSPC) is kept in ``error``, never raised; the step reports it. Where a second StepLog
  appends to the file after the first one finished (a test run by an image's own runner on Ray, after the build),
  each keeps the end of its own output: when both overflow, the file holds one LOG_END_BYTES and a line more.
- ``OutputWindow``: the last WINDOW_BYTES (1 MiB) of one command's output. The infrastructure signatures are
  matched against it, and a failure's detail is its ``tail``: at most DETAIL_TAIL_BYTES, cut on a UTF-8 boundary.

A test judged by a metric regex also feeds every chunk to the metric's scan (``MetricScan``, vocab/metric_scan.py),
which finds the metric wherever it was printed and holds about 3 MiB of text. So a worker holds about 2 MiB per
running command (5 with a metric regex), for a 100 MB line as for 500 MB of lines.
"""

from __future__ import annotations

import os
from typing import IO

READ_CHUNK_BYTES = 64 << 10
WINDOW_BYTES = 1 << 20
LOG_CAP_BYTES = 64 << 20
LOG_END_BYTES = 64 << 10
DETAIL_TAIL_BYTES = 8 << 10
DETAIL_TAIL_LINES = 15
LOG_CAP_VARIABLE = "BISECT_LOG_CAP_BYTES"
_MIN_LOG_CAP_BYTES = 4 * LOG_END_BYTES


def log_cap_bytes() -> int:
    """The per-step log cap: $BISECT_LOG_CAP_BYTES (at least 256 KiB) when set to a number, else LOG_CAP_BYTES."""
    value = os.environ.get(LOG_CAP_VARIABLE, "").strip()
    return max(int(value), _MIN_LOG_CAP_BYTES) if value.isdigit() else LOG_CAP_BYTES


def _utf8_start(data: bytes | bytearray) -> int:
    """The offset of the first byte that starts a UTF-8 character (continuation bytes are 0b10xxxxxx)."""
    for offset in range(min(len(data), 4)):
        if data[offset] & 0xC0 != 0x80:
            return offset
    return 0


class OutputWindow:
    """The last `limit_bytes` of a stream fed in chunks; memory stays below 2 x limit_bytes plus one chunk."""

    def __init__(self, limit_bytes: int = WINDOW_BYTES) -> None:
        self._limit = limit_bytes
        self._buffer = bytearray()
        self.total_bytes = 0

    def feed(self, data: bytes) -> None:
        self.total_bytes += len(data)
        self._buffer += data
        if len(self._buffer) > 2 * self._limit:
            del self._buffer[: len(self._buffer) - self._limit]

    def last_bytes(self) -> bytes:
        return bytes(self._buffer[-self._limit :])

    @property
    def cut(self) -> bool:
        """Whether earlier output was dropped."""
        return self.total_bytes > self._limit

    def text(self) -> str:
        """The window as text. When earlier output was dropped it starts at a line start (or, within one very long
        line, at a character start)."""
        data = self.last_bytes()
        if self.cut:
            newline = data.find(b"\n")
            data = data[newline + 1 :] if newline >= 0 else data[_utf8_start(data) :]
        return data.decode(errors="replace")

    def tail(self, max_bytes: int = DETAIL_TAIL_BYTES, lines: int = DETAIL_TAIL_LINES) -> str:
        """The last `lines` lines, quoted with '  | ', in at most max_bytes of UTF-8 (the oldest part cut off)."""
        budget = max_bytes - 4 * (lines + 1)  # room for the quote marks
        data = bytes(self._buffer[-budget:]).rstrip()
        cut = len(data) < len(self._buffer.rstrip())
        data = data[_utf8_start(data) :] if cut else data
        kept = data.decode(errors="replace").splitlines()[-lines:]
        text = "\n".join(f"  | {line}" for line in kept)
        encoded = text.encode()
        if len(encoded) > max_bytes:  # replacement characters can be wider than the bytes they replaced
            text = encoded[-max_bytes:][_utf8_start(encoded[-max_bytes:]) :].decode(errors="replace")
        return text


class StepLog:
    """A step's log file, capped at cap_bytes; keeps the first write error instead of raising it."""

    def __init__(self, file: IO[bytes], cap_bytes: int | None = None) -> None:
        """Writes go to file's descriptor directly (flush what was written through the file object first), so
        no buffer is left to fail at close."""
        self._fd = file.fileno()
        self.cap_bytes = cap_bytes if cap_bytes is not None else log_cap_bytes()
        self._head_room = self.cap_bytes - LOG_END_BYTES - 256  # the end and the truncation line fit after it
        try:
            self._written = os.fstat(self._fd).st_size
        except OSError:
            self._written = 0
        self._end = OutputWindow(LOG_END_BYTES)
        self.error: OSError | None = None

    @property
    def dropped_bytes(self) -> int:
        return self._end.total_bytes

    def write(self, data: bytes) -> None:
        """Append data, or keep it for the log's end once the head is full. Unbuffered: a full disk shows at once."""
        if self.error is not None:
            return
        room = max(self._head_room - self._written, 0)
        if self.dropped_bytes == 0 and room:
            self._put(data[:room])
            data = data[room:]
        if data:
            self._end.feed(data)

    def note(self, text: str) -> None:
        """A line of the harness's own (the header, the command about to run)."""
        self.write(text.encode())

    def finish(self) -> None:
        """Write what the cap left out: a line saying how much, then the output's last LOG_END_BYTES. What is
        written after a finish is kept for the next one (a step whose test another process writes to the log
        finishes its build's part before that process opens the log)."""
        if self.error is not None or self.dropped_bytes == 0:
            return
        end = self._end.last_bytes()
        omitted = self.dropped_bytes - len(end)
        self._end = OutputWindow(LOG_END_BYTES)
        self._put(
            f"\n[gpu-bisect: log truncated at its per-step cap of {self.cap_bytes} bytes "
            f"(${LOG_CAP_VARIABLE}): {omitted} bytes of output left out; its last {len(end)} bytes follow]\n".encode()
        )
        self._put(end)

    def _put(self, data: bytes) -> None:
        if not data or self.error is not None:
            return
        view = memoryview(data)
        try:
            while view:  # a raw write may take part of it (a disk filling up)
                done = os.write(self._fd, view)
                view = view[done:]
                self._written += done
        except OSError as exc:
            self.error = exc
