"""The live progress display of a running bisect (rich), on stderr so that reports stay pipeable."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.text import Text

from bisector.core.progress import Progress
from bisector.vocab.domain import BisectRecord, Commit, StepResult, Verdict
from bisector.workers.executor import Assignment

if TYPE_CHECKING:  # imported where used: only a terminal shows the live table
    from rich.live import Live
    from rich.table import Table

AHEAD_SHOWN = 4  # of the images built ahead (a round of 8 can have 72), the likeliest named; the rest counted
_STYLE = {Verdict.GOOD: "green", Verdict.BAD: "red", Verdict.SKIP: "yellow", Verdict.ERROR: "magenta"}


class LiveObserver:
    """Prints a line per finished step and, on a terminal, keeps a live table of running steps."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.running: dict[int, tuple[Commit, int, Assignment]] = {}
        self.latest: Progress | None = None
        self.live: Live | None = None
        if console.is_terminal:
            from rich.live import Live

            # Rendered by Live's own thread at each refresh (_View.__rich__): the coordinator only updates the
            # data, so an event costs it no table rendering between a result and the next probe.
            self.live = Live(_View(self), console=console, refresh_per_second=4, transient=True)
            self.live.start()

    def step_started(self, step_id: int, commit: Commit, attempt: int, assignment: Assignment) -> None:
        self.running[step_id] = (commit, attempt, assignment)

    def step_finished(self, result: StepResult, commit: Commit, word: str) -> None:
        self.running.pop(result.step_id, None)
        style = _STYLE.get(result.verdict, "dim")
        metric = f" metric {result.samples[-1]:.4g}" if result.samples else ""
        detail = result.detail.splitlines()[0] if result.detail else ""
        why = "" if result.verdict in (Verdict.GOOD, Verdict.BAD) or not detail else f" ({detail})"
        line = Text.assemble(
            (f"{word:>9}", style),
            f" {commit.sha[:12]} #{commit.position} on {result.worker or '?'} in {result.build_s + result.run_s:.1f}s"
            f"{metric}{why}",
        )
        self._print(line)

    def progress(self, progress: Progress) -> None:
        self.latest = progress

    def note(self, message: str) -> None:
        self._print(Text(message, style="dim"))

    def finished(self, record: BisectRecord) -> None:
        self._stop_live()

    def _stop_live(self) -> None:
        if self.live is not None:
            with contextlib.suppress(OSError):
                self.live.stop()
            self.live = None

    def _print(self, line: Text) -> None:
        """One line to the console, as text (a metric regex's brackets are no markup). A console whose stream
        fails goes quiet (as stderr's does on a closed pipe, cli_support.ProgressConsole), never stopping the bisect,
        which goes on to its answer in the store."""
        try:
            self.console.print(line, highlight=False)
        except OSError:
            self.console.quiet = True
            self._stop_live()

    def render(self) -> Group:
        from rich.table import Table

        parts: list[Text | Table] = []
        if self.latest is not None:
            p = self.latest
            parts.append(
                Text(
                    f"{p.suspects} of {p.candidates} commits still suspect "
                    f"(between #{p.last_good.position} {p.last_good.sha[:10]} and "
                    f"#{p.first_bad.position} {p.first_bad.sha[:10]}); {p.running} running, {p.done} done, "
                    f"~{p.estimated_left} steps left"
                )
            )
            if p.building_ahead:
                ahead = ", ".join(f"#{c.position} {c.sha[:10]}" for c in p.building_ahead[:AHEAD_SHOWN])
                if (more := len(p.building_ahead) - AHEAD_SHOWN) > 0:
                    ahead += f" and {more} more"
                parts.append(Text(f"building images ahead: {ahead}", style="dim"))
        running = sorted(self.running.items())  # one pass over the dict: the coordinator changes it while Live renders
        if running:
            table = Table(box=None, show_header=True, header_style="bold")
            for column in ("step", "commit", "attempt", "worker", "GPUs"):
                table.add_column(column)
            for step_id, (commit, attempt, assignment) in running:
                table.add_row(
                    str(step_id), f"#{commit.position} {commit.sha[:12]}", str(attempt), assignment.worker,
                    ",".join(map(str, assignment.gpus)) or "cpu",
                )  # fmt: skip
            parts.append(table)
        return Group(*parts)


class _View:
    """What Live shows: the observer's state, rendered when Live refreshes."""

    def __init__(self, observer: LiveObserver) -> None:
        self.observer = observer

    def __rich__(self) -> Group:
        return self.observer.render()
