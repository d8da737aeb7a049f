"""What a CMake file compiles for: its GPU target lists and the options that gate kernels,

    rocm_check_target_ids(DEFAULT_AMDGPU_TARGETS TARGETS "gfx803;gfx90a:xnack-;gfx942")
    set(CMAKE_CUDA_ARCHITECTURES "75;80;86;90")
    set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} -arch=sm_35 --expt-relaxed-constexpr")
    option(PPLNN_CUDA_ENABLE_CUDNN "enable cudnn, if it is disabled, some kernel will not work" OFF)

A target added to or dropped from a list moves which arches a build has code for; an option default moves which
kernels a default build has. A table_entry row per command (named by the variable it sets, or by the command and
its first argument) whose arch targets differ, with the targets only one side has; a constant row per option whose
default is added, removed or flipped, for options whose name or text names GPU code. A file added or removed whole
is new or dropped build code and gets none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bisector.analysis.arch_targets import arch_row, only_in
from bisector.analysis.findings import Finding, FindingKind, short_text
from bisector.analysis.source_text import Language, blanked

CMAKE_FILE = re.compile(r"(^|/)CMakeLists\.txt$|\.cmake$", re.I)
_COMMAND = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)[ \t]*\(")
_PARENTHESIS = re.compile(r"[()]")
_ARGUMENT = re.compile(r'"(?:\\.|[^"\\])*"|[^\s"]+')
_TARGET = re.compile(r"\bgfx\d{3,4}[a-z]?(?::(?:xnack|sramecc)[+-])*|\b(?:sm|compute)_\d{2,3}[a-z]?\b")
# a variable that holds a plain arch list ("75;80;90", "8.0 8.6+PTX", "90a-real")
_ARCH_VARIABLE = re.compile(
    r"(?i)ARCHITECTURES$|ARCH_LIST$|(^|_)(GPU|AMDGPU|HIP|CUDA)_TARGETS$|(^|_)(CUDA|GPU)_ARCHS?$"
)
_PLAIN_ARCH = re.compile(r"^(?:\d{2,3}[a-z]?(?:-real|-virtual)?|\d{1,2}\.\d(?:\+PTX)?)$", re.I)
_SETTERS = frozenset({"set", "list", "string"})
_OPTIONS = frozenset({"option", "cmake_dependent_option"})
# an option is read as a kernel gate when its name or text names GPU code and not only tests, docs or packaging
_GPU_WORD = re.compile(
    r"(?i)cuda|cudnn|cublas|cutlass|nccl|hip\b|rocm|gpu|kernel|arch|triton|flash|tensor_?core|fp8|fp16|bf16|sm\d{2}"
)
_NOT_KERNELS = re.compile(r"(?i)test|bench|example|doc|install|package|sample|warning|verbose|coverage")


@dataclass(frozen=True)
class _Command:
    name: str  # lower case
    arguments: tuple[str, ...]  # quotes removed
    line: int


def is_cmake_path(path: str) -> bool:
    """A CMakeLists.txt or a *.cmake file."""
    return bool(CMAKE_FILE.search(path))


def cmake_target_rows(path: str, before: str | None, after: str | None) -> list[Finding]:
    """Rows for the arch target lists and the kernel-gating option defaults a CMake file changes."""
    if before is None or after is None:
        return []
    old, new = _commands(before), _commands(after)
    return _target_rows(path, old, new) + _option_rows(path, old, new)


def _target_rows(path: str, old: list[_Command], new: list[_Command]) -> list[Finding]:
    was, now = _targets_by_name(old), _targets_by_name(new)
    rows = []
    for name in sorted(was.keys() | now.keys()):
        (old_targets, _), (new_targets, _) = was.get(name, ([], 0)), now.get(name, ([], 0))
        if only_in(old_targets, new_targets) or only_in(new_targets, old_targets):
            line = now[name][1] if name in now else was[name][1]
            rows.append(arch_row(FindingKind.TABLE_ENTRY, path, name, "arch targets", old_targets, new_targets, line))
    return rows


def _targets_by_name(commands: list[_Command]) -> dict[str, tuple[list[str], int]]:
    """row name -> (the targets of every command of that name, first line), for commands with targets."""
    found: dict[str, tuple[list[str], int]] = {}
    for command in commands:
        targets = _targets(command)
        if not targets:
            continue
        name = _row_name(command)
        known, line = found.get(name, ([], command.line))
        found[name] = (known + targets, line)
    return found


def _row_name(command: _Command) -> str:
    """set / list / string: the variable set; any other command: `command(first argument)`."""
    arguments = command.arguments
    if command.name in _SETTERS and arguments:
        return arguments[1] if command.name != "set" and len(arguments) > 1 else arguments[0]
    return f"{command.name}({arguments[0]})" if arguments else command.name


def _targets(command: _Command) -> list[str]:
    if command.name in _OPTIONS or command.name in ("if", "elseif", "while", "message"):
        return []  # a comparison or a message names arches without compiling for them
    targets = [match.group(0) for argument in command.arguments for match in _TARGET.finditer(argument)]
    if command.name in _SETTERS and any(_ARCH_VARIABLE.search(argument) for argument in command.arguments[:2]):
        targets += [
            value
            for argument in command.arguments[1:]
            for value in re.split(r"[;\s]+", argument)
            if _PLAIN_ARCH.match(value)
        ]
    return targets


def _option_rows(path: str, old: list[_Command], new: list[_Command]) -> list[Finding]:
    was, now = _option_defaults(old), _option_defaults(new)
    rows = []
    for name in sorted(was.keys() | now.keys()):
        before, after = was.get(name), now.get(name)
        _, text, line = after or before or ("", "", 0)  # the name came from one side at least
        if (before and after and before[0] == after[0]) or not _gates_kernels(name, text):
            continue
        rows.append(
            Finding(
                FindingKind.CONSTANT,
                path,
                name,
                key="option default",
                before=before[0] if before else None,
                after=after[0] if after else None,
                line=line,
                detail=f"a build option: {short_text(text)}" if text else "a build option",
            )
        )
    return rows


def _option_defaults(commands: list[_Command]) -> dict[str, tuple[str, str, int]]:
    """option name -> (default ON / OFF, help text, line); an option() without a value defaults to OFF."""
    found: dict[str, tuple[str, str, int]] = {}
    for command in commands:
        if command.name not in _OPTIONS or not command.arguments:
            continue
        name, rest = command.arguments[0], command.arguments[1:]
        text = rest[0] if rest else ""
        default = rest[1].upper() if len(rest) > 1 else "OFF"
        found.setdefault(name, (default, text, command.line))
    return found


def _gates_kernels(name: str, text: str) -> bool:
    return bool(_GPU_WORD.search(f"{name} {text}")) and not _NOT_KERNELS.search(name)


def _commands(source: str) -> list[_Command]:
    """Every command invocation of a CMake file, comments left out, arguments up to the matching parenthesis."""
    text, code = blanked(source, Language.CMAKE, strings=False), blanked(source, Language.CMAKE)
    commands = []
    position = 0
    while match := _COMMAND.search(text, position):
        end = _closing(code, match.end())
        body = text[match.end() : end]
        arguments = tuple(
            _unquoted(argument) for argument in _ARGUMENT.findall(body.replace("(", " ").replace(")", " "))
        )
        commands.append(_Command(match.group(1).lower(), arguments, text.count("\n", 0, match.start()) + 1))
        position = end + 1
    return commands


def _closing(code: str, start: int) -> int:
    """The index of the parenthesis that closes the one before start in code (strings blanked), or the code's end."""
    depth = 1
    for parenthesis in _PARENTHESIS.finditer(code, start):
        depth += 1 if parenthesis[0] == "(" else -1
        if depth == 0:
            return parenthesis.start()
    return len(code)


def _unquoted(argument: str) -> str:
    return argument[1:-1] if len(argument) >= 2 and argument[0] == argument[-1] == '"' else argument
