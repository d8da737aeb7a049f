"""The podman fixture of the container image tests (tests/images/container_repo.py makes their images)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from container_repo import HOST_CONF, podman_cmd, probe


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A template naming this module's images (removed at the end); skips when no container can run here. Where
    podman's own settings fail, this host kind's containers.conf (runc, lower rlimits) is tried."""
    into = tmp_path_factory.mktemp("podman")
    with pytest.MonkeyPatch.context() as patch:
        why = probe(into)
        if why and "CONTAINERS_CONF" not in os.environ:
            patch.setenv("CONTAINERS_CONF", str(HOST_CONF))
            why = probe(into)
        if why:
            pytest.skip(f"no container can run here: {why}")
        patch.setenv("BISECT_CONTAINER_PULL_TIMEOUT", "60")  # localhost has no registry: a pull fails at once
        patch.setenv("BISECT_CONTAINER_BUILD_ARGS", "--layers=false")  # a failed build leaves no layer behind
        repository = f"localhost/bisect-test-stack-{uuid.uuid4().hex[:8]}"
        yield repository + ":{short}"
        listed = podman_cmd("images", "--format", "{{.Repository}}:{{.Tag}}", repository, check=False)
        for image in listed.stdout.split():
            podman_cmd("rmi", "--force", image, check=False)
