"""C, C++ and CUDA dispatch read from single lines: switch macros, parameter defaults and environment reads.

    BOOL_SWITCH(params.seqlen <= 128, kIsShort, [&] { ... })   a switch macro: its first argument chooses a template
    void gemm(..., int max_par = 16)                             a parameter's default (a caller that passes none)
    template <typename T, uint32_t Width = 64 / sizeof(T)>      a non-type template parameter's default
    const char* env = std::getenv("MY_LIB_DETERMINISTIC");       an environment read: a gate of what follows
    read_bool_from_env("MY_LIB_TRUE_FP16", true)                 the same through a project's own reader
    enabled(MIGRAPHX_ENABLE_NHWC{})                              the same through a declared tag type
    NCCL_PARAM(ChunkSize, "CHUNK_SIZE", 64 << 10)                a declared environment parameter

native.py pairs the condition lines of each hunk (condition_label here names the switch macros) and asks default_rows
for the parameters whose default a hunk changes; env_reads and diff_env_reads give one row per variable whose reads
were added, removed or rewritten.
"""

from __future__ import annotations

import re

from bisector.analysis.findings import Finding, FindingKind
from bisector.vocab.gitdiff import line_text

# An upper-case macro whose name says it switches (BOOL_SWITCH, FP16_SWITCH, HEADDIM_SWITCH, EVENK_SWITCH): its first
# argument is a run-time condition turned into a compile-time constant, so the kernel instance it picks.
_SWITCH_MACRO = re.compile(r"\b([A-Z][A-Z0-9_]*SWITCH)\s*\(")
_TYPE = r"(?:const\s+|unsigned\s+|signed\s+|long\s+)*[A-Za-z_][\w:<>]*[\s&*]+"
_VALUE = r"(?P<value>-?[\w.:]+)"
# a parameter with a default on its own line of a signature (no ; after it): `    int max_par = 16` / `int x = 1) {`
_DEFAULT_LINE = re.compile(rf"^\s*{_TYPE}(?P<name>[A-Za-z_]\w*)\s*=\s*{_VALUE}\s*(?:,|\)\s*(?:const\s*)?\{{?)?\s*$")
# a parameter with a default inside a one-line signature: `(int m, int max_par = 16)`
_DEFAULT_INLINE = re.compile(rf"[(,]\s*{_TYPE}(?P<name>[A-Za-z_]\w*)\s*=\s*{_VALUE}\s*(?=[,)])")
_ENV_READ = re.compile(
    r"\b(?:getenv|secure_getenv|GetEnvironmentVariableA?)\s*\(\s*\"(?P<name>[A-Za-z_]\w*)\"|"
    # a project's own reader: read_bool_from_env("CT2_X", true), readEnv<bool>("MSCCLPP_X", false), ncclGetEnv("X")
    r"\b(?!(?i:set|put|unset|log|print|dump|write|clear|update))(?P<helper>\w*(?:env|Env|ENV)\w*)\s*"
    r"(?:<[^<>();]*>\s*)?\(\s*\"(?P<upper>[A-Z][A-Z0-9]*_[A-Z0-9_]+)\"|"
    # a variable declared as a tag type (MIGRAPHX_DECLARE_ENV_VAR(X)), read through it: enabled(X{}), value_of(X{}, 3)
    r"\b(?:enabled|disabled|\w*value_of|\w*(?:env|Env)\w*)\s*\(\s*(?P<tag>[A-Z][A-Z0-9]*_[A-Z0-9_]+)\s*\{\s*\}"
)
# a declared environment parameter, NCCL-style: NCCL_PARAM(SymRsGinChunkSize, "SYM_RS_GIN_CHUNK_SIZE", 64 << 10)
ENV_PARAM = re.compile(r"^\s*(?:static\s+)?[A-Z][A-Z0-9]*_PARAM\s*\(\s*(?P<param>[A-Za-z_]\w*)\s*,\s*\"\w+\"")
MAX_CONTINUED_LINES = 6  # a call or a condition spread over this many lines at most
_NOT_PARAMETER = re.compile(r"^\s*(?:using|typedef|template|return|static_assert|#)\b")
_KEYWORDS = frozenset({"return", "case", "goto", "else", "delete", "new", "throw"})


def condition_label(line: str) -> str:
    """'condition of BOOL_SWITCH' when the line calls a switch macro, else ''."""
    switch = _SWITCH_MACRO.search(line)
    if switch is not None and not line.lstrip().startswith("#"):
        return f"condition of {switch[1]}"
    return ""


