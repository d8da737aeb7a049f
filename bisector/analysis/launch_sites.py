"""Where a kernel is launched from Python (dispatch_sites.py's scan), and how two versions' launch sites pair up."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchSite:
    function: str  # enclosing qualified name ("<module>" at module level)
    kernel: str  # "_fwd_kernel[grid]", "torch.ops.my_lib.gemm"
    occurrence: int  # the n-th launch of this kernel in this function
    arguments: dict[str, str]  # "grid", "num_warps", "arg0" -> value text
    condition: str  # the if-conditions leading to the site, "and"-joined ("" when unconditional)
    line: int

    @property
    def identity(self) -> tuple[str, str, int]:
        return (self.function, self.kernel, self.occurrence)


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
