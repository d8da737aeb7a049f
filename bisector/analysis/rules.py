"""The rules of the static diff, declared: RULES names each rule with the reader that runs it (readers.py) and what
it finds. Every dispatch row carries the name of the rule that made it (Finding.rule), and a rule can be switched
off for a measurement (`rules_disabled`): benchmarks/bench_explain_ablation.py scores the corpora with and without
each rule.

A rule is added only with a corpus item it fixes and a pooled number that does not fall: the item goes into a
corpus under benchmarks/explain_corpus (or is one already there that the tool misses), and
`bench_explain_ablation.py` over every corpus shows the rule's own contribution to pooled F1 above zero and the
pooled F1 of all the rules no lower than before it. A rule whose contribution falls to zero or below is removed
with its module, its expressions and its tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import ParamSpec

from bisector.analysis.findings import Finding

P = ParamSpec("P")


@dataclass(frozen=True)
class Rule:
    name: str
    reader: str  # the reader that runs it (readers.READERS), or "commit" for a rule across the changed files
    finds: str  # what its rows are, in words


RULES: tuple[Rule, ...] = (
    Rule("python_tables", "python", "literal tables, constants, Triton autotune configs and heuristics that differ"),
    Rule("launch_arguments", "python", "grid, keyword and tile arguments of a kernel launch that differ"),
    Rule("dispatch_conditions", "python", "arch, dtype, shape and env conditions added, removed or changed"),
    Rule("env_gates", "python", "environment-variable reads added, removed or changed"),
    Rule("config_builders", "python", "autotune config lists built in code whose code differs"),
    Rule("toggle_arguments", "python", "calls that pass a backend toggle (use_triton=, backend=) differently"),
    Rule("chosen_literals", "python", "literals a function returns or assigns under a dispatch condition"),
    Rule("arch_targets", "python", "arches clamped to a bound and compile-target lists"),
    Rule("branch_tests", "commit", "for a source file with no other row: host functions whose branch tests changed"),
    Rule("native_tables", "native", "C / C++ / CUDA arrays, constants and #defines that differ"),
    Rule("native_conditions", "native", "condition lines on batch size, arch, dtype or version a hunk changes"),
    Rule("native_instances", "native", "instance lists of a template or macro written out per tuned case"),
    Rule("native_launches", "native", "grid, block and work-group shapes of launch sites"),
    Rule("native_template_args", "native", "numbers passed as template arguments"),
    Rule("native_env_reads", "native", "environment reads added, removed or changed"),
    Rule("native_choosers", "native", "dispatch functions whose decisions the hunks change"),
    Rule("tuning_files", "tuning", "each changed leaf of a JSON / YAML / TOML tuning file"),
    Rule("cmake_targets", "cmake", "GPU arch target lists and kernel-gating option defaults"),
)  # fmt: skip
RULE_NAMES = frozenset(rule.name for rule in RULES)

_disabled: ContextVar[frozenset[str]] = ContextVar("disabled_rules", default=frozenset())


@contextmanager
def rules_disabled(names: Iterable[str]) -> Iterator[None]:
    """Run the static diff without these rules (a measurement: their rows are not made, their passes not run)."""
    chosen = frozenset(names)
    unknown = sorted(chosen - RULE_NAMES)
    if unknown:
        raise ValueError(f"no rule named {', '.join(unknown)}")
    token = _disabled.set(chosen)
    try:
        yield
    finally:
        _disabled.reset(token)


def _known(name: str) -> str:
    if name not in RULE_NAMES:
        raise ValueError(f"no rule named {name}")  # a call site naming an undeclared rule: a programming error
    return name


def stamped(name: str, rows: Iterable[Finding]) -> list[Finding]:
    """rows, each that carries no rule yet named for this one; none while the rule is disabled."""
    if _known(name) in _disabled.get():
        return []
    return [row if row.rule else replace(row, rule=name) for row in rows]


def produce(name: str, rule: Callable[P, list[Finding]], *args: P.args, **kwargs: P.kwargs) -> list[Finding]:
    """The rows of a rule that makes rows of its own; none while it is disabled."""
    if _known(name) in _disabled.get():
        return []
    return stamped(name, rule(*args, **kwargs))


def refine(name: str, rows: list[Finding], rule: Callable[..., list[Finding]], *args: object) -> list[Finding]:
    """rule(*args, rows): a pass over the rows so far that adds, rewrites or drops rows; rows while it is disabled."""
    if _known(name) in _disabled.get():
        return rows
    return stamped(name, rule(*args, rows))
