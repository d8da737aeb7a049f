"""ContainerEngine: the container engine's command lines (podman's by default) for a step's image and container;
the image reference a template names at a commit, and the command line that reruns a step's test by hand.

The engine and its extra flags come from the environment: BISECT_CONTAINER_ENGINE (default podman),
BISECT_CONTAINER_RUN_ARGS and BISECT_CONTAINER_BUILD_ARGS (shell words), BISECT_CONTAINER_PULL_TIMEOUT (seconds a
pull may take; 0: never pull), BISECT_CONTAINER_GPUS (cdi, the default, or env).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bisector.vocab.images import check_container_template, container_reference

__all__ = [
    "ContainerEngine", "built_reference", "check_container_template", "container_reference", "reproduce_in_container"
]  # fmt: skip

CONTAINERFILES = ("Containerfile", "Dockerfile")
BUILT_LABEL = "org.gpu-bisect.built-at"  # set on the images gpu-bisect builds: the commit they were built at
STEP_LABEL = "org.gpu-bisect.step"  # set on each step's container: bisect id, step id, attempt
WORKTREE_MOUNT = "/bisect/worktree"
REMOVE_RETRY_S = 0.5  # between attempts to remove a container that is still there
ENGINE_CALL_TIMEOUT_S = 120.0  # an inspect or a removal that takes longer is given up
DEFAULT_PULL_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ContainerEngine:
    binary: str = "podman"
    run_args: tuple[str, ...] = ()
    build_args: tuple[str, ...] = ()
    pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S
    gpus: str = "cdi"  # cdi: --device nvidia.com/gpu=N; env: NVIDIA_VISIBLE_DEVICES (the NVIDIA runtime hook)
    env: Mapping[str, str] | None = None  # the engine's environment (the step's: its env may configure the engine)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ContainerEngine:
        try:
            pull_timeout_s = float(env.get("BISECT_CONTAINER_PULL_TIMEOUT", DEFAULT_PULL_TIMEOUT_S))
        except ValueError:
            pull_timeout_s = DEFAULT_PULL_TIMEOUT_S
        return cls(
            binary=env.get("BISECT_CONTAINER_ENGINE") or "podman",
            run_args=tuple(shlex.split(env.get("BISECT_CONTAINER_RUN_ARGS", ""))),
            build_args=tuple(shlex.split(env.get("BISECT_CONTAINER_BUILD_ARGS", ""))),
            pull_timeout_s=pull_timeout_s,
            gpus=env.get("BISECT_CONTAINER_GPUS", "cdi"),
            env=dict(env),
        )

    def inspect(self, reference: str) -> tuple[str, str] | None:
        """(image id, the commit gpu-bisect built it at or "") of a local image; None when the engine has none."""
        template = f'{{{{.Id}}}} {{{{index .Labels "{BUILT_LABEL}"}}}}'
        try:
            done = subprocess.run(
                [self.binary, "image", "inspect", "--format", template, reference],
                capture_output=True, text=True, env=self.env, timeout=ENGINE_CALL_TIMEOUT_S, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode != 0 or not done.stdout.strip():
            return None
        image_id, _, built_at = done.stdout.strip().partition(" ")
        return image_id, "" if built_at == "<no value>" else built_at.strip()

    def remove_container(self, name: str) -> None:
        """Stop and remove the container at once, if it is there; returns once the engine no longer has it (a
        container still being created when its client was killed can outlive the first `rm`), or after
        ENGINE_CALL_TIMEOUT_S."""
        deadline = time.monotonic() + ENGINE_CALL_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run(
                    [self.binary, "rm", "--force", "--ignore", "--time", "0", name],
                    capture_output=True, env=self.env, timeout=ENGINE_CALL_TIMEOUT_S, check=False,
                )  # fmt: skip
                exists = subprocess.run(
                    [self.binary, "container", "exists", name],
                    capture_output=True, env=self.env, timeout=ENGINE_CALL_TIMEOUT_S, check=False,
                )  # fmt: skip
                if exists.returncode == 1:  # 0: still there; anything else: the engine cannot tell
                    return
            if time.monotonic() >= deadline:
                return
            time.sleep(REMOVE_RETRY_S)

    def guard(self, name: str, client_pid: int) -> None:
        """Remove the container once the engine's client is gone, however it went (its worker killed outright, its
        process group reaped): a shell of its own session outlives both, polling the pid each second."""
        loop = '(while kill -0 "$1" 2>/dev/null; do sleep 1; done; shift; exec "$@") >/dev/null 2>&1 </dev/null &'
        argv = ["sh", "-c", loop, "sh", str(client_pid), self.binary, "rm", "--force", "--ignore", "--time", "0", name]
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(argv, env=self.env, start_new_session=True, timeout=ENGINE_CALL_TIMEOUT_S, check=False)

    def pull_command(self, reference: str) -> str:
        return shlex.join([self.binary, "pull", "--quiet", reference])

    def build_command(self, reference: str, containerfile: str, sha: str) -> str:
        argv = [self.binary, "build", *self.build_args, "--label", f"{BUILT_LABEL}={sha}", "-f", containerfile]
        return shlex.join([*argv, "-t", reference, "."])

    def run_command(
        self, reference: str, worktree: Path, env: Mapping[str, str], gpus: tuple[int, ...], run_cmd: str,
        *, name: str | None = None, label: str | None = None,
    ) -> str:  # fmt: skip
        """The shell command line that runs run_cmd (as `sh -c`) in a container of the image, worktree mounted at
        WORKTREE_MOUNT, named name and labelled with the step's label where given. Values of env are not in it:
        `-e NAME` takes each from the engine client's environment."""
        argv = [self.binary, "run", "--rm"]
        if name is not None:
            argv += ["--name", name]
        if label is not None:
            argv += ["--label", f"{STEP_LABEL}={label}"]
        argv += [*self.run_args, "-v", f"{worktree}:{WORKTREE_MOUNT}", "-w", WORKTREE_MOUNT]
        for key in env:
            argv += ["-e", key]
        if gpus and self.gpus == "env":
            argv += ["-e", f"NVIDIA_VISIBLE_DEVICES={','.join(map(str, gpus))}"]
        elif gpus:
            for gpu in gpus:
                argv += ["--device", f"nvidia.com/gpu={gpu}"]
        return shlex.join([*argv, reference, "sh", "-c", run_cmd])


