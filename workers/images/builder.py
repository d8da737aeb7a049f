"""Make or reuse the image a step needs, and hold it (a shared lock) while the step runs on it.

The same image wanted by several steps at once is built once: builders take the image's exclusive lock and
re-read its manifest under it; one still waiting for that lock when the image turns ready uses it at once (shared),
not when the step that made it ends. A failed build is kept (status failed, with its log's tail): steps at commits
with that key skip until `bisect images rm` removes it. A cancelled, timed-out or killed build leaves nothing.
A ready image is checked against the record of what its build produced before each reuse
(workers/images/contents.py); one that differs is marked damaged, never used, and made again by the first step
that gets its exclusive lock, whose image tells what it replaced.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from bisector.vocab.domain import ErrorKind, ImageInfo
from bisector.vocab.errors import RepoError
from bisector.vocab.gitrepo import GitRepo
from bisector.vocab.patches import PatchError, patched_tree
from bisector.vocab.paths import remove_tree, tree_size
from bisector.workers.build_outcome import BuildEnd, BuildOutcome, infra_in_log, judge_build
from bisector.workers.gpus import gpu_architectures
from bisector.workers.images.cache import (
    INCOMING_PREFIX,
    ImageCache,
    ImageManifest,
    ImageStatus,
    LockTimeoutError,
    ManifestFormatError,
    lock_shared,
    now_iso,
    template_lock,
)
from bisector.workers.images.contents import Contents, ImageDamageError, check_contents, record_contents
from bisector.workers.images.key import ImageKey, ImageRecipe, image_key
from bisector.workers.images.transfer import (
    CopyStoppedError,
    ImageCopyError,
    ImagePeer,
    base_python,
    receive,
    relocate,
    relocate_listed,
)
from bisector.workers.output import StepLog
from bisector.workers.process import run_shell

Evict = Callable[[int, frozenset[str]], list[str]]  # (max bytes, images kept) -> the ids removed
_MAKING_TEMPLATE = threading.Lock()
UV_VENV_TIMEOUT_S = 300  # one hung uv would hold every build of the process behind _MAKING_TEMPLATE
SEED_PTH = "_gpu_bisect_base.pth"  # makes the base environment's packages (torch) importable in an image's venv


@dataclass(frozen=True)
class PreparedImage:
    """What preparing a step's image gave: a ready image (info, run_dir, env), or why there is none."""

    info: ImageInfo | None = None
    run_dir: Path | None = None  # where the step's test runs: the commit's tree with its build outputs
    env: dict[str, str] = field(default_factory=dict)  # added to the step's environment
    naming_folder: tuple[str, ...] = ()  # its text files and links naming its folder (contents.Contents)
    named_folder: str = ""  # the folder they name ("": its own): another where the cache root moved since
    failed_build: str = ""  # the build failed (now or before): the step skips with this
    exit_code: int | None = None
    cancelled: bool = False
    timed_out: bool = False
    error: str = ""  # the harness could not make the image (export, venv, a build killed by a signal)
    error_kind: ErrorKind | None = None  # the error's kind where the build's end told it (a signal, a signature)

    @property
    def ready(self) -> bool:
        return self.run_dir is not None


@dataclass(frozen=True)
class BuildJob:
    """One step's wish for an image."""

    repo: str
    sha: str
    build_cmd: str | None
    recipe: ImageRecipe
    env: dict[str, str]
    log: StepLog
    timeout_s: float
    should_cancel: Callable[[], bool] = lambda: False
    on_start: Callable[[int], None] = lambda pgid: None
    cancel_fd: int | None = None
    infra_patterns: tuple[str, ...] = ()  # a failed build printing one is infrastructure: an error, no record
    peer: ImagePeer | None = None  # a node that may hold the image: copied from there rather than built
    keep_failure: bool = True  # False (a build ahead): a failed build leaves nothing, and the step builds it again
    opened: GitRepo | None = None  # repo, opened already by the caller (a worker's, the build-ahead process's)


