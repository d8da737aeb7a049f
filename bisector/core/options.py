"""The bisect options, defined once: OPTIONS names each option's group of the spec, its stored type, its flag,
its bisect.toml key and its help. The click options (bisector/cli/options.py), the bisect.toml keys and the
stored JSON (bisector/core/spec.py) are all derived from it.

The stored JSON of a bisect is flat: {option name: value}, enums as their value, lists for tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

from bisector.vocab.metric import Direction, NoMetricPolicy


class StrategyName(StrEnum):
    KARY = "kary"  # k-ary search: each probe's verdict is trusted
    NOISY = "noisy"  # posterior over the first bad commit: verdicts may flake


class VerifyEndpoints(StrEnum):
    """When the endpoints are tested (bisector/core/endpoints.py)."""

    FIRST = "first"  # both endpoints are tested before the search relies on them
    LAZY = "lazy"  # an endpoint is tested when the conclusion rests on it, or early in a slot no probe can use

    @classmethod
    def chosen(cls, choice: VerifyEndpoints | None) -> VerifyEndpoints:
        """The operator's choice, else lazy (at every worker count)."""
        return cls.LAZY if choice is None else choice


class PruneMode(StrEnum):
    """Whether commits that cannot change the test's result leave the search (bisector/core/prune.py)."""

    AUTO = "auto"  # a coverage probe at the bad commit decides which commits the test and build can see
    OFF = "off"


class ExecutorKind(StrEnum):
    LOCAL = "local"  # worker processes on this host
    RAY = "ray"  # a Ray cluster
    INPROCESS = "inprocess"  # threads in the coordinator's process (tests, small hosts)


class ImageMode(StrEnum):
    NONE = "none"  # steps run in the commit's worktree as it is
    VENV = "venv"  # each commit's build makes an image once; its steps run there (workers/images)


class Group(StrEnum):
    """Which part of BisectSpec an option belongs to."""

    BISECT = "bisect"  # the range itself: BisectSpec's own fields
    TEST = "test"  # what is run at a commit and how it is judged: TestSpec
    SEARCH = "search"  # which commits are probed, how often, when the search ends: SearchPolicy
    EXECUTOR = "executor"  # where steps run: ExecutorSpec
    ANALYSIS = "analysis"  # what is done after a culprit is found: AnalysisSpec


class Form(Enum):
    """How an option is written on the command line."""

    VALUE = "value"  # --name VALUE
    FLAG = "flag"  # --name sets true; absent: the default
    SWITCH = "switch"  # --name / --no-name
    REPEATED = "repeated"  # --name VALUE, repeatable: a list
    PAIRS = "pairs"  # --name KEY=VALUE, repeatable: a table


@dataclass(frozen=True)
class Option:
    name: str  # the field of its group's spec and the key of the stored JSON
    group: Group
    types: tuple[type, ...]  # the types of a stored or configured value (bool is never a number)
    help: str = ""
    form: Form = Form.VALUE
    optional: bool = False  # None (null in JSON) is a value: "not set"
    choices: type[StrEnum] | None = None  # the value is one of these (stored as a string)
    flag: str | None = ""  # "": --name with - for _; None: no flag (stored only)
    toml_key: str | None = ""  # "": name; None: not a bisect.toml key
    metavar: str | None = None
    envvar: str | None = None
    attr: str = ""  # the field of its group's spec when it differs from name
    items: tuple[type, ...] = ()  # a list's items or a table's values have these types ...
    item_rule: str = ""  # ... or are refused with this reason

    @property
    def field_name(self) -> str:
        return self.attr or self.name

    @property
    def cli_flag(self) -> str | None:
        return "--" + self.name.replace("_", "-") if self.flag == "" else self.flag

    @property
    def config_key(self) -> str | None:
        return self.name if self.toml_key == "" else self.toml_key

    @property
    def is_number(self) -> bool:
        return float in self.types