def built_reference(reference: str, recipe: str) -> str:
    """The reference gpu-bisect builds the image named reference under, for a recipe (its hash): the reference's tag
    (latest where it names none) with `-bisect-RECIPE` appended, e.g. `stack:SHA` -> `stack:SHA-bisect-RECIPE`."""
    name, colon, tag = reference.rpartition(":")
    if not colon or "/" in tag:  # a colon before the last slash is a registry's port
        name, tag = reference, "latest"
    return f"{name}:{tag}-bisect-{recipe}"


def outliving_its_reader(command: str) -> str:
    """command (a shell command line), its output relayed so that it never writes to a pipe whose reader is gone.

    A worker killed mid-build closes its end of the step's output pipe; podman, killed by SIGPIPE at its next line,
    would leave its RUN step running and its working container behind, beyond any reaper's reach. Relayed, it
    builds on until the dead worker's reaper kills its RUN step, then removes its working container itself. The relay
    passes the output on while it can and then drains it; the command's exit status is kept."""
    return f"set -o pipefail; {command} 2>&1 | {{ cat; cat >/dev/null; }}"


def reproduce_in_container(
    reference: str, workdir: str, env: Mapping[str, str], gpus: tuple[int, ...], run_cmd: str
) -> str:
    """The engine command line that runs a step's test by hand in workdir (a worktree at its commit): the one a
    step runs (run_command), with no name or label, the engine's settings taken from this
    process's environment and env. Its env values are the caller's to export."""
    engine = ContainerEngine.from_env({**os.environ, **env})
    return engine.run_command(reference, Path(workdir), env, gpus, run_cmd)
