"""BisectSpec: everything that defines one bisect, from CLI flags and an optional bisect.toml.

Flags win over bisect.toml. The spec is stored as JSON with the bisect, so `bisect resume` needs
nothing but the id.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from vocab.errors import InputError
from vocab.metric import DEFAULT_INFRA_PATTERNS, Direction, Expectation, MetricSpec, NoMetricPolicy
from workers.executor import StepRequest
from workers.images.key import ImageRecipe, parse_size

CONFIG_FILE_NAME = "bisect.toml"
DEFAULT_TIMEOUT_S = 3600.0
DEFAULT_MAX_ATTEMPTS = 3
MAX_WORKERS = 256  # slots of one bisect; a cluster's larger pools serve several bisects
MAX_ATTEMPTS_LIMIT = 100
MAX_REPEAT_LIMIT = 1000
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
AUTO_REPEAT, AUTO_MAX_REPEAT = 5, 20  # --expect auto compares sample sets: it needs several samples a commit
DEFAULT_TERMS = ("good", "bad")  # (old, new): the state at the good endpoint, the state at the bad one
FIX_TERMS = ("broken", "fixed")  # --find-fix: git refuses to swap good and bad, so its log keeps these
# git's own subcommands cannot be terms (git bisect check_term_format); nor can good/old name the new state.
_RESERVED_TERMS = frozenset(
    {"help", "start", "skip", "next", "reset", "visualize", "view", "replay", "log", "run", "terms", "mark"}
)
_TERM_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class BisectSpec:
    repo: str
    good: str
    bad: str
    run: str
    build: str | None = None
    metric: str | None = None
    metric_json: str | None = None  # FILE:KEY
    expect: str | None = None
    no_metric: str = NoMetricPolicy.SKIP.value
    workers: int = 1
    gpus_per_step: int = 0  # 0: as many as there are GPUs per worker slot (1 if GPUs exist, else CPU slots)
    timeout_s: float = DEFAULT_TIMEOUT_S
    env: dict[str, str] = field(default_factory=dict)
    all_parents: bool = False
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    infra_patterns: tuple[str, ...] = ()  # added to the built-in infrastructure signatures
    executor: str = "local"
    ray_address: str | None = None  # --executor ray: the cluster to join (None: start a local one)
    resources: dict[str, float] = field(default_factory=dict)  # --executor ray: custom resources per step
    explain: bool = True  # after a found culprit: table diff + traced re-runs of last good and first bad
    trace_kernels: bool = False  # the traced re-runs also record GPU kernels via torch.profiler
    minimize: bool = False  # after a found culprit: ddmin over its hunks and table entries
    repeat: int = 1  # runs per probed commit
    max_repeat: int | None = None  # adaptive repeats while the verdict is uncertain, up to this (default: repeat)
    noise_band: float = 0.0  # threshold mode: samples within this of the threshold are uncertain
    direction: str | None = None  # higher | lower is better; implied by a threshold --expect
    find_fix: bool = False  # look for the commit that fixed the metric
    strategy: str | None = None  # kary | noisy; default: noisy once repeats > 1 or a flake is seen
    confirm: bool | None = None  # re-run first bad and its parent at the end; default: with the noisy strategy
    verify_endpoints: str | None = None  # first | lazy (bisector/search/endpoints.py); default: lazy at 1 worker
    term_old: str | None = None  # the name of the good endpoint's state (git's --term-old); default: terms()
    term_new: str | None = None  # the name of the bad endpoint's state (git's --term-new)
    paths: tuple[str, ...] = ()  # only commits touching these paths are candidates (git bisect start -- PATH...)
    image: str = "none"  # venv: build each commit's image once and run its steps there (workers/images)
    image_inputs: tuple[str, ...] = ()  # paths whose tree decides an image's key (none: the commit's whole tree)
    images_max_size: str = "20G"  # the LRU cap of this node's image cache

    def __post_init__(self) -> None:
        _check_types(self)
        if not self.run.strip():
            raise InputError("--run is required: the shell command that tests a commit")
        if not 1 <= self.workers <= MAX_WORKERS:
            raise InputError(f"--workers must be between 1 and {MAX_WORKERS} (got {self.workers})")
        if self.gpus_per_step < 0:
            raise InputError(f"--gpus-per-step must be 0 or more (got {self.gpus_per_step})")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise InputError(f"--timeout must be a positive number of seconds (got {self.timeout_s:g})")
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InputError(f"max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT} (got {self.max_attempts})")
        for key in self.env:
            if not ENV_NAME.fullmatch(key):
                raise InputError(f"--env {key!r}: an environment variable's name is letters, digits and _")
        for name, amount in self.resources.items():
            if not name or not (math.isfinite(amount) and amount > 0):
                raise InputError(f"--resources {name}={amount:g}: write NAME=AMOUNT with a positive amount")
        try:
            NoMetricPolicy(self.no_metric)
        except ValueError:
            raise InputError(f"--no-metric must be 'skip' or 'bad' (got {self.no_metric!r})") from None
        self.metric_spec()  # validates the metric, the expectation and the patterns
        if not 1 <= self.repeat <= MAX_REPEAT_LIMIT:
            raise InputError(f"--repeat must be between 1 and {MAX_REPEAT_LIMIT} (got {self.repeat})")
        if self.max_repeat is not None and not self.repeat <= self.max_repeat <= MAX_REPEAT_LIMIT:
            raise InputError(
                f"--max-repeat ({self.max_repeat}) must be between --repeat ({self.repeat}) and {MAX_REPEAT_LIMIT}"
            )
        if not (math.isfinite(self.noise_band) and self.noise_band >= 0):
            raise InputError(f"--noise-band must be a number, 0 or more (got {self.noise_band:g})")
        if self.strategy not in (None, "kary", "noisy"):
            raise InputError(f"--strategy {self.strategy!r} is unknown; choose kary or noisy")
        if self.verify_endpoints not in (None, "first", "lazy"):
            raise InputError(f"--verify-endpoints must be first or lazy (got {self.verify_endpoints!r})")
        if self.direction not in (None, "higher", "lower"):
            raise InputError(f"--direction must be higher or lower (got {self.direction!r})")
        if self.expect == "auto":
            if self.direction is None:
                raise InputError("--expect auto needs --direction higher|lower (which way is better)")
            if self.repeat < 2:
                raise InputError("--expect auto compares sample sets: give --repeat 3 or more")
        elif self.expect is not None and self.direction is not None:
            implied = Expectation.parse(self.expect).direction.value
            if implied != self.direction:
                raise InputError(
                    f"--expect {self.expect!r} says {implied} is better, --direction says {self.direction}"
                )
        self.terms()  # validates them
        if any(not p.strip() for p in self.paths):
            raise InputError("a path after -- must not be empty")
        self.image_recipe()  # validates the image settings

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

    def image_recipe(self) -> ImageRecipe | None:
        if self.image == "none":
            return None
        return ImageRecipe(self.image, self.image_inputs, parse_size(self.images_max_size))

    @property
    def repeat_limit(self) -> int:
        return self.max_repeat if self.max_repeat is not None else self.repeat

    def metric_direction(self) -> Direction | None:
        if self.direction is not None:
            return Direction(self.direction)
        if self.expect not in (None, "auto"):
            return Expectation.parse(self.expect).direction
        return None

    def step_request(
        self,
        *,
        bisect_id: int,
        step_id: int,
        sha: str,
        attempt: int,
        repo: str,
        metric: MetricSpec,
        log_path: str,
        env: dict[str, str] | None = None,
        avoid_workers: frozenset[str] = frozenset(),
        pin_worker: str = "",
    ) -> StepRequest:
        """What a worker needs to run this spec's build and test at sha: search steps and side runs alike.
        env is added to the spec's env."""
        return StepRequest(
            step_id=step_id,
            bisect_id=bisect_id,
            sha=sha,
            attempt=attempt,
            repo=repo,
            run_cmd=self.run,
            build_cmd=self.build,
            metric=metric,
            log_path=log_path,
            timeout_s=self.timeout_s,
            env={**self.env, **(env or {})},
            avoid_workers=avoid_workers,
            pin_worker=pin_worker,
            image=self.image_recipe(),
        )

    def metric_spec(self) -> MetricSpec:
        json_file = json_key = None
        if self.metric_json:
            json_file, json_key = MetricSpec.parse_json_target(self.metric_json)
        return MetricSpec(
            regex=self.metric,
            json_file=json_file,
            json_key=json_key,
            expect=Expectation.parse(self.expect) if self.expect not in (None, "auto") else None,
            comparative=self.expect == "auto",
            no_metric=NoMetricPolicy(self.no_metric),
            infra_patterns=DEFAULT_INFRA_PATTERNS + tuple(self.infra_patterns),
        )

    def to_json(self) -> dict[str, object]:
        """JSON-able as it will read back from the store: every tuple a list."""
        data = asdict(self)
        return {key: list(value) if isinstance(value, tuple) else value for key, value in data.items()}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> BisectSpec:
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        values["infra_patterns"] = tuple(values.get("infra_patterns", ()))
        values["image_inputs"] = tuple(values.get("image_inputs", ()))
        values["paths"] = tuple(values.get("paths", ()))
        values["env"] = dict(values.get("env", {}))
        values["resources"] = dict(values.get("resources", {}))
        return cls(**values)