_S, _I, _F, _B, _L, _T = (str,), (int,), (int, float), (bool,), (list,), (dict,)
_BISECT, _TEST, _SEARCH, _EXECUTOR, _ANALYSIS = Group.BISECT, Group.TEST, Group.SEARCH, Group.EXECUTOR, Group.ANALYSIS
# fmt: off
OPTIONS: tuple[Option, ...] = (  # in the order `bisect start --help` lists them
    Option("repo", _BISECT, _S, flag=None, toml_key=None),  # --repo: the repository's root is stored
    Option("good", _BISECT, _S, "A commit where the test passes (SHA, branch, tag), or a date (2026-10-05, "
           "2026-10-05T18:00+02:00, 2026-10-05 Europe/Berlin; UTC by default): the bad revision's last first-parent "
           "commit by then, by committer date (what was on the line at that time); a ref of that name wins."),
    Option("bad", _BISECT, _S, "A later commit where it fails, or a date: the current branch's (HEAD's) last "
           "first-parent commit by then, by committer date."),
    Option("link", _BISECT, _S, "A URL about this bisect (a PR, an issue, a CI run; http or https), shown in its "
           "report, its dashboard page and the webhook's payload.", optional=True, metavar="URL"),
    Option("dates", _BISECT, _T, flag=None, toml_key=None, items=_T,
           item_rule="is not a table (given, sha, committed)"),  # what a dated --good/--bad resolved to
    Option("run", _TEST, _S, "Shell command that tests a commit, run by bash at the worktree's root."),
    Option("build", _TEST, _S, "Shell command run before --run; a failing build skips the commit.", optional=True),
    Option("metric", _TEST, _S, "Regex with one group that captures the metric from the run's output.",
           optional=True),
    Option("metric_json", _TEST, _S, "FILE:KEY: read the metric from a JSON file the run writes (KEY may be a.b.0).",
           optional=True),
    Option("expect", _TEST, _S, "What a good metric looks like, e.g. '>= 4.0' (higher is better) or '< 51.0'; "
           "'auto' compares each commit's samples with the endpoints' (needs --direction).", optional=True),
    Option("no_metric", _TEST, _S, "A run that prints no metric is skipped (default) or bad (the crash is the "
           "regression).", choices=NoMetricPolicy),
    Option("timeout_s", _TEST, _F, "Seconds a step (build + run) may take before it is killed.", flag="--timeout",
           toml_key="timeout"),
    Option("env", _TEST, _T, "Environment for build and run (repeatable).", form=Form.PAIRS, metavar="K=V",
           items=_S, item_rule="names and values are strings"),
    Option("infra_patterns", _TEST, _L, "Extra regex of an infrastructure failure.", form=Form.REPEATED,
           flag="--infra-pattern", items=_S, item_rule="is not a string (a regex)"),
    Option("cherry_pick", _TEST, _L, "A commit whose change is applied on top of every tested commit before its build "
           "and test, as `git cherry-pick -n` (e.g. the test, added after the good commit); repeatable, applied in "
           "order, before the --patch files. Its SHA is read once and stored. A commit where it does not apply is "
           "skipped.", form=Form.REPEATED, metavar="REV", items=_S, item_rule="is not a string (a revision)"),
    Option("patch", _TEST, _L, "A patch file (git diff or format-patch) applied on top of every tested commit before "
           "its build and test (e.g. an old commit's build fix); repeatable, applied in order. Its text is read once "
           "and stored. A commit where it does not apply is skipped.", form=Form.REPEATED, metavar="FILE", items=_S,
           item_rule="is not a string (a file)"),
    Option("patches", _TEST, _L, flag=None, toml_key=None, items=_T,
           item_rule="is not a table (kind, source, content)"),  # what --cherry-pick and --patch read, in order
    Option("paths", _TEST, _L, flag=None, items=_S, item_rule="is not a string (a path)"),  # the arguments after --
    Option("all_parents", _SEARCH, _B, "Descend into a bad merge to find the commit inside the branch it merged.",
           form=Form.FLAG),
    Option("max_attempts", _SEARCH, _I, "Tries per commit when infrastructure errors happen.  [default: 3]"),
    Option("repeat", _SEARCH, _I, "Runs per probed commit (noisy metrics, flaky tests).  [default: 1]"),
    Option("max_repeat", _SEARCH, _I, "More runs, doubling, while a commit's verdict is uncertain "
           "(with --expect auto: while the endpoints' samples do not differ).", optional=True),
    Option("noise_band", _SEARCH, _F, "Metric values this close to the threshold are uncertain."),
    Option("direction", _SEARCH, _S, "Which way the metric is better.", optional=True, choices=Direction),
    Option("find_fix", _SEARCH, _B, "Find the commit that fixed the metric instead.", form=Form.FLAG),
    Option("strategy", _SEARCH, _S, "Search: k-ary, or noisy (posterior).", optional=True, choices=StrategyName),
    Option("confirm", _SEARCH, _B, "Re-run the first bad commit against the last good one at the end (an "
           "ambiguous answer: its first commit known bad).  [default: with repeats or flakes]",
           form=Form.SWITCH, optional=True),
    Option("verify_endpoints", _SEARCH, _S, "When the endpoints are tested: lazy, when the answer rests on one (or "
           "early, in a slot no probe can use), or first, both before relying on them; with noise (--repeat, "
           "--strategy noisy, flaky results) both are tested first.  [default: lazy]", optional=True,
           choices=VerifyEndpoints),
    Option("prune", _SEARCH, _S, "auto: first run the test once at the bad commit under coverage, and leave out of "
           "the search the commits that change nothing it executed or read, nor its build's inputs (if the probe "
           "cannot tell, every commit is searched).  [default: off]", choices=PruneMode),
    Option("term_old", _SEARCH, _S, "The word for the good endpoint's state, e.g. fast (as git bisect --term-old).",
           optional=True),
    Option("term_new", _SEARCH, _S, "The word for the bad endpoint's state, e.g. slow (as git bisect --term-new).",
           optional=True),
    Option("executor", _EXECUTOR, _S, "Where steps run: worker processes on this host (default) or a Ray cluster.",
           choices=ExecutorKind, attr="kind"),
    Option("workers", _EXECUTOR, _I, "Steps run at once (one GPU slot each).  [default: 1]"),
    Option("gpus_per_step", _EXECUTOR, _I, "GPUs each step gets (CUDA_VISIBLE_DEVICES); 0: none, on any host.  "
           "[default: 1 where the host has GPUs, else none]", optional=True),
    Option("ray_address", _EXECUTOR, _S, "With --executor ray: the cluster to join (default: $RAY_ADDRESS, else "
           "start a local one).", optional=True, envvar="RAY_ADDRESS"),
    Option("resources", _EXECUTOR, _T, "With --executor ray: a custom resource each step needs, e.g. H200=1 "
           "(repeatable).", form=Form.PAIRS, metavar="NAME=AMOUNT", items=_F, item_rule="the amount must be a number"),
    Option("image", _EXECUTOR, _S, "venv: build each commit's image once, reuse it.", choices=ImageMode),
    Option("image_inputs", _EXECUTOR, _L, "A path whose tree keys the image (repeatable).", form=Form.REPEATED,
           flag="--image-input", items=_S, item_rule="is not a string (a path)"),
    Option("artifact", _EXECUTOR, _S, "With --image venv: a commit's prebuilt wheels, installed instead of running "
           "--build where they exist: a wheel's path or URL, or a directory of wheels, with {sha} or {short}, "
           "e.g. /wheels/{sha}/.", optional=True, metavar="TEMPLATE"),
    Option("image_template", _EXECUTOR, _S, "Run each step in the commit's container image, e.g. "
           "registry.example.org/stack:{sha} ({sha} or {short}): used where the container engine has it or pulls "
           "it (without --patch or --cherry-pick), else built from the commit's Containerfile or Dockerfile (on the "
           "node that runs the step) and tagged with the build's recipe: REF-bisect-RECIPE.",
           optional=True, metavar="TEMPLATE"),
    Option("images_max_size", _EXECUTOR, _S, "LRU cap of this node's image cache, e.g. 20G.  [default: 20G]"),
    Option("build_ahead", _EXECUTOR, _I, "With --image venv: while probes run, build the images of the N commits "
           "likeliest to be probed next (at --workers 1, 2: the next probe's, either way; 6: the one after too; "
           "at --workers W, W*(W+1): the next round for every way the running one can end; 0: none), as many at "
           "once as the host's $BISECT_BUILD_AHEAD_SLOTS, likeliest first. Built where the steps build: on this "
           "host, or on the Ray slots' nodes.  [default: with --image venv and the local or Ray executor, 2 at "
           "--workers 1, W*(W+1) (at most 128) at W; else 0]", optional=True, metavar="N"),
    Option("explain", _ANALYSIS, _B, "After a culprit is found: diff its dispatch tables and re-run both sides "
           "traced.  [default: on]", form=Form.SWITCH),
    Option("trace_kernels", _ANALYSIS, _B, "The traced re-runs also record GPU kernels.", form=Form.FLAG),
    Option("minimize", _ANALYSIS, _B, "After a culprit is found: find its smallest bad change.", form=Form.FLAG),
)
# fmt: on

BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}
BY_CONFIG_KEY: dict[str, Option] = {o.config_key: o for o in OPTIONS if o.config_key is not None}
# resume may change these
EXECUTOR_OPTION_NAMES = ("executor", "workers", "gpus_per_step", "ray_address", "resources", "build_ahead")


def type_names(types: tuple[type, ...]) -> str:
    names = {"NoneType": "nothing", "str": "a string", "int": "a whole number", "float": "a number",
             "bool": "true or false", "dict": "a table", "list": "a list"}  # fmt: skip
    return " or ".join(names.get(t.__name__, t.__name__) for t in types)


def describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def has_type(value: object, types: tuple[type, ...]) -> bool:
    """isinstance, except that bool (an int to Python) is refused where a number is wanted."""
    if isinstance(value, bool) and bool not in types:
        return False
    return isinstance(value, types)
