"""C, C++ and CUDA lines whose change reaches a kernel choice, read as text like native.py.

    if (d_in < d_out) {                           a condition whose block launches or instantiates a kernel
        using Gemm = DefaultGemm<..., GemmShape<32, 128, 16>, ...>;      (<<<...>>>, f<T, 576>(...), gemm.run())
    case 3072: case_macro(3072);                  a case that passes its value on: a kernel instance per case
    int blocks = DIVIDE(dim, NUM_THREADS * 2);    a local whose value the function passes to the call that picks
    auto kernel = pick_kernel(blocks);            the kernel or to a launch's <<<grid, block>>>, a few lines on

What a condition tests does not matter here (native.py names batch, arch and dtype tests): what it guards does.
"""

from __future__ import annotations

import re

from bisector.analysis.findings import Finding, FindingKind

# A launch or an instantiation: kernel<<<grid, block>>>, run<cutlass::half_t, 576>(...), gemm.run(), launch_x(...);
# not a member template (x.data_ptr<float>(), p->get<T>()) or a cast.
LAUNCH = re.compile(
    r"<<<|(?<![.>\w:])(?!std::)(?!\w*_cast\b)[A-Za-z_][\w:]*\s*<[^;<>()]*(?:<[^;<>()]*>[^;<>()]*)*>\s*\(|"
    r"[.:]run\s*\(|\blaunch\w*\s*[<(]|\bLAUNCH\w*\s*\(|\bDefault\w*Gemm\w*<|\bGemmShape\s*<"
)
_OPENING_IF = re.compile(r"^\s*(?:\}\s*)?(?:else\s+)?if\s*(?:constexpr\s*)?\(.*\{\s*\\?\s*$")
_CASE_VALUE = re.compile(r"^\s*case\s+(?P<value>[\w:]+)\s*:(?P<rest>.*)$")
_ASSIGNMENT = re.compile(r"^\s*(?:(?:const|auto|int|int64_t|int32_t|size_t|uint32_t|float|bool)\s+)?"
                         r"(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>[^=;][^;]*);\s*$")  # fmt: skip
_KERNEL_PICK = re.compile(r"\bkernel(?:_fn|_func|_ptr)?\s*=(?!=)", re.I)  # `auto kernel = pick_kernel(blocks);`
LAUNCH_CONFIG = re.compile(r"<<<(.*?)>>>")  # a launch's configuration: grid, block, shared memory, stream
MAX_BLOCK_LINES = 120  # how far a condition's block is read for a launch
MAX_READER_LINES = 12  # how far after a changed local its reader is looked for


def guards_launch(lines: list[str], index: int) -> bool:
    """The line opens an if block (`if (d_in < d_out) {`, `} else if (q_dtype == kHalf) {`) that launches or
    instantiates a kernel before it closes."""
    line = lines[index]
    if not _OPENING_IF.match(line):
        return False
    depth = 0
    for text in lines[index : index + MAX_BLOCK_LINES]:
        body = text if text is not line else text[text.rindex("{") :]
        if text is not line and LAUNCH.search(body):
            return True
        depth += body.count("{") - body.count("}")
        if depth <= 0:
            return False
    return False


def instantiating_case(lines: list[str], index: int) -> bool:
    """`case 3072: case_macro(3072);` or `case 18:` followed by `return run<18>(...)`: the case passes its value
    on to the code it runs, so each case is a kernel instance of its own."""
    match = _CASE_VALUE.match(lines[index])
    if match is None:
        return False
    value = re.escape(match["value"])
    following = [match["rest"], *(lines[index + 1 : index + 2])]
    return any(re.search(rf"[(<,]\s*{value}\s*[)>,]", text) for text in following)


def reaching_values(
    path: str, old_lines: list[str], new_lines: list[str], after: list[str], line: int | None
) -> list[Finding]:
    """Locals a hunk assigns differently (same name, other value) that a launch or a kernel pick reads within a few
    lines after the hunk (after: the lines that follow it in the new version)."""
    old = _assigned(old_lines)
    new = _assigned(new_lines)
    rows: list[Finding] = []
    for name, value in new.items():
        if name not in old or old[name] == value:
            continue
        token = re.compile(rf"\b{re.escape(name)}\b")
        following = [*new_lines, *after[:MAX_READER_LINES]]
        if any(_reads_choice(token, text) for text in following):
            rows.append(
                Finding(FindingKind.NATIVE_THRESHOLD, path, f"{name} (read by the kernel choice)", before=old[name],
                        after=value, line=line)
            )  # fmt: skip
    return rows


def data_locals(names: list[str], lines: list[str]) -> set[str]:
    """The function-local constants and objects ("beta_zero", "beta_zero#2", "device_guard") that the file never
    reads, or reads only through their address (`args.beta_ptr = &beta_zero;`): a guard held for its scope or a
    value handed to a kernel as data, not a choice of kernel, tile or launch."""
    text = "\n".join(lines)
    data: set[str] = set()
    for name in names:
        base = re.escape(name.split("#", 1)[0])
        uses = re.finditer(rf"(?P<address>&\s*)?\b{base}\b(?P<declared>\s*(?:=(?!=)|\{{))?", text)
        if not any(not use["address"] and not use["declared"] for use in uses):
            data.add(name)
    return data


def _reads_choice(token: re.Pattern[str], text: str) -> bool:
    """The line picks a kernel with the name, or launches with it in its launch configuration (grid, block)."""
    if not token.search(text):
        return False
    config = LAUNCH_CONFIG.search(text)
    return bool(_KERNEL_PICK.search(text)) or (config is not None and token.search(config[1]) is not None)


def _assigned(lines: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for text in lines:
        match = _ASSIGNMENT.match(text)
        if match is not None:
            found[match["name"]] = " ".join(match["value"].split())
    return found
