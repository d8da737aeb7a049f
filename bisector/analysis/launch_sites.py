"""Where a kernel is launched from Python (dispatch_sites.py's scan), how two versions' launch sites pair up, and
the rows for what differs between them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bisector.analysis.findings import Finding, FindingKind

_ARGUMENT_KEY = re.compile(r"^(arg\d+|grid)$")  # the keys of a torch op's positional arguments and of a grid
# Tensor methods that give the same values in another layout or view: `x.view(-1, k)` and `x.reshape(-1, k)`, or
# `x.contiguous()` and `x`, pass the kernel the same numbers, no meta-parameter of its launch.
_SAME_VALUES = ((re.compile(r"\.contiguous\(\)"), ""), (re.compile(r"\.view\("), ".reshape("))


@dataclass(frozen=True)
class LaunchSite:
    function: str  # enclosing qualified name ("<module>" at module level)
    kernel: str  # "_fwd_kernel[grid]", "torch.ops.my_lib.gemm"
    occurrence: int  # the n-th launch of this kernel in this function
    arguments: dict[str, str]  # "grid", "num_warps", "arg0" -> value text
    condition: str  # the if-conditions leading to the site, "and"-joined ("" when unconditional)
    line: int
    positionals: tuple[str, ...] = ()  # every positional argument's text, for an argument moved to a keyword

    @property
    def identity(self) -> tuple[str, str, int]:
        return (self.function, self.kernel, self.occurrence)

    def moved(self, other: LaunchSite, name: str) -> bool:
        """The argument name, which this site passes and the other does not, is one the other passes in the other
        way, by position or by keyword (`kernel[grid](x, x.shape[1])` -> `kernel[grid](x, N_COLS=x.shape[1])`,
        the kernel's parameter renamed with it): the same value reaches the kernel."""
        value = self.arguments.get(name)
        if value is None or name in other.arguments:
            return False
        text = _passed(value)
        if name.startswith("positional "):  # a tile positional (launch_calls.tile_positionals)
            keywords = (_passed(v) for k, v in other.arguments.items() if _keyword(k))
            return self.positionals.count(text) > other.positionals.count(text) and text in keywords
        return _keyword(name) and other.positionals.count(text) > self.positionals.count(text)


def _keyword(name: str) -> bool:
    return name.isidentifier() and not _ARGUMENT_KEY.match(name)


def _passed(value: str) -> str:
    """The text passed, without what resolved() shows of a local name (`block (= 64 | 128)` -> `block`)."""
    return value.split(" (= ", 1)[0]


def _same_argument(before: str | None, after: str | None) -> bool:
    """Two texts of one launch argument that pass the same values (a view taken as a reshape, a copy made
    contiguous)."""
    if before is None or after is None:
        return before == after
    for pattern, replacement in _SAME_VALUES:
        before, after = pattern.sub(replacement, before), pattern.sub(replacement, after)
    return before == after


def pair_launches(old: list[LaunchSite], new: list[LaunchSite]) -> list[tuple[LaunchSite | None, LaunchSite | None]]:
    """Sites matched by (function, kernel, occurrence), then leftovers of one kernel in order (a renamed caller)."""
    by_identity = {site.identity: site for site in old}
    pairs: list[tuple[LaunchSite | None, LaunchSite | None]] = []
    unmatched_new: list[LaunchSite] = []
    for site in new:
        match = by_identity.pop(site.identity, None)
        if match is None:
            unmatched_new.append(site)
        else:
            pairs.append((match, site))
    leftovers = list(by_identity.values())
    for site in unmatched_new:
        match = next((o for o in leftovers if o.kernel == site.kernel), None) or next(
            (o for o in leftovers if renamed_kernel(o, site)), None
        )
        if match is not None:
            leftovers.remove(match)
        pairs.append((match, site))
    pairs.extend((site, None) for site in leftovers)
    return pairs


def renamed_kernel(old: LaunchSite, new: LaunchSite) -> bool:
    """The same call of a renamed kernel: same caller, arguments and condition."""
    return (old.function, old.arguments, old.condition) == (new.function, new.arguments, new.condition)


def launch_rows(path: str, old: list[LaunchSite], new: list[LaunchSite]) -> list[Finding]:
    """Rows for the launch arguments (and launch conditions) that differ between two versions' sites, and for
    sites added or removed."""
    rows: list[Finding] = []
    for was, now in pair_launches(old, new):
        site = now or was
        assert site is not None
        detail = f"in {site.function}" + (f"; when {site.condition}" if site.condition else "")
        if was is None or now is None:
            rows.append(_launch(path, site, "launch", _call_text(was), _call_text(now), detail))
            continue
        for name in [*was.arguments, *(n for n in now.arguments if n not in was.arguments)]:
            if was.moved(now, name) or now.moved(was, name):
                continue
            if not _same_argument(was.arguments.get(name), now.arguments.get(name)):
                rows.append(_launch(path, site, name, was.arguments.get(name), now.arguments.get(name), detail))
        if was.condition != now.condition:
            rows.append(_launch(path, site, "condition", was.condition or "always", now.condition or "always", detail))
    return rows


def _call_text(site: LaunchSite | None) -> str | None:
    if site is None:
        return None
    return ", ".join(f"{name}={value}" for name, value in site.arguments.items()) or "()"


def _launch(path: str, site: LaunchSite, key: str, before: str | None, after: str | None, detail: str) -> Finding:
    return Finding(FindingKind.LAUNCH_PARAM, path, site.kernel, key, before, after, site.line, detail)