# The runtime type of each field (bool is an int to Python: it is refused where a number is wanted).
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "repo": str, "good": str, "bad": str, "run": str, "build": (str, type(None)), "metric": (str, type(None)),
    "metric_json": (str, type(None)), "expect": (str, type(None)), "no_metric": str, "workers": int,
    "gpus_per_step": int, "timeout_s": (int, float), "env": dict, "all_parents": bool, "max_attempts": int,
    "infra_patterns": tuple, "executor": str, "ray_address": (str, type(None)), "resources": dict,
    "explain": bool, "trace_kernels": bool, "minimize": bool, "repeat": int, "max_repeat": (int, type(None)),
    "noise_band": (int, float), "direction": (str, type(None)), "find_fix": bool, "strategy": (str, type(None)),
    "confirm": (bool, type(None)), "verify_endpoints": (str, type(None)), "image": str, "image_inputs": tuple,
    "images_max_size": str,
}  # fmt: skip


def _check_types(spec: BisectSpec) -> None:
    """Every value of the spec has its field's type, whatever it came from (flags, bisect.toml, stored JSON, an
    API): a wrong type is refused, never coerced."""
    for spec_field in fields(spec):
        value = getattr(spec, spec_field.name)
        expected = _FIELD_TYPES.get(spec_field.name)
        if expected is not None and not _is_instance(value, expected):
            raise InputError(f"{spec_field.name}: expected {_type_names(expected)}, got {_describe(value)}")
    for key, env_value in spec.env.items():
        if not isinstance(key, str) or not isinstance(env_value, str):
            raise InputError(f"env: {key!r} = {_describe(env_value)}: names and values are strings")
    for name, amount in spec.resources.items():
        if not isinstance(name, str) or not _is_instance(amount, (int, float)):
            raise InputError(f"resources: {name!r} = {_describe(amount)}: the amount must be a number")
    for pattern in spec.infra_patterns:
        if not isinstance(pattern, str):
            raise InputError(f"infra_patterns: {_describe(pattern)} is not a string (a regex)")
    for name, listed in (("paths", spec.paths), ("image_inputs", spec.image_inputs)):
        for item in listed:
            if not isinstance(item, str):
                raise InputError(f"{name}: {_describe(item)} is not a string (a path)")