class ImageBuilder:
    def __init__(self, cache: ImageCache | None = None, evict: Evict | None = None) -> None:
        """evict: applies the cache's LRU cap once an image is made, keeping the given ones (default: the cache's
        own pass; a process that makes many images at once passes one pass for all of them)."""
        self.cache = cache if cache is not None else ImageCache()
        self.evict = evict if evict is not None else self.cache.evict

    @contextlib.contextmanager
    def prepare(self, job: BuildJob) -> Iterator[PreparedImage]:
        """Yield the ready image of job's commit (reused or built now), held shared until the block ends."""
        opened = job.opened or GitRepo(job.repo)
        gpu_archs = gpu_architectures(job.env.get("CUDA_VISIBLE_DEVICES"))  # what the build's CUDA will see
        key = image_key(job.repo, job.sha, job.build_cmd, job.recipe, opened, gpu_archs)
        deadline = time.monotonic() + job.timeout_s
        while True:
            manifest = self.cache.manifest(key.id)
            if manifest is not None and manifest.status is ImageStatus.FAILED and self._failure_stands(job, manifest):
                yield self._failed(manifest)
                return
            shared = manifest is not None and manifest.status is ImageStatus.READY
            try:
                with self.cache.lock(
                    key.id, shared=shared, timeout_s=max(deadline - time.monotonic(), 0),
                    should_cancel=functools.partial(self._stop_waiting, job, key.id, shared),
                ) as fd:  # fmt: skip
                    current = self.cache.manifest(key.id)
                    if current is not None and current.status is ImageStatus.READY:
                        try:
                            contents = check_contents(self.cache.image_dir(key.id), current.contents)
                        except ImageDamageError as exc:
                            job.log.note(f"# image {key.id}: not used, {exc}: it is made again\n")
                            current = replace(current, status=ImageStatus.DAMAGED, damage=str(exc))
                            self.cache.write_manifest(current)
                        else:
                            job.log.note(f"# image {key.id}: reusing the one built at {current.sha[:12]}\n")
                            yield self._ready(self.cache.touch(current), contents, source="cache", reused=True)
                            return
                    if (
                        current is not None
                        and current.status is ImageStatus.FAILED
                        and self._failure_stands(job, current)
                    ):
                        yield self._failed(current)
                        return
                    if shared:  # it was removed, found damaged or is rebuilt meanwhile: look again
                        continue
                    replaced = current.damage if current is not None and current.status is ImageStatus.DAMAGED else ""
                    prepared = self._copy(job, key, deadline, replaced) or self._build(
                        job, opened, key, deadline, replaced
                    )
                    if prepared.ready:
                        lock_shared(fd)
                    yield prepared
                    return
            except LockTimeoutError:
                if self._made_meanwhile(key.id, shared) and not job.should_cancel() and time.monotonic() < deadline:
                    continue
                yield PreparedImage(cancelled=job.should_cancel(), timed_out=not job.should_cancel())
                return

    def _made_meanwhile(self, image_id: str, shared: bool) -> bool:
        """Whether the image, wanted with its exclusive lock, was made meanwhile (by another step, which runs on it
        now with its shared lock): then it is used as well, without waiting for that step to end."""
        if shared:
            return False
        manifest = self.cache.manifest(image_id)
        return manifest is not None and manifest.status is ImageStatus.READY

    def _stop_waiting(self, job: BuildJob, image_id: str, shared: bool) -> bool:
        return job.should_cancel() or self._made_meanwhile(image_id, shared)

    def _copy(self, job: BuildJob, key: ImageKey, deadline: float, replaced: str) -> PreparedImage | None:
        """The image copied from job.peer (workers/images/transfer.py), or None where the peer has none to give or
        the copy failed or differs from the holder's record of its contents: then it is built here."""
        if job.peer is None:
            return None
        stop = lambda: job.should_cancel() or time.monotonic() >= deadline  # noqa: E731
        try:
            offer = job.peer.offer(key.id, stop)
        except CopyStoppedError as exc:
            job.log.note(f"# image {key.id}: asking another node for it {exc}: the step was cancelled or timed out\n")
            return PreparedImage(cancelled=job.should_cancel(), timed_out=not job.should_cancel())
        except ImageCopyError as exc:
            job.log.note(f"# image {key.id}: could not ask another node for it ({exc}); building it here\n")
            return None
        if offer is None:
            return None
        try:
            held = ImageManifest.from_json(offer.manifest)
        except ManifestFormatError as exc:
            job.log.note(
                f"# image {key.id}: {offer.node} holds it, but its manifest is of another format ({exc}); "
                "building it here\n"
            )
            return None
        if offer.base_python != base_python():
            job.log.note(
                f"# image {key.id}: {offer.node} holds it, but its venv is made on {offer.base_python}, not "
                f"{base_python()}; building it here\n"
            )
            return None
        folder = self.cache.image_dir(key.id)
        incoming = incoming_dir(folder)
        job.log.note(f"# image {key.id}: copying it from {offer.node} ({offer.folder})\n")
        started, started_at = time.monotonic(), now_iso()
        remove_tree(incoming)
        try:
            receive(job.peer.chunks(key.id, stop), incoming, stop)
            copied = check_contents(incoming, held.contents)  # every file is a new inode here: each is hashed
            relocate(incoming, copied.folder or offer.folder, str(folder))
            remove_tree(folder)  # what a killed builder left
            incoming.rename(folder)
        except CopyStoppedError as exc:
            job.log.note(f"# image {key.id}: the copy from {offer.node} {exc}: the step was cancelled or timed out\n")
            return PreparedImage(cancelled=job.should_cancel(), timed_out=not job.should_cancel())
        except (ImageCopyError, ImageDamageError, OSError) as exc:
            job.log.note(f"# image {key.id}: the copy from {offer.node} failed ({_describe(exc)}); building it here\n")
            return None
        finally:
            remove_tree(incoming)  # a failed or stopped copy's part (renamed away when whole)
        ready = replace(
            held, node=self.cache.node, created=started_at, last_used=started_at,
            build_s=time.monotonic() - started, size_bytes=tree_size(folder), source="copied", replaced=replaced,
        )  # fmt: skip
        return self._made(job, ready, f"copied from {offer.node}", source="copied")

    def _build(self, job: BuildJob, repo: GitRepo, key: ImageKey, deadline: float, replaced: str) -> PreparedImage:
        folder = self.cache.image_dir(key.id)
        remove_tree(folder)  # what a killed builder left
        remove_tree(incoming_dir(folder))  # and a killed copy
        try:
            source = patched_tree(repo, job.sha, job.recipe.patches) if job.recipe.patches else job.sha
        except PatchError as exc:
            return PreparedImage(failed_build=str(exc))
        except RepoError as exc:
            return PreparedImage(error=f"could not prepare image {key.id} at {job.sha[:12]}: {_describe(exc)}")
        started_at = now_iso()
        building = ImageManifest(
            id=key.id, key=key.to_json(), repo=job.repo, sha=job.sha, node=self.cache.node,
            status=ImageStatus.BUILDING, created=started_at, last_used=started_at, replaced=replaced,
        )  # fmt: skip
        job.log.note(f"# image {key.id}: building at {job.sha[:12]} in {folder}\n")
        started = time.monotonic()
        try:
            self.cache.write_manifest(building)
            repo.export_tree(source, folder / "src")
            if job.recipe.mode == "venv":
                make_venv(folder / "venv", self.cache.templates_dir)
        except (OSError, subprocess.SubprocessError, RepoError) as exc:  # a hung uv times out
            remove_tree(folder)
            return PreparedImage(error=f"could not prepare image {key.id} at {job.sha[:12]}: {_describe(exc)}")
        env = {**job.env, **self.image_env(folder, job.env)}
        build = None
        remaining_s = deadline - time.monotonic()
        from_artifact = job.recipe.mode == "venv" and install_artifact(job, folder / "venv", remaining_s)
        if job.build_cmd and not from_artifact:
            job.log.note(f"$ {job.build_cmd}\n")
            process = run_shell(
                job.build_cmd, folder / "src", env, job.log, max(deadline - time.monotonic(), 0.001),
                should_cancel=job.should_cancel, on_start=job.on_start, cancel_fd=job.cancel_fd,
            )  # fmt: skip
            build = judge_build(process, "image build", job.infra_patterns)
            if build.end not in (BuildEnd.SUCCEEDED, BuildEnd.FAILED):
                remove_tree(folder)  # not the commit's fault: nothing is kept
                why = "" if build.end in (BuildEnd.CANCELLED, BuildEnd.TIMED_OUT) else build.why
                return PreparedImage(
                    cancelled=process.cancelled,
                    timed_out=process.timed_out,
                    error=why,
                    exit_code=build.exit_code,
                    error_kind=build.error_kind,
                )
        build_s = time.monotonic() - started
        if build is not None and build.end is BuildEnd.FAILED and not job.keep_failure:
            remove_tree(folder)  # its own conditions (no GPU, CPUs shared): only a step's build is the commit's
            return PreparedImage(failed_build=build.why, exit_code=build.exit_code)
        if build is not None and build.end is BuildEnd.FAILED:
            failed = replace(
                building, status=ImageStatus.FAILED, build_s=build_s, size_bytes=0,
                log_tail=build.process.output.tail(),
            )  # fmt: skip
            remove_tree(folder / "src")
            remove_tree(folder / "venv")
            self.cache.write_manifest(failed)
            return self._failed(failed, build)
        ready = replace(building, status=ImageStatus.READY, build_s=build_s, size_bytes=tree_size(folder))
        if from_artifact:
            return self._made(job, ready, "installed from its artifact", source="artifact")
        return self._made(job, ready, "built", source="built")

    def _made(self, job: BuildJob, ready: ImageManifest, how: str, *, source: str) -> PreparedImage:
        """Record an image just made on this node (built, installed or copied) and what it holds, apply the LRU cap,
        and use it."""
        folder = self.cache.image_dir(ready.id)
        try:
            contents = record_contents(folder)
        except OSError as exc:
            remove_tree(folder)
            return PreparedImage(error=f"could not record what image {ready.id} holds: {_describe(exc)}")
        ready = replace(ready, contents=contents.digest)
        self.cache.write_manifest(ready)
        evicted = self.evict(job.recipe.max_bytes, frozenset({ready.id}))
        job.log.note(f"# image {ready.id}: {how} in {ready.build_s:.1f}s ({ready.size_bytes} bytes)\n")
        prepared = self._ready(ready, contents, source=source, reused=False)
        assert prepared.info is not None
        return replace(prepared, info=replace(prepared.info, evicted=tuple(evicted)))

    def image_env(self, folder: Path, base: dict[str, str]) -> dict[str, str]:
        """The variables a build or a test on the image in folder sees (added to the step's environment)."""
        env = {
            "BISECT_IMAGE_ID": folder.name,
            "BISECT_IMAGE_DIR": str(folder / "src"),
            "TRITON_CACHE_DIR": str(folder / "triton"),
            "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
            "CCACHE_DIR": str(self.cache.ccache_dir),
            "CCACHE_BASEDIR": str(folder / "src"),  # paths below it are hashed relative: images share hits
            "CCACHE_NOHASHDIR": "1",
        }
        venv = folder / "venv"
        if venv.is_dir():
            env["VIRTUAL_ENV"] = str(venv)
            env["BISECT_IMAGE_PYTHON"] = str(venv / "bin" / "python")
            env["PATH"] = f"{venv / 'bin'}{os.pathsep}{base.get('PATH', os.defpath)}"
            if not shutil.which("uv", path=env["PATH"]):  # a build may `uv pip install` into the venv
                env["PATH"] += f"{os.pathsep}{Path(uv_binary()).parent}"
        if shutil.which("ccache", path=base.get("PATH")):
            env.setdefault("CC", base.get("CC") or "ccache gcc")
            env.setdefault("CXX", base.get("CXX") or "ccache g++")
        return env

    def _ready(self, manifest: ImageManifest, contents: Contents, *, source: str, reused: bool) -> PreparedImage:
        folder = self.cache.image_dir(manifest.id)
        return PreparedImage(
            info=_info(manifest, folder, source=source, reused=reused),
            run_dir=folder / "src",
            env=self.image_env(folder, dict(os.environ)),
            naming_folder=contents.naming_folder,
            named_folder=contents.folder,
        )

    @staticmethod
    def _failure_stands(job: BuildJob, manifest: ImageManifest) -> bool:
        """Whether a failed image's build is the commit's failure for this job too: not where its log tail shows one
        of the job's infrastructure signatures (another bisect, with other patterns, stored it); then it is built
        again, with a note why."""
        signature = infra_in_log(manifest.log_tail, job.infra_patterns)
        if signature is None:
            return True
        job.log.note(
            f"# image {manifest.id}: its failed build printed {signature!r}, an infrastructure signature of this "
            "bisect: building it again\n"
        )
        return False

    def _failed(self, manifest: ImageManifest, build: BuildOutcome | None = None) -> PreparedImage:
        """The failed image of manifest: its build just now, or (without build) an earlier one, reused."""
        folder = self.cache.image_dir(manifest.id)
        if build is None:
            why = (
                f"image {manifest.id} failed to build at {manifest.sha[:12]} "
                f"(`bisect images rm {manifest.id}` to build it again)"
            )
        else:
            why = build.why
        return PreparedImage(
            info=_info(manifest, folder, source="cache" if build is None else "built", reused=build is None),
            failed_build=f"{why}\n{manifest.log_tail}".strip(),
            exit_code=None if build is None else build.exit_code,
        )


