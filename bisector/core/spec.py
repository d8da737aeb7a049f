"""BisectSpec: everything that defines one bisect, split by concern: the test run at each commit, the search
policy, the executor and the analysis after a culprit is found.

Its options are defined once in bisector/core/options.py; `BisectSpec.from_options` is the one door for values
from flags, bisect.toml (bisector/runner/config.py), stored JSON or an API: a value of the wrong type is refused with
one line, never coerced. The spec is stored as flat JSON with the bisect (`to_json`), so `bisect resume`
needs nothing but the id.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from bisector.core.options import (
    EXECUTOR_OPTION_NAMES,
    OPTIONS,
    ExecutorKind,
    Form,
    Group,
    ImageMode,
    Option,
    PruneMode,
    StrategyName,
    VerifyEndpoints,
    describe,
    has_type,
    type_names,
)
from bisector.vocab.errors import InputError
from bisector.vocab.images import ImageRecipe, check_container_template, parse_size
from bisector.vocab.metric import DEFAULT_INFRA_PATTERNS, Direction, Expectation, MetricSpec, NoMetricPolicy
from bisector.vocab.patches import Patch, PatchKind

DEFAULT_TIMEOUT_S = 3600.0
DEFAULT_MAX_ATTEMPTS = 3
MAX_WORKERS = 256  # slots of one bisect; a cluster's larger pools serve several bisects
MAX_GPUS_PER_STEP = 64  # a step is one process on one host: no host holds more
MAX_ATTEMPTS_LIMIT = 100
DEFAULT_BUILD_AHEAD = 2  # at one worker, the likely next probes built ahead: one per way the running probe can come out
MAX_BUILD_AHEAD = 128  # the likely next probes looked for on every pass of the loop (W=8's default is 72)
MAX_REPEAT_LIMIT = 1000
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_TERMS = ("good", "bad")  # (old, new): the state at the good endpoint, the state at the bad one
FIX_TERMS = ("broken", "fixed")  # --find-fix: git refuses to swap good and bad, so its log keeps these
# git's own subcommands cannot be terms (git bisect check_term_format); nor can good/old name the new state.
_RESERVED_TERMS = frozenset(
    {"help", "start", "skip", "next", "reset", "visualize", "view", "replay", "log", "run", "terms", "mark"}
)
_TERM_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_ALWAYS_WRITTEN = frozenset({"good", "bad", "run"})  # start_arguments: what every `bisect start` names
_PATCH_OPTIONS = frozenset({"cherry_pick", "patch"})  # start_arguments writes what they read, in order


@dataclass(frozen=True)
class CommitTest:
    """What runs at a commit and how its output is judged."""

    run: str  # the shell command that tests a commit
    build: str | None = None
    metric: str | None = None
    metric_json: str | None = None  # FILE:KEY
    expect: str | None = None  # a threshold ('>= 4.0') or 'auto' (compare with the endpoints' samples)
    no_metric: NoMetricPolicy = NoMetricPolicy.SKIP
    timeout_s: float = DEFAULT_TIMEOUT_S
    env: dict[str, str] = field(default_factory=dict)
    infra_patterns: tuple[str, ...] = ()  # added to the built-in infrastructure signatures
    paths: tuple[str, ...] = ()  # only commits touching these paths are candidates (git bisect start -- PATH...)
    cherry_pick: tuple[str, ...] = ()  # the revisions as given
    patch: tuple[str, ...] = ()  # the patch files as given
    patches: tuple[Patch, ...] = ()  # what they apply, read when the bisect was made (vocab/patches.py)

    def __post_init__(self) -> None:
        read = tuple(p if isinstance(p, Patch) else Patch.from_json(p) for p in self.patches)
        object.__setattr__(self, "patches", read)  # stored JSON gives tables
        if not self.run.strip():
            raise InputError("--run is required: the shell command that tests a commit")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise InputError(f"--timeout must be a positive number of seconds (got {self.timeout_s:g})")
        for key in self.env:
            if not ENV_NAME.fullmatch(key):
                raise InputError(f"--env {key!r}: an environment variable's name is letters, digits and _")
        if any(not p.strip() for p in self.paths):
            raise InputError("a path after -- must not be empty")
        self.metric_spec()  # validates the metric, the expectation and the patterns

    @property
    def comparative(self) -> bool:
        return self.expect == "auto"

    def metric_spec(self) -> MetricSpec:
        json_file = json_key = None
        if self.metric_json:
            json_file, json_key = MetricSpec.parse_json_target(self.metric_json)
        return MetricSpec(
            regex=self.metric,
            json_file=json_file,
            json_key=json_key,
            expect=Expectation.parse(self.expect) if self.expect not in (None, "auto") else None,
            comparative=self.comparative,
            no_metric=self.no_metric,
            infra_patterns=DEFAULT_INFRA_PATTERNS + tuple(self.infra_patterns),
        )


@dataclass(frozen=True)
class SearchPolicy:
    """Which commits are probed, how often, and when the search ends."""

    all_parents: bool = False  # descend into a bad merge
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # tries per commit when infrastructure errors happen
    repeat: int = 1  # runs per probed commit
    max_repeat: int | None = None  # adaptive repeats while the verdict is uncertain, up to this (default: repeat)
    noise_band: float = 0.0  # threshold mode: samples within this of the threshold are uncertain
    direction: Direction | None = None  # implied by a threshold --expect
    find_fix: bool = False  # look for the commit that fixed the metric
    strategy: StrategyName | None = None  # default: noisy once repeats > 1 or a flake is seen
    confirm: bool | None = None  # re-run first bad and its parent at the end; default: with the noisy strategy
    verify_endpoints: VerifyEndpoints | None = None  # first | lazy; default (None): lazy
    term_old: str | None = None  # the name of the good endpoint's state (git's --term-old); default: terms()
    term_new: str | None = None  # the name of the bad endpoint's state (git's --term-new)
    prune: PruneMode = PruneMode.OFF  # auto: commits the test and build cannot see leave the search

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InputError(f"max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT} (got {self.max_attempts})")
        if not 1 <= self.repeat <= MAX_REPEAT_LIMIT:
            raise InputError(f"--repeat must be between 1 and {MAX_REPEAT_LIMIT} (got {self.repeat})")
        if self.max_repeat is not None and not self.repeat <= self.max_repeat <= MAX_REPEAT_LIMIT:
            raise InputError(
                f"--max-repeat ({self.max_repeat}) must be between --repeat ({self.repeat}) and {MAX_REPEAT_LIMIT}"
            )
        if not (math.isfinite(self.noise_band) and self.noise_band >= 0):
            raise InputError(f"--noise-band must be a number, 0 or more (got {self.noise_band:g})")
        self.terms()  # validates them

    @property
    def repeat_limit(self) -> int:
        return self.max_repeat if self.max_repeat is not None else self.repeat

    def terms(self) -> tuple[str, str]:
        """(old, new): what the good endpoint's state and the bad endpoint's state are called in reports and logs."""
        default_old, default_new = FIX_TERMS if self.find_fix else DEFAULT_TERMS
        old, new = self.term_old or default_old, self.term_new or default_new
        for flag, term in (("--term-old", old), ("--term-new", new)):
            if not _TERM_PATTERN.match(term) or term in _RESERVED_TERMS:
                raise InputError(f"{flag} {term!r}: a term is a word (letters, digits, - and _) and not a git command")
        if old == new:
            raise InputError(f"--term-old and --term-new must differ (both {old!r})")
        if old in ("bad", "new") or new in ("good", "old"):
            raise InputError(f"terms old={old!r} new={new!r} swap git's good and bad; use --find-fix instead")
        return old, new


def check_workers(workers: int) -> None:
    """InputError unless workers is a number of slots one bisect may run: 1 to MAX_WORKERS."""
    if not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"--workers must be between 1 and {MAX_WORKERS} (got {workers})")


@dataclass(frozen=True)
class ExecutorSpec:
    """Where and how wide steps run; changing it (`bisect resume --workers`) never changes what is tested."""

    kind: ExecutorKind = ExecutorKind.LOCAL
    workers: int = 1
    gpus_per_step: int | None = None  # 0: no GPU (on any host); None: 1 where the host has GPUs, else CPU slots
    ray_address: str | None = None  # ray: the cluster to join (None: start a local one)
    resources: dict[str, float] = field(default_factory=dict)  # ray: custom resources per step
    image: ImageMode = ImageMode.NONE
    image_inputs: tuple[str, ...] = ()  # paths whose tree decides an image's key (none: the commit's whole tree)
    images_max_size: str = "20G"  # the LRU cap of this node's image cache
    artifact: str | None = None  # a commit's prebuilt wheels ({sha}), installed into its image instead of a build
    image_template: str | None = None  # a commit's container image ({sha}): steps run in it (workers/container.py)
    build_ahead: int | None = None  # the likely next probes built ahead of their steps (None: build_ahead_limit's)

    def __post_init__(self) -> None:
        self.check_build_ahead()
        if self.image_template is not None:
            check_container_template(self.image_template, self.image.value, self.artifact)
        if self.artifact is not None and self.image is ImageMode.NONE:
            raise InputError("--artifact installs prebuilt wheels into a commit's image: give --image venv too")
        check_workers(self.workers)
        if self.gpus_per_step is not None and self.gpus_per_step < 0:
            raise InputError(f"--gpus-per-step must be 0 or more (got {self.gpus_per_step})")
        if self.gpus_per_step is not None and self.gpus_per_step > MAX_GPUS_PER_STEP:
            raise InputError(f"--gpus-per-step must be {MAX_GPUS_PER_STEP} or fewer (got {self.gpus_per_step})")
        for name, amount in self.resources.items():
            if not name or not (math.isfinite(amount) and amount > 0):
                raise InputError(f"--resources {name}={amount:g}: write NAME=AMOUNT with a positive amount")
        self.images_max_bytes()
        self.image_recipe()  # validates the image settings

    def images_max_bytes(self) -> int:
        try:
            return parse_size(self.images_max_size)
        except InputError as exc:
            raise InputError(f"--images-max-size: {exc}") from None

    def check_build_ahead(self) -> None:
        if self.build_ahead is None or self.build_ahead == 0:
            return
        if not 0 <= self.build_ahead <= MAX_BUILD_AHEAD:
            raise InputError(f"--build-ahead must be between 0 and {MAX_BUILD_AHEAD} (got {self.build_ahead})")
        if self.image_template is not None:
            raise InputError("--build-ahead builds venv images, not container images: leave it out with "
                             "--image-template")  # fmt: skip
        if self.image is not ImageMode.VENV:
            raise InputError("--build-ahead builds commits' images before their steps: give --image venv too")

    def build_ahead_limit(self) -> int:
        """How many of the likeliest next probes have their images built ahead: --build-ahead, else, where steps
        run on venv images on this host or on Ray nodes (a build takes CPUs, while a probe's test holds the GPUs),
        the next round for every way the running one can end: DEFAULT_BUILD_AHEAD at one worker, W x (W + 1) at
        W (at most MAX_BUILD_AHEAD). The executor builds as many of them at once as its build slots allow,
        likeliest first (Executor.ahead_builder)."""
        if self.build_ahead is not None:
            return self.build_ahead
        local_images = self.image is ImageMode.VENV and self.image_template is None
        workers_build = self.kind in (ExecutorKind.LOCAL, ExecutorKind.RAY)  # not the tests' in-process one
        if not (local_images and workers_build):
            return 0
        every_way = DEFAULT_BUILD_AHEAD if self.workers == 1 else self.workers * (self.workers + 1)
        return min(every_way, MAX_BUILD_AHEAD)

    def image_recipe(self, patches: tuple[Patch, ...] = (), env: Mapping[str, str] | None = None) -> ImageRecipe | None:
        """The recipe of the steps' images; patches and env: the test's, which the image's build applies and sees."""
        if self.image is ImageMode.NONE:
            return None
        pairs = tuple(sorted((env or {}).items()))
        return ImageRecipe(self.image.value, self.image_inputs, self.images_max_bytes(), self.artifact, patches, pairs)


@dataclass(frozen=True)
class AnalysisSpec:
    """What is done after a culprit is found."""

    explain: bool = True  # table diff + traced re-runs of last good and first bad
    trace_kernels: bool = False  # the traced re-runs also record GPU kernels via torch.profiler
    minimize: bool = False  # ddmin over the culprit's hunks and table entries


@dataclass(frozen=True)
class BisectSpec:
    repo: str
    good: str
    bad: str
    test: CommitTest
    search: SearchPolicy = field(default_factory=SearchPolicy)
    executor: ExecutorSpec = field(default_factory=ExecutorSpec)
    analysis: AnalysisSpec = field(default_factory=AnalysisSpec)
    link: str | None = None  # a URL about the bisect (a PR, an issue, a CI run)
    dates: dict[str, dict[str, str]] = field(default_factory=dict)  # good/bad given as dates: {given, sha, committed}

    def __post_init__(self) -> None:
        if self.link is not None:
            check_link(self.link)
        for path in self.test.paths:
            check_path_in_repo(path, self.repo)
        if self.executor.image_template is not None and self.test.build:
            raise InputError("with --image-template the commit's Containerfile is its build: leave out --build")
        expect, direction = self.test.expect, self.search.direction
        if expect == "auto":
            if direction is None:
                raise InputError("--expect auto needs --direction higher|lower (which way is better)")
            from bisector.core.stats import DEFAULT_ALPHA, samples_to_distinguish  # scipy: only for auto

            needed = samples_to_distinguish()
            if self.search.repeat < needed:
                raise InputError(
                    f"--expect auto compares the endpoints' sample sets at p < {DEFAULT_ALPHA:g}, which "
                    f"{needed - 1} runs a side can never reach: give --repeat {needed} or more"
                )
        elif expect is not None and direction is not None:
            implied = Expectation.parse(expect).direction
            if implied is not direction:
                raise InputError(f"--expect {expect!r} says {implied.value} is better, --direction says {direction}")

    def metric_spec(self) -> MetricSpec:
        return self.test.metric_spec()

    def metric_direction(self) -> Direction | None:
        if self.search.direction is not None:
            return self.search.direction
        if self.test.expect not in (None, "auto"):
            return Expectation.parse(self.test.expect).direction
        return None

    def with_executor(self, overrides: Mapping[str, object]) -> BisectSpec:
        """The same bisect on other workers: overrides are option values of the executor's (flat, as stored)."""
        unknown = set(overrides) - set(EXECUTOR_OPTION_NAMES)
        if unknown:
            raise InputError(f"only the executor settings can change, not {', '.join(sorted(unknown))}")
        values = {**self.to_json(), **overrides}
        if overrides.get("executor", self.executor.kind) != self.executor.kind and "build_ahead" not in overrides:
            values["build_ahead"] = None  # what was asked of the other executor is its default here
        return BisectSpec.from_options(values)

    def to_json(self) -> dict[str, object]:
        """Flat {option name: value}, JSON-able as it will read back from the store."""
        return {option.name: _json_value(getattr(self._part(option.group), option.field_name)) for option in OPTIONS}

    def start_arguments(self) -> list[str]:
        """The `bisect start` arguments that make this spec again: --repo, the range and the test's command, every
        other option that differs from its default, each cherry-pick by its stored SHA and each patch file by its
        name as given (in their order), then the paths after --."""
        values = self.to_json()
        defaults = BisectSpec(self.repo, self.good, self.bad, CommitTest(self.test.run)).to_json()
        arguments = ["--repo", self.repo]
        for option in OPTIONS:
            value, flag = values[option.name], option.cli_flag
            written = option.name in _ALWAYS_WRITTEN or value != defaults[option.name]
            if flag is not None and value is not None and written and option.name not in _PATCH_OPTIONS:
                arguments += _flag_arguments(option.form, flag, value)
        for patch in self.test.patches:
            commit = patch.kind is PatchKind.COMMIT
            arguments += ["--cherry-pick", patch.content] if commit else ["--patch", patch.source]
        return arguments + (["--", *self.test.paths] if self.test.paths else [])

    def _part(self, group: Group) -> object:
        parts = {Group.TEST: self.test, Group.SEARCH: self.search, Group.EXECUTOR: self.executor,
                 Group.ANALYSIS: self.analysis}  # fmt: skip
        return parts.get(group, self)

    @classmethod
    def from_options(cls, values: Mapping[str, object]) -> BisectSpec:
        """The spec of flat option values (stored JSON, merged flags and bisect.toml, an API's). Keys that name
        no option are ignored (JSON stored by other versions); a missing option takes its default."""
        parts: dict[Group, dict[str, Any]] = {group: {} for group in Group}
        for option in OPTIONS:
            if option.name in values:
                parts[option.group][option.field_name] = _typed(option, values[option.name])
            elif option.name in ("repo", "good", "bad", "run"):
                raise InputError(f"{option.name}: missing (every bisect names its repo, good, bad and run)")
        return cls(
            **parts[Group.BISECT],
            test=CommitTest(**parts[Group.TEST]),
            search=SearchPolicy(**parts[Group.SEARCH]),
            executor=ExecutorSpec(**parts[Group.EXECUTOR]),
            analysis=AnalysisSpec(**parts[Group.ANALYSIS]),
        )

    from_json = from_options  # the stored JSON is the flat option values


def check_link(url: str) -> None:
    """A link is one http(s) URL with a host."""
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or any(c.isspace() for c in url):
        raise InputError(f"--link {url[:80]!r}: give one http:// or https:// URL")


def check_path_in_repo(path: str, repo: str) -> None:
    """A path after `--` (relative to the repository's root, or absolute) names files in the repository; git's
    pathspec magic (a leading ':') is not taken."""
    if path.startswith(":"):
        raise InputError(f"paths: {path!r}: pathspec magic is not supported; give a path in the repository")
    root = os.path.normpath(repo)
    joined = os.path.normpath(os.path.join(root, path))
    if os.path.commonpath([root, joined]) != root:
        raise InputError(f"paths: {path!r} is outside the repository {repo} (the paths after -- name files in it)")


def _flag_arguments(form: Form, flag: str, value: object) -> list[str]:
    """An option's value as `bisect start` takes it (a value that differs from the option's default)."""
    if form is Form.FLAG:
        return [flag]
    if form is Form.SWITCH:
        return [flag if value else f"--no-{flag[2:]}"]
    if isinstance(value, dict):
        return [item for key, amount in value.items() for item in (flag, f"{key}={amount}")]
    if isinstance(value, list):
        return [item for entry in value for item in (flag, str(entry))]
    return [flag, str(value)]


def _json_value(value: object) -> object:
    if isinstance(value, tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, Patch):
        return value.to_json()
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, StrEnum):
        return value.value
    return value


def _typed(option: Option, value: object) -> object:
    """The option's value as its spec holds it; a wrong type is refused, never coerced."""
    if value is None and option.optional:
        return None
    if isinstance(value, tuple) and list in option.types:
        value = list(value)
    if not has_type(value, option.types):
        allowed = option.types + ((type(None),) if option.optional else ())
        raise InputError(f"{option.name}: expected {type_names(allowed)}, got {describe(value)}")
    if option.choices is not None:
        try:
            return option.choices(str(value))
        except ValueError:
            known = ", ".join(choice.value for choice in option.choices)
            raise InputError(f"{option.cli_flag or option.name} must be one of {known} (got {value!r})") from None
    if isinstance(value, list):
        for item in value:
            if not has_type(item, option.items):
                raise InputError(f"{option.name}: {describe(item)} {option.item_rule}")
        return tuple(value)
    if isinstance(value, dict):
        for key, item in value.items():
            if not (isinstance(key, str) and has_type(item, option.items)):
                raise InputError(f"{option.name}: {key!r} = {describe(item)}: {option.item_rule}")
        return {key: float(item) if float in option.items else item for key, item in value.items()}
    return float(value) if option.is_number and isinstance(value, int) else value