def parameter_defaults(line: str) -> dict[str, str]:
    """Parameter name -> default value of the parameters with defaults on a line of a signature."""
    if _NOT_PARAMETER.match(line) or _KEYWORDS.intersection(line.split()):
        return {}
    whole = _DEFAULT_LINE.match(line)
    if whole is not None:
        return {whole["name"]: whole["value"]}
    return {match["name"]: match["value"] for match in _DEFAULT_INLINE.finditer(line)}


def default_rows(path: str, old_lines: list[str], new_lines: list[str], line: int | None) -> list[Finding]:
    """The parameters whose default differs between the lines a hunk removes and those it adds (a parameter on one
    side only is a new or dropped parameter; one that only moved to another line keeps its default)."""
    old: dict[str, str] = {}
    new: dict[str, str] = {}
    for lines, defaults in ((old_lines, old), (new_lines, new)):
        for text in lines:
            defaults.update(parameter_defaults(text))
        defaults.update(template_defaults(lines))
    return [
        Finding(FindingKind.NATIVE_THRESHOLD, path, f"default of {name}", before=old[name], after=new[name], line=line)
        for name in old
        if name in new and old[name] != new[name]
    ]


def template_defaults(lines: list[str]) -> dict[str, str]:
    """Non-type template parameter -> its default (whitespace collapsed), over the template heads the lines hold
    whole, on one line or several (`template <uint32_t BlockK, typename DataT, uint32_t Width = BlockK>`: a class
    instantiated without it takes the default). Type parameters (`typename T = float`) are left out."""
    text = " ".join(line.strip() for line in lines)
    defaults: dict[str, str] = {}
    for head in _TEMPLATE_HEAD.finditer(text):
        parameters, angles, parens, part = [], 1, 0, ""
        for char in text[head.end() :]:
            parens += (char == "(") - (char == ")")
            angles += 0 if parens else (char == "<") - (char == ">")
            if angles == 0 or (char == "," and angles == 1 and not parens):
                parameters.append(part)
                part = ""
                if angles == 0:
                    break
            else:
                part += char
        if angles:
            continue  # a head the lines hold only part of
        for parameter in parameters:
            if match := _NON_TYPE_DEFAULT.match(parameter.strip()):
                defaults[match["name"]] = " ".join(match["value"].split())
    return defaults


_TEMPLATE_HEAD = re.compile(r"\btemplate\s*<")
_NON_TYPE_DEFAULT = re.compile(
    r"^(?!typename\b|class\b|template\b)[A-Za-z_][\w:<>\s]*?\s(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>\S.*)$"
)


def env_reads(lines: list[str]) -> dict[str, list[str]]:
    """Environment variable (or declared parameter) -> the (whitespace-collapsed) lines that read it, in order; a
    call spread over lines is read with the lines that continue it."""
    reads: dict[str, list[str]] = {}
    for index, line in enumerate(lines):
        if (declared := ENV_PARAM.match(line)) is not None:
            found = [(declared["param"], declared.start("param"))]
        else:
            found = [(read["name"] or read["upper"] or read["tag"], read.start()) for read in _ENV_READ.finditer(line)]
        for variable, start in found:
            reads.setdefault(variable, []).append(line_text(with_open_parentheses(lines, index, start)))
    return reads


def has_env_reads(text: str) -> bool:
    """Whether a file's text may hold an environment read (a cheap test before env_reads)."""
    return any(word in text for word in ("env", "Env", "ENV", "_PARAM", "abled(", "value_of("))


def with_open_parentheses(lines: list[str], index: int, start: int = 0) -> str:
    """Line index with the lines that continue it while its parentheses (from start on) stay open: a call or an if's
    condition spread over lines (`if (a > 0 &&` / `max_kvlen >= 1024) {`)."""
    text = lines[index]
    depth = text.count("(", start) - text.count(")", start)
    for more in lines[index + 1 : index + MAX_CONTINUED_LINES] if depth > 0 else ():
        text += " " + more
        depth += more.count("(") - more.count(")")
        if depth <= 0:
            break
    return text


def diff_env_reads(path: str, before: dict[str, list[str]], after: dict[str, list[str]]) -> list[Finding]:
    """One row per variable read on one side only or read by lines of other text (a changed default or test)."""
    rows: list[Finding] = []
    for name in [*before, *(n for n in after if n not in before)]:
        old, new = before.get(name), after.get(name)
        if _gates(old) == _gates(new):
            continue
        rows.append(
            Finding(
                FindingKind.ENV_GATE,
                path,
                name,
                "read",
                " | ".join(old) if old else None,
                " | ".join(new) if new else None,
                detail="environment read in C / C++",
            )
        )
    return rows


def _gates(reads: list[str] | None) -> list[str] | None:
    """The reads less what ends their lines (`,`, `;`, `{}`): a member initialised after another one, no new gate."""
    return None if reads is None else [read.rstrip(" ,;{}") for read in reads]
