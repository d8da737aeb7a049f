"""A commit whose Containerfile's RUN never ends, on a base image of its own (its working containers are named
after it: podman calls them `<base>-working-container[-N]`), and the host processes and working containers it
leaves, for the tests of builds stopped mid-RUN."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bisect_helpers import processes_with
from container_repo import BASE, podman_cmd
from image_repo import commit, init_repo

from bisector.vocab.metric import MetricSpec
from bisector.workers.executor import StepRequest


@dataclass(frozen=True)
class EndlessBuild:
    token: str  # in the RUN step's command line: its processes are those whose command line holds it
    base: str  # the base image, this build's alone
    repo: Path
    sha: str

    def running(self) -> list[int]:
        """Live processes of the RUN step (not zombies)."""
        return processes_with(self.token)

    def working_containers(self) -> list[str]:
        """The build's working containers that podman has (`podman ps --external` lists them)."""
        listed = podman_cmd("ps", "--external", "--all", "--format", "{{.Names}}", check=False).stdout.split()
        prefix = self.base.rsplit("/", 1)[-1] + "-working-container"
        return [name for name in listed if name.startswith(prefix)]

    def request(self, template: str, log: Path, timeout_s: float = 600.0) -> StepRequest:
        """The step that builds the commit's image (its test never runs), with podman's settings of this host."""
        engine_env = {k: os.environ[k] for k in ("CONTAINERS_CONF", "BISECT_CONTAINER_BUILD_ARGS") if k in os.environ}
        return StepRequest(
            step_id=1, bisect_id=1, sha=self.sha, attempt=1, repo=str(self.repo), run_cmd="true", env=engine_env,
            metric=MetricSpec(), log_path=str(log), container=template.format(short=self.sha[:12]), timeout_s=timeout_s,
        )  # fmt: skip


@contextmanager
def endless_build(path: Path, *, chatty: bool = False) -> Iterator[EndlessBuild]:
    """The repository at path, one commit whose RUN prints a token and then loops for ever (chatty: printing a line
    every 0.1 s, also appended to /count/ticks where a test mounts a folder at /count); whatever of it is left at
    the end is killed and removed."""
    token = f"bisect-build-{uuid.uuid4().hex[:12]}"
    base = f"localhost/{token}-base"
    podman_cmd("tag", BASE, base)
    loop = "echo tick; if [ -d /count ]; then echo tick >> /count/ticks; fi; sleep 0.1" if chatty else "sleep 1"
    containerfile = f"FROM {base}\nRUN echo {token} && while true; do {loop}; done\n"
    init_repo(path)
    build = EndlessBuild(token, base, path, commit(path, "a build that never ends", {"Containerfile": containerfile}))
    try:
        yield build
    finally:
        for pid in build.running():
            os.kill(pid, 9)
        for name in build.working_containers():
            podman_cmd("rm", "--force", name, check=False)
        podman_cmd("rmi", "--force", base, check=False)
