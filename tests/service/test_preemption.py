"""Preemption through a real `bisect serve` (local workers, real git, SQLite): a job submitted while another job's
speculative probes hold every slot gets a step at once, not when one of those probes ends; the preempted probe is
stored as cancelled (preempted), never as a verdict, and both bisects name their culprits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from service_process import DONE_TIMEOUT_S, ServiceProcess, running_service, service_home
from synthetic import write_history

from bisector.db.store import Store
from bisector.vocab.domain import StepRecord, Verdict

pytestmark = pytest.mark.xdist_group("service")

# Steps of the gated recipe block while the gate file exists, except at the commits listed in $OPEN (the first
# job's endpoints): once they ran, the first job holds both slots with probes that cannot end on their own.
GATE_SCRIPT = """\
if [ -e "$GATE" ]; then
  case " $OPEN " in
    *" $(git rev-parse HEAD) "*) ;;
    *) while [ -e "$GATE" ]; do sleep 0.05; done ;;
  esac
fi
exec bash test.sh
"""


def steps_of(db: str, bisect_id: int) -> list[StepRecord]:
    with Store.open(db, read_only=True) as store:
        return store.steps(bisect_id)


def running(steps: list[StepRecord]) -> int:
    return sum(s.finished is None for s in steps)


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    """Wait on an event of the server's; the deadline only ends a hung test, it is no speed target."""
    deadline = time.monotonic() + DONE_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.05)


def test_a_job_submitted_while_another_holds_every_slot_preempts_a_speculative_probe(
    tmp_path: Path, store_url: str
) -> None:
    block = 12
    verdicts = ["good"] * 7 + ["bad"] * (block - 7) + ["good"] * 4 + ["bad"] * (block - 4)
    history = write_history(tmp_path / "repo", verdicts, sleep_s=0.05)
    first_range = (history.shas[0], history.shas[block - 1], history.shas[7])
    second_range = (history.shas[block], history.shas[2 * block - 1], history.shas[block + 4])
    gate = tmp_path / "gate"
    gate.touch()
    (tmp_path / "gate.sh").write_text(GATE_SCRIPT)
    config = tmp_path / "serve.toml"
    config.write_text(
        f'[recipes.gated]\nrun = "bash {tmp_path / "gate.sh"}"\n'
        f'env = {{ GATE = "{gate}", OPEN = "{first_range[0]} {first_range[1]}" }}\n'
        '[recipes.plain]\nrun = "bash test.sh"\n'
    )
    db = store_url
    home = service_home(tmp_path)
    args = ["--db", db, "--allow-repo", str(history.path), "--config", str(config), "--slots", "2"]

    def body(good_bad: tuple[str, str, str], recipe: str) -> dict[str, object]:
        return {"repo": str(history.path), "good": good_bad[0], "bad": good_bad[1], "recipe": recipe, "explain": False,
                "verify_endpoints": "first"}  # fmt: skip

    def gated_probes(bisect_id: int) -> list[StepRecord]:
        return [s for s in steps_of(db, bisect_id) if s.sha not in first_range[:2]]

    service: ServiceProcess
    with running_service(*args, **home) as service:
        first = service.post(body(first_range, "gated")).json()["id"]
        wait_for("the first job's probes on both slots", lambda: running(gated_probes(first)) == 2)
        second = service.post(body(second_range, "plain")).json()["id"]
        wait_for("the second job's first step", lambda: bool(steps_of(db, second)))
        # the first job's coordinator stores its cancelled probe on its own thread: maybe just after the slot went
        wait_for("the preempted probe stored", lambda: running(gated_probes(first)) < 2)

        assert gate.exists()  # so no probe of the first job has ended on its own: one was preempted
        probes = gated_probes(first)
        assert [s.verdict for s in probes if s.finished is not None] == [Verdict.CANCELLED]
        [preempted] = [s for s in probes if s.verdict is Verdict.CANCELLED]
        assert preempted.detail.startswith(f"preempted: its slot went to bisect {second}")
        assert preempted.error_kind is None

        gate.unlink()
        first_report, second_report = service.wait_done(first), service.wait_done(second)
        rendered = httpx.get(f"{service.base}/api/bisects/{first}/rendered", timeout=60.0).text

    assert (first_report["status"], first_report["first_bad"]["sha"]) == ("found", first_range[2])
    assert (second_report["status"], second_report["first_bad"]["sha"]) == ("found", second_range[2])
    stored = {s.id: s for s in steps_of(db, first)}
    assert stored[preempted.id].verdict is Verdict.CANCELLED  # never turned into a verdict on the commit
    assert "to give another bisect a slot" in " ".join(rendered.split())