def _info(manifest: ImageManifest, folder: Path, *, source: str, reused: bool) -> ImageInfo:
    return ImageInfo(
        id=manifest.id, source=source, reused=reused, build_s=manifest.build_s, status=manifest.status.value,
        sha=manifest.sha, path=str(folder), node=manifest.node, size_bytes=manifest.size_bytes, key=manifest.key,
        created=manifest.created, last_used=manifest.last_used, log_tail=manifest.log_tail, made_as=manifest.source,
        replaced=manifest.replaced,
    )  # fmt: skip


def install_artifact(job: BuildJob, venv: Path, timeout_s: float) -> bool:
    """Install the commit's prebuilt wheels (--artifact) into the image's venv instead of running the build.
    False, with a note in the log, when there is none for this commit, the image's tree is patched (the wheels were
    built from the commit's own tree), or they do not install within timeout_s: the build runs then."""
    location = job.recipe.artifact_at(job.sha)
    if location is None:
        return False
    if job.recipe.patches:
        job.log.note(f"# the artifact at {location} was built without this image's patches: building\n")
        return False
    wheels = artifact_wheels(location)
    if not wheels:
        job.log.note(f"# no artifact at {location}: building\n")
        return False
    job.log.note(f"$ uv pip install --no-deps {' '.join(wheels)}\n")
    try:
        done = subprocess.run(
            [uv_binary(), "pip", "install", "--quiet", "--no-deps", "--python", str(venv / "bin" / "python"), *wheels],
            capture_output=True, text=True, timeout=max(timeout_s, 0.001), check=False,
        )  # fmt: skip
        failure = "" if done.returncode == 0 else " ".join(done.stderr.split())[:300]
    except (OSError, subprocess.TimeoutExpired) as exc:
        failure = _describe(exc)
    if failure:
        job.log.note(f"# the artifact did not install ({failure}): building\n")
        return False
    return True


