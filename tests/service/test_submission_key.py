"""A submission's key on a real `bisect serve`: a key its person sent before is answered with the job it made, never a
second one; identical submissions without a key, or another person's with the same key, are jobs of their own; and
the client sends an answer it lost again with the same key, so that a retry makes no second job."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from service_process import ServiceProcess, running_team_service
from synthetic import SyntheticHistory, culprit_history

from bisector.service.client import ServiceClient

pytestmark = pytest.mark.xdist_group("service")

ALICE, BOB = "alice-token-1", "bob-token-2"
TOKENS = f'alice = "{ALICE}"\nbob = "{BOB}"\n'


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> SyntheticHistory:
    return culprit_history(tmp_path_factory.mktemp("hist") / "repo", 8, 5, sleep_s=0.05)


@pytest.fixture(scope="module")
def service(history: SyntheticHistory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with running_team_service(tmp_path_factory.mktemp("home"), history.path, TOKENS) as served:
        yield served


def submission(history: SyntheticHistory) -> dict[str, object]:
    return {"repo": str(history.path), "good": history.shas[0], "bad": "main", "recipe": "synthetic", "explain": False}


def post(service: ServiceProcess, history: SyntheticHistory, token: str, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", **({"Idempotency-Key": key} if key else {})}
    return httpx.post(f"{service.base}/api/bisects", json=submission(history), headers=headers, timeout=120.0)


def test_a_repeated_key_is_answered_with_the_job_it_made(service: ServiceProcess, history: SyntheticHistory) -> None:
    before = service.count()
    first = post(service, history, ALICE, "key-1")
    again = post(service, history, ALICE, "key-1")
    assert (first.status_code, again.status_code) == (201, 200), (first.text, again.text)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["owner"] == "alice"
    bobs = post(service, history, BOB, "key-1")  # a key is its person's own
    unkeyed = [post(service, history, ALICE) for _ in range(2)]  # identical submissions on purpose
    assert [r.status_code for r in (bobs, *unkeyed)] == [201] * 3
    ids = {first.json()["id"], bobs.json()["id"], *(r.json()["id"] for r in unkeyed)}
    assert len(ids) == 4
    assert service.count() == before + 4
    for bisect_id in ids:
        service.wait_done(bisect_id)


class AnswerLostOnce(httpx.BaseTransport):
    """Carries every request to the server; the first one's answer is lost on the way back (a read timeout)."""

    def __init__(self) -> None:
        self.network = httpx.HTTPTransport()
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        response = self.network.handle_request(request)
        if len(self.keys) == 1:
            response.read()
            response.close()
            raise httpx.ReadTimeout("the answer was lost", request=request)
        return response

    def close(self) -> None:
        self.network.close()


def test_the_client_sends_a_submission_whose_answer_was_lost_again_and_gets_its_one_job(
    service: ServiceProcess, history: SyntheticHistory
) -> None:
    before = service.count()
    transport = AnswerLostOnce()
    with ServiceClient(service.base, ALICE, transport=transport) as client:
        answer = client.submit(submission(history))
    assert len(transport.keys) == 2
    assert transport.keys[0] is not None
    assert transport.keys[0] == transport.keys[1]
    assert service.count() == before + 1
    assert service.job(answer["id"])["owner"] == "alice"
    service.wait_done(answer["id"])


def test_each_submit_makes_its_own_key(service: ServiceProcess, history: SyntheticHistory) -> None:
    transport = AnswerLostOnce()
    transport.keys.append(None)  # no answer is lost
    with ServiceClient(service.base, ALICE, transport=transport) as client:
        ids = [client.submit(submission(history))["id"] for _ in range(2)]
    assert len(set(ids)) == 2
    assert len(set(transport.keys[1:])) == 2
    for bisect_id in ids:
        service.wait_done(bisect_id)
