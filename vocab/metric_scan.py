"""The metric regex over a run's whole output as it streams, in bounded memory and time.

The metric is found wherever it is printed and the last value printed wins; a scan holds at most
METRIC_SCAN_MAX_CHARS of text whatever follows. Its matches are those of one search over the whole output as long
as a match, and what the regex reads past where a match starts, stays within METRIC_LOOKAHEAD_CHARS (and a
lookbehind within METRIC_LOOKBEHIND_CHARS); the last METRIC_SAMPLES_KEPT values are kept. Each search, over at
most METRIC_SCAN_MAX_CHARS, takes at most METRIC_TIME_LIMIT_S of CPU time (the third-party `regex` module's
timeout): a pattern that takes longer on so little text backtracks, and the scan stops and says so. A scan's time
thus grows in step with the output's volume, and none of the output goes unsearched: a scan slower than the test
prints makes the test wait on its full pipe, within the step's own timeout.
"""

from __future__ import annotations

import codecs
import math
import time
from collections import deque

METRIC_TIME_LIMIT_S = 30.0  # the most one metric search, or judging a finished run, may take
METRIC_LOOKAHEAD_CHARS = 1 << 20  # the most a metric match, and what the regex reads past its start, may span
METRIC_LOOKBEHIND_CHARS = 4 << 10  # text kept before where the next search starts (for ^, \b, lookbehinds)
METRIC_SCAN_MAX_CHARS = 3 * METRIC_LOOKAHEAD_CHARS + METRIC_LOOKBEHIND_CHARS  # the most a MetricScan holds
METRIC_SAMPLES_KEPT = 1000  # the last metric values of one run that are kept (the last one judges)


class MetricScan:
    """The metric regex over a run's output fed as it streams, holding at most METRIC_SCAN_MAX_CHARS of it.

    A match is taken once METRIC_LOOKAHEAD_CHARS of text follow its start (or at finish), so no text yet to come
    can change it; the next search resumes where the taken matches end, with METRIC_LOOKBEHIND_CHARS kept before
    that point for anchors and lookbehinds. A search runs once METRIC_LOOKAHEAD_CHARS new characters have come, so
    each character is searched about twice. Each search takes at most time_limit_s of CPU time (METRIC_TIME_LIMIT_S
    at most); past it the scan stops and says timed_out."""

    def __init__(self, pattern: str, time_limit_s: float = METRIC_TIME_LIMIT_S) -> None:
        import regex  # on a worker: the coordinator reads specs with this module but matches no output

        self._regex = regex.compile(pattern, regex.MULTILINE)
        self.time_limit_s = min(time_limit_s, METRIC_TIME_LIMIT_S)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # searched text kept: the lookbehind, then the text from where the next search starts
        self._resume = 0  # where in _held the next search starts
        self._new: list[str] = []  # text not searched yet
        self._new_chars = 0
        self._values: deque[float] = deque(maxlen=METRIC_SAMPLES_KEPT)
        self.timed_out = False
        self.finished = False
        self.peak_held_chars = 0  # the most text this scan held at once

    @property
    def values(self) -> tuple[float, ...]:
        """The metric values found so far, in output order (the last METRIC_SAMPLES_KEPT)."""
        return tuple(self._values)

    def feed(self, data: bytes) -> None:
        """The next bytes of the output (a UTF-8 character may be split between two feeds)."""
        self.feed_text(self._decoder.decode(data))

    def feed_text(self, text: str) -> None:
        for start in range(0, len(text), METRIC_LOOKAHEAD_CHARS):
            if self.timed_out or self.finished:
                return
            piece = text[start : start + METRIC_LOOKAHEAD_CHARS]
            self._new.append(piece)
            self._new_chars += len(piece)
            if self._new_chars >= METRIC_LOOKAHEAD_CHARS:
                self._scan(final=False)

    def finish(self, time_limit_s: float = METRIC_TIME_LIMIT_S) -> None:
        """The output has ended: search what is left, taking every match, in time_limit_s at most."""
        if self.finished:
            return
        self.feed_text(self._decoder.decode(b"", final=True))
        self.time_limit_s = min(self.time_limit_s, time_limit_s)
        if not self.timed_out:
            self._scan(final=True)
        self.finished = True
        self._held = ""

    def _scan(self, final: bool) -> None:
        text = self._held + "".join(self._new)
        self._new.clear()
        self._new_chars = 0
        self.peak_held_chars = max(self.peak_held_chars, len(text))
        settled = len(text) if final else len(text) - METRIC_LOOKAHEAD_CHARS  # a match starting before it is final
        resume = self._resume
        started_s = time.thread_time()
        try:
            for match in self._regex.finditer(text, pos=resume, timeout=max(self.time_limit_s, 0.001)):
                if match.start() >= settled:
                    break
                value = to_float(match.group(1))
                if value is not None:
                    self._values.append(value)
                resume = match.end()
                if time.thread_time() - started_s > self.time_limit_s:
                    raise TimeoutError
        except TimeoutError:
            self.timed_out = True
        resume = max(resume, settled)
        kept_from = max(resume - METRIC_LOOKBEHIND_CHARS, 0)
        self._held = "" if self.timed_out else text[kept_from:]
        self._resume = resume - kept_from


def to_float(raw: object) -> float | None:
    """raw as a finite float, or None."""
    try:
        value = float(str(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) else None