def _is_instance(value: object, expected: type | tuple[type, ...]) -> bool:
    wanted = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) and bool not in wanted:
        return False
    return isinstance(value, wanted)


def _type_names(expected: type | tuple[type, ...]) -> str:
    wanted = expected if isinstance(expected, tuple) else (expected,)
    names = {"NoneType": "nothing", "str": "a string", "int": "a whole number", "float": "a number",
             "bool": "true or false", "dict": "a table", "tuple": "a list"}  # fmt: skip
    return " or ".join(names.get(t.__name__, t.__name__) for t in wanted)


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


_TOML_KEYS: dict[str, type | tuple[type, ...]] = {
    "good": str,
    "bad": str,
    "run": str,
    "build": str,
    "metric": str,
    "metric_json": str,
    "expect": str,
    "no_metric": str,
    "workers": int,
    "gpus_per_step": int,
    "timeout": (int, float),
    "env": dict,
    "all_parents": bool,
    "max_attempts": int,
    "infra_patterns": list,
    "executor": str,
    "ray_address": str,
    "resources": dict,
    "explain": bool,
    "trace_kernels": bool,
    "minimize": bool,
    "repeat": int,
    "max_repeat": int,
    "noise_band": (int, float),
    "direction": str,
    "find_fix": bool,
    "strategy": str,
    "confirm": bool,
    "verify_endpoints": str,
    "term_old": str,
    "term_new": str,
    "paths": list,
    "image": str,
    "image_inputs": list,
    "images_max_size": str,
}


def load_config_file(repo_root: Path) -> dict[str, object]:
    """The keys of `bisect.toml` at the repo root (empty when there is none), validated by type."""
    path = repo_root / CONFIG_FILE_NAME
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: {exc}") from None
    table = data.get("bisect", data)
    if not isinstance(table, dict):
        raise InputError(f"{path}: [bisect] must be a table")
    config: dict[str, object] = {}
    for key, value in table.items():
        normalized = key.replace("-", "_")
        expected = _TOML_KEYS.get(normalized)
        if expected is None:
            raise InputError(f"{path}: unknown key {key!r} (known: {', '.join(sorted(_TOML_KEYS))})")
        if not _is_instance(value, expected):
            raise InputError(f"{path}: {key} must be {_type_names(expected)}, not {_describe(value)}")
        config[normalized] = value
    return config


def build_spec(repo_root: Path, flags: dict[str, object]) -> BisectSpec:
    """Merge bisect.toml and flags (flags that were given win) into a validated spec."""
    merged: dict[str, Any] = dict(load_config_file(repo_root))
    for key, value in flags.items():
        if value is None or (key in ("env", "infra_patterns", "resources", "paths") and not value):
            continue
        if key in ("env", "resources"):
            merged[key] = {**merged.get(key, {}), **dict(value)}  # type: ignore[call-overload]
        else:
            merged[key] = value
    if "timeout" in merged:
        merged["timeout_s"] = float(merged.pop("timeout"))
    for required in ("good", "bad", "run"):
        if not merged.get(required):
            raise InputError(f"--{required} is required (as a flag or in {CONFIG_FILE_NAME})")
    if merged.get("expect") == "auto" and "repeat" not in merged:
        merged.setdefault("max_repeat", AUTO_MAX_REPEAT)
        merged["repeat"] = AUTO_REPEAT
    if "noise_band" in merged:
        merged["noise_band"] = float(merged["noise_band"])
    merged["repo"] = str(repo_root)
    for listed in ("infra_patterns", "paths", "image_inputs"):
        if listed in merged:
            merged[listed] = tuple(merged[listed])  # the items' types are checked, never coerced
    return BisectSpec(**merged)
