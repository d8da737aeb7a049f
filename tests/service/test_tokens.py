"""Per-person tokens on a real `bisect serve`: every job records who submitted it, only its owner or an admin may
cancel it, `bisect list --owner` filters by it; a tokens file that cannot serve stops the server at start-up in one
line that names no token."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bisect_helpers import wait_for
from service_process import ServiceProcess, running_team_service, service_env, service_home
from synthetic import SyntheticHistory, culprit_history

from bisector.service.tokens import TokenBook, read_tokens_file

pytestmark = pytest.mark.xdist_group("service")

ALICE, BOB, CAROL = "alice-token-1", "bob-token-2", "carol-token-3"
TOKENS = f'admins = ["carol"]\nalice = "{ALICE}"\nbob = "{BOB}"\ncarol = "{CAROL}"\n'


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> SyntheticHistory:
    return culprit_history(tmp_path_factory.mktemp("hist") / "repo", 8, 5, sleep_s=0.05)


@pytest.fixture(scope="module")
def service(history: SyntheticHistory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("home")
    with running_team_service(home, history.path, TOKENS) as served:
        served.db = f"sqlite:///{home / 'bisect.db'}"  # type: ignore[attr-defined]
        served.home_env = service_home(home)  # type: ignore[attr-defined]
        yield served


def submission(history: SyntheticHistory, recipe: str = "synthetic") -> dict[str, object]:
    return {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": recipe, "explain": False}


def bisect_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bisector", *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_each_job_is_owned_by_whoever_submitted_it(service: ServiceProcess, history: SyntheticHistory) -> None:
    alice = service.post(submission(history), authorization=f"Bearer {ALICE}")
    bob = service.post(submission(history), authorization=f"Bearer {BOB}")
    assert (alice.status_code, bob.status_code) == (201, 201), (alice.text, bob.text)
    assert (alice.json()["owner"], bob.json()["owner"]) == ("alice", "bob")
    alice_id, bob_id = alice.json()["id"], bob.json()["id"]
    assert service.job(alice_id)["owner"] == "alice"
    service.wait_done(alice_id)
    service.wait_done(bob_id)
    listed = {b["id"]: b["owner"] for b in httpx.get(f"{service.base}/api/bisects", timeout=60.0).json()}
    assert (listed[alice_id], listed[bob_id]) == ("alice", "bob")
    only_bob = httpx.get(f"{service.base}/api/bisects", params={"owner": "bob"}, timeout=60.0).json()
    assert bob_id in [b["id"] for b in only_bob]
    assert {b["owner"] for b in only_bob} == {"bob"}

    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    cli = bisect_cli("list", "--owner", "alice", "--format", "json", "--db", service.db, env=env)  # type: ignore[attr-defined]
    assert cli.returncode == 0, cli.stderr
    assert {b["owner"] for b in json.loads(cli.stdout)} == {"alice"}
    assert alice_id in [b["id"] for b in json.loads(cli.stdout)]
    table = bisect_cli("list", "--db", service.db, env={**env, "COLUMNS": "200"})  # type: ignore[attr-defined]
    assert table.stdout.splitlines()[0].split()[-1] == "owner"
    rows = {line.split()[0]: line.split()[-1] for line in table.stdout.splitlines()[1:] if line.split()}
    assert (rows[str(alice_id)], rows[str(bob_id)]) == ("alice", "bob")
    page = httpx.get(f"{service.base}/", params={"owner": "bob"}, timeout=60.0).text
    assert f'data-id="{bob_id}"' in page
    assert f'data-id="{alice_id}"' not in page
    assert '<td class="owner">bob</td>' in page


def test_only_the_owner_or_an_admin_may_cancel(service: ServiceProcess, history: SyntheticHistory) -> None:
    first = service.post(submission(history, "slow"), authorization=f"Bearer {ALICE}").json()["id"]
    second = service.post(submission(history, "slow"), authorization=f"Bearer {ALICE}").json()["id"]
    try:
        refused = service.delete(first, authorization=f"Bearer {BOB}")
        assert refused.status_code == 403
        assert refused.json()["detail"] == (
            f"bob may not cancel bisect {first}: it is alice's; only its owner or an admin may"
        )
        assert service.report(first)["status"] == "running"
        assert service.delete(first, authorization=f"Bearer {ALICE}").status_code == 200  # her own
        assert service.delete(second, authorization=f"Bearer {CAROL}").status_code == 200  # an admin
    finally:
        for bisect_id in (first, second):
            service.delete(bisect_id, authorization=f"Bearer {CAROL}")
    assert service.wait_done(first)["status"] == "cancelled"
    assert service.wait_done(second)["status"] == "cancelled"


def test_the_cli_client_says_why_another_person_s_job_is_refused(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    bisect_id = service.post(submission(history, "slow"), authorization=f"Bearer {ALICE}").json()["id"]
    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    try:
        refused = bisect_cli("cancel", str(bisect_id), "--server", service.base, env={**env, "BISECT_TOKEN": BOB})
        assert refused.returncode == 2
        assert refused.stderr == (
            f"bisect: error: {service.base}: 403 bob may not cancel bisect {bisect_id}: it is alice's; only its "
            "owner or an admin may\n"
        )
        assert BOB not in refused.stderr
    finally:
        service.delete(bisect_id, authorization=f"Bearer {ALICE}")
    service.wait_done(bisect_id)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "No such file or directory"),
        ("alice = \n", "not TOML"),
        ('alice = ""\n', "alice: the token is empty"),
        (f'alice = "{ALICE}"\nbob = "{ALICE}"\n', "bob and alice have the same token"),
        ('admins = ["dave"]\nalice = "x1"\n', "admins names dave, who have no token"),
        ("", "no tokens"),
        ("alice = 12\n", "alice: the token must be a string"),
        ('"bad name" = "x1"\n', "name 'bad name'"),
    ],
)
def test_a_tokens_file_that_cannot_serve_stops_the_server_in_one_line(
    history: SyntheticHistory, tmp_path: Path, text: str | None, problem: str
) -> None:
    tokens = tmp_path / "tokens.toml"
    if text is not None:
        tokens.write_text(text)
    db = tmp_path / "bisect.db"
    args = ["serve", "--port", "0", "--allow-repo", str(history.path), "--db", str(db), "--tokens-file", str(tokens)]
    done = bisect_cli(*args, env={**service_env(**service_home(tmp_path)), "BISECT_TOKEN": ""})
    assert done.returncode == 2
    assert done.stderr.startswith(f"bisect: error: --tokens-file {tokens}: ")
    assert problem in done.stderr
    assert done.stderr.count("\n") == 1
    assert ALICE not in done.stderr
    assert not db.exists()  # refused before the store was opened


def test_one_token_file_or_the_other(history: SyntheticHistory, tmp_path: Path) -> None:
    (tmp_path / "tokens.toml").write_text(TOKENS)
    (tmp_path / "token").write_text("t")
    args = ["serve", "--allow-repo", str(history.path), "--db", str(tmp_path / "b.db"),
            "--tokens-file", str(tmp_path / "tokens.toml"), "--token-file", str(tmp_path / "token")]  # fmt: skip
    done = bisect_cli(*args, env=service_env(**service_home(tmp_path)))
    assert (done.returncode, done.stderr) == (2, "bisect: error: --token-file and --tokens-file: give one of them\n")


def test_a_token_names_its_person_and_admins_are_marked(tmp_path: Path) -> None:
    (tmp_path / "tokens.toml").write_text(TOKENS)
    book = read_tokens_file(str(tmp_path / "tokens.toml"))
    assert [(p.name, p.admin) for p in map(book.who, (ALICE, BOB, CAROL)) if p] == [
        ("alice", False), ("bob", False), ("carol", True),
    ]  # fmt: skip
    assert [book.who(given) for given in ("", ALICE + "x", ALICE[:-1], ALICE.upper())] == [None] * 4
    single = TokenBook.single("only")
    assert single.who("only") is not None
    assert (single.who("only").name, single.who("only").admin) == ("default", True)  # type: ignore[union-attr]


def test_rerun_and_mark_over_the_api_and_the_cli_follow_the_owner_rules(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    bisect_id = service.post(submission(history), authorization=f"Bearer {ALICE}").json()["id"]
    report = service.wait_done(bisect_id)
    env = service_env(**service.home_env)  # type: ignore[attr-defined]
    as_bob, as_alice = {**env, "BISECT_TOKEN": BOB}, {**env, "BISECT_TOKEN": ALICE}
    remote = ["--server", service.base]

    for args, action in [(["run-at", "--bisect", str(bisect_id), "--step", "1"], "rerun a step of"),
                         (["mark", str(bisect_id), history.shas[1], "good"], "mark a commit of")]:  # fmt: skip
        refused = bisect_cli(*args, *remote, env=as_bob)
        assert (refused.returncode, refused.stderr) == (2, (
            f"bisect: error: {service.base}: 403 bob may not {action} bisect {bisect_id}: it is alice's; only its "
            "owner or an admin may\n"
        ))  # fmt: skip

    rerun = bisect_cli("run-at", "--bisect", str(bisect_id), "--step", "1", *remote, env=as_alice)
    assert rerun.returncode == 0, rerun.stderr
    first_sha = report["steps"][0]["sha"]
    assert rerun.stdout.startswith(f"bisect {bisect_id}: rerun at {first_sha[:12]} started;")

    def reruns() -> list[str]:
        return [s["verdict"] for s in service.report(bisect_id)["steps"] if s["purpose"] == "rerun"]

    wait_for(lambda: reruns() not in ([], ["running"]), what="the rerun's step")
    assert reruns() == [report["steps"][0]["verdict"]]

    marked = bisect_cli("mark", str(bisect_id), history.shas[1], "good", "--note", "seen", *remote, env=as_alice)
    assert marked.returncode == 0, marked.stderr
    assert marked.stdout.startswith(f"bisect {bisect_id}: {history.shas[1][:12]} marked good (step ")
    manual = [s for s in service.report(bisect_id)["steps"] if s["purpose"] == "manual"]
    assert [(s["sha"], s["detail"]) for s in manual] == [(history.shas[1], "marked good by alice: seen")]
    by = bisect_cli("mark", str(bisect_id), history.shas[1], "good", "--by", "eve", *remote, env=as_alice)
    assert (by.returncode, by.stderr) == (2, "bisect: error: --by: with --server the verdict is given by the token's "
                                             "person\n")  # fmt: skip

    admin = httpx.post(f"{service.base}/api/bisects/{bisect_id}/rerun", json={"rev": "main"},
                       headers={"Authorization": f"Bearer {CAROL}"}, timeout=60.0)  # fmt: skip
    assert admin.status_code == 202, admin.text
    assert admin.json() == {"id": bisect_id, "sha": history.shas[-1], "status": "started"}
    for body, problem in [({"step": "1"}, "step: "), ({}, "give a step's number or a revision"),
                          ({"step": 1, "rev": "main"}, "give a step's number or a revision")]:  # fmt: skip
        wrong = httpx.post(f"{service.base}/api/bisects/{bisect_id}/rerun", json=body,
                           headers={"Authorization": f"Bearer {ALICE}"}, timeout=60.0)  # fmt: skip
        assert (wrong.status_code, wrong.json()["detail"][: len(problem)]) == (400, problem)
    wait_for(lambda: len(reruns()) == 2 and "running" not in reruns(), what="the admin's rerun")


def test_a_mark_over_the_server_names_its_step_as_the_report_numbers_it_and_says_what_the_server_does(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    """The store's step ids run across every bisect it holds; the answer gives the report's number, and a reopened
    bisect is the server's to resume (no `bisect resume`, which would need the server's store); a mark that agrees with
    the answer, or on a cancelled bisect, is stored and changes nothing."""
    alice = f"Bearer {ALICE}"
    for _ in range(2):  # the second bisect's steps are not the store's first
        bisect_id = service.post(submission(history), authorization=alice).json()["id"]
        service.wait_done(bisect_id)
    env = {**service_env(**service.home_env), "BISECT_TOKEN": ALICE}  # type: ignore[attr-defined]
    culprit = history.shas[5]
    marked = bisect_cli("mark", str(bisect_id), culprit, "good", "--server", service.base, env=env)
    assert marked.returncode == 0, marked.stderr
    report = service.wait_done(bisect_id)
    [number] = [i for i, s in enumerate(report["steps"], 1) if s["purpose"] == "manual"]
    assert marked.stdout == (
        f"bisect {bisect_id}: {culprit[:12]} marked good (step {number}); this changes the answer (good at or after "
        f"the first bad commit): bisect {bisect_id} is running again; this server resumes it\n"
    )
    assert (report["status"], report["first_bad"]["sha"]) == ("found", history.shas[6])
    running_id = service.post(submission(history, recipe="slow"), authorization=alice).json()["id"]
    marked = bisect_cli("mark", str(running_id), history.shas[1], "good", "--server", service.base, env=env)
    assert marked.stdout.endswith(f"bisect {running_id} is running: its coordinator takes the verdict in within a "
                                  "second\n"), marked.stderr  # fmt: skip
    agrees = bisect_cli("mark", str(bisect_id), history.shas[7], "bad", "--server", service.base, env=env)
    assert agrees.stdout.endswith(f"; stored; it agrees with the answer of bisect {bisect_id}\n"), agrees.stderr
    assert service.delete(running_id, authorization=alice).status_code == 200
    kept = bisect_cli("mark", str(running_id), history.shas[2], "good", "--server", service.base, env=env)
    assert kept.stdout.endswith(f"; stored; bisect {running_id} stays cancelled\n"), kept.stderr
