"""A bisect's terms (git's --term-old/--term-new): the words for the two states, and what they mean as verdicts.

A stored step's verdict is the test's outcome: GOOD when it meets --expect, BAD when not. The terms name the
states of the search instead: "old" is the good endpoint's state, "new" the bad endpoint's. Without --find-fix
old is GOOD and new is BAD; with it (the test passes at the new end) they swap.
"""

from __future__ import annotations

from bisector.core.spec import BisectSpec
from bisector.vocab.domain import Verdict
from bisector.vocab.errors import InputError


def old_verdict(spec: BisectSpec) -> Verdict:
    """The test outcome of the old state (the good endpoint's)."""
    return Verdict.BAD if spec.search.find_fix else Verdict.GOOD


def new_verdict(spec: BisectSpec) -> Verdict:
    return Verdict.GOOD if spec.search.find_fix else Verdict.BAD


def term_of(spec: BisectSpec, verdict: Verdict | None) -> str:
    """The word a report shows for a verdict: the bisect's terms for good and bad, the verdict's name otherwise."""
    if verdict is None:
        return "running"
    old, new = spec.search.terms()
    if verdict is old_verdict(spec):
        return old
    if verdict is new_verdict(spec):
        return new
    return verdict.value


def verdict_for(spec: BisectSpec, word: str) -> Verdict:
    """The stored verdict of a person's word: a term, old/new, skip, or good/bad (the test passes / fails)."""
    old, new = spec.search.terms()
    if word == "skip":
        return Verdict.SKIP
    if word in (old, "old"):
        return old_verdict(spec)
    if word in (new, "new"):
        return new_verdict(spec)
    if word in ("good", "bad"):
        return Verdict(word)
    raise InputError(f"unknown verdict {word!r}: say {old}, {new} or skip")