def artifact_wheels(location: str) -> list[str]:
    """The wheels at an artifact location: a URL as it is (uv fetches it), a local wheel, or a local directory's
    wheels; none where the path does not exist."""
    if "://" in location and not location.startswith("file://"):
        return [location]
    local = Path(location.removeprefix("file://"))
    if local.is_dir():
        return sorted(str(wheel) for wheel in local.glob("*.whl"))
    return [str(local)] if local.is_file() else []


@functools.cache
def uv_binary() -> str:
    """The uv executable: the `uv` package's, else the first on PATH (a package installed with --target keeps
    its binary where find_uv_bin does not look)."""
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise OSError("uv is not installed: pip install 'gpu-bisect[images]'") from None
        return found


def incoming_dir(folder: Path) -> Path:
    """Where a copy of the image in folder is unpacked before it is renamed into place (the holder of the image's
    exclusive lock owns it; what a killed copy left is removed by the next to copy or build the image, or by the
    next LRU pass)."""
    return folder.with_name(f"{INCOMING_PREFIX}{folder.name}")


def make_venv(venv: Path, templates: Path) -> None:
    """A venv of this interpreter as uv makes it, seeded with this environment's packages (a .pth after its own
    site-packages), so the base's torch is used, not downloaded again; packages the build installs come first.

    The first venv of an interpreter and uv is made by uv and kept in templates (with its files naming its folder
    rewritten to name the template's); later ones are copies of that one, rewritten to name their own folder: uv
    spends about 12 ms of CPU on a venv, a copy a few, and the images built ahead of a round are made dozens at
    once. A template is named after the interpreter, uv's binary and templates' path, so that another uv or
    Python, or a moved cache root, gets a template of its own. The template's shared lock is held throughout, and
    its mtime marks its use: the LRU pass removes only templates unused for a while (workers/images/cache.py)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    name = _template_name(str(templates))
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(template_lock(templates, name, shared=True))
        except OSError:  # no template can be kept (a file where its folder would be): uv makes this venv
            _uv_venv(venv)
        else:
            _from_template(venv, templates / name)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (venv / "lib" / version / "site-packages" / SEED_PTH).write_text(_base_site_paths())


def _from_template(venv: Path, template: Path) -> None:
    """venv as a copy of template, which is made first from venv where it is missing (template's lock held)."""
    if not template.is_dir():
        with _MAKING_TEMPLATE:  # the builds started together wait for one venv, not make one each
            if not template.is_dir():
                _uv_venv(venv)
                # The venv is made: a template that cannot be kept (disk full, a failed copy) is tried again later.
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    _keep_as_template(venv, template)
    if not venv.exists():
        subprocess.run(["cp", "-a", str(template), str(venv)], check=True, capture_output=True, text=True)
        relocate_listed(venv, _naming_folder(template), str(template), str(venv))
    with contextlib.suppress(OSError):
        os.utime(template)  # used now


def _uv_venv(venv: Path) -> None:
    subprocess.run(
        [uv_binary(), "venv", "--quiet", "--python", sys.executable, str(venv)],
        check=True, capture_output=True, text=True, timeout=UV_VENV_TIMEOUT_S,
    )  # fmt: skip


def _keep_as_template(venv: Path, template: Path) -> None:
    """A copy of a venv uv just made, naming template, renamed into place (another process's, made meanwhile, is
    the same)."""
    template.parent.mkdir(parents=True, exist_ok=True)
    making = Path(tempfile.mkdtemp(prefix=f".{template.name}-", dir=template.parent))
    try:
        subprocess.run(["cp", "-a", str(venv), str(making / "venv")], check=True, capture_output=True, text=True)
        relocate(making / "venv", str(venv), str(template))
        with contextlib.suppress(OSError):
            (making / "venv").rename(template)
    finally:
        remove_tree(making)


@functools.cache
def _naming_folder(folder: Path) -> tuple[str, ...]:
    """The files and links below folder that name it (a venv's activate scripts)."""
    named = str(folder)
    return tuple(
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if (
            os.readlink(path).startswith(named)
            if path.is_symlink()
            else path.is_file() and named.encode() in path.read_bytes()
        )
    )


@functools.cache
def _template_name(templates: str) -> str:
    """The template's name: its files name the folder it was made in (a cache root moved since makes another)."""
    uv = Path(uv_binary())
    made_by = uv.stat()
    made_with = f"{Path(sys.executable).resolve()} {sys.version} {uv.resolve()} {made_by.st_size} {made_by.st_mtime_ns}"
    key = f"{templates} {made_with}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@functools.cache
def _base_site_paths() -> str:
    """The .pth lines that make this environment's packages importable from a venv."""
    seeds = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    return "".join(f"{path}\n" for path in seeds if Path(path).is_dir())


def _describe(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return f"{exc.cmd!s}: exit {exc.returncode} {' '.join(stderr.split())[:300]}"
    return " ".join(str(exc).split())[:300]
