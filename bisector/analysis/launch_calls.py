"""Plain calls that launch a kernel by their keywords, whatever the launch syntax.

gemm_sm90(a, b, tile_M=128, cluster_N=2)               tile or launch keywords (a CuTe DSL / JIT entry)
sageattn_fp8_cuda(q, k, v, pv_accum_dtype="fp32+fp16")  a string naming the precision, backend or kernel that
                                                        a kernel wrapper runs with
"""

from __future__ import annotations

import ast
import re

# Keywords that choose a kernel's tiling or launch shape.
_TILE_KEYWORD = re.compile(
    r"^(?i:(tile|block|cluster)_?[mnk]|num_(warps|stages|ctas))$|^(BLOCK|TILE|CLUSTER)_[A-Z0-9_]+$"
)
# Keywords that, given a string, choose the variant a wrapper runs: pv_accum_dtype="fp32", backend="triton".
_CHOICE_KEYWORD = re.compile(r"^(\w+_)?(dtype|precision|backend|impl|kernel|algo|algorithm)$", re.I)


def launch_call(call: ast.Call) -> bool:
    """A plain call passing tile or launch keywords, or a string to a keyword that chooses the precision, backend
    or kernel; not a config object (triton.Config(..., num_warps=4)), a call inside a kernel (tl.range(...,
    num_stages=3)), or a tensor factory (torch.empty(..., dtype=...): a string dtype there is no choice of kernel)."""
    callee = ast.unparse(call.func)
    if callee.rsplit(".", 1)[-1].endswith(("Config", "config", "dict")) or callee.startswith(("tl.", "triton.")):
        return False
    for keyword in call.keywords:
        if not keyword.arg:
            continue
        if _TILE_KEYWORD.match(keyword.arg):
            return True
        chosen = isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str)
        if chosen and _CHOICE_KEYWORD.match(keyword.arg) and not callee.startswith(("torch.", "np.", "numpy.")):
            return True
    return False
