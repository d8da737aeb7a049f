"""Python rows on real git histories: a test of the device's kind (the model name a
runtime reports, `device.device_kind`) or of an AMD arch family written as its bare prefix (`"gfx"`) is an arch
condition; a setting's default that names one member of its annotated enum type is a constant, as a literal
default is (another annotated default read from a class is not); entries a module adds to a literal table with
`TABLE.update({...})`, under a version test or not, are rows of the table; the numbers of a record a function
returns (`return ChipInfo(num_accumulators=256)`), in an if or a match case, are numbers it returns."""

from __future__ import annotations

from analysis_history import History, last_resort_functions, rules_rows

from bisector.analysis import explain


def _rows(history: History, sha: str) -> list[tuple[str, str, str]]:
    return sorted((f.kind.value, f.name, f.key) for f in explain(history.path, sha).table_findings)


DEVICE_INFO_PY = """\
def get_device_kind(device, abstract_device) -> str:
    if abstract_device is not None and abstract_device.device_kind != device.device_kind:
        return abstract_device.device_kind
    return device.device_kind


def get_block_rows(kind: str) -> int:
    if kind.startswith("gfx"):
        return 128
    return 64
"""


def test_a_test_of_the_device_kind_or_the_gfx_family_is_an_arch_condition(history: History) -> None:
    history.commit("device info", {"pkg/gpu_info.py": DEVICE_INFO_PY})
    changed = DEVICE_INFO_PY.replace(
        "abstract_device is not None and abstract_device.device_kind != device.device_kind",
        "abstract_device is not None and abstract_device.device_kind == device.device_kind",
    ).replace('kind.startswith("gfx")', 'kind.startswith(("gfx", "rdna"))')
    sha = history.commit("abstract kinds win; gfx rows", {"pkg/gpu_info.py": changed})

    arch = "arch condition"
    assert _rows(history, sha) == [
        ("branch_condition", "get_block_rows", arch),
        ("branch_condition", "get_device_kind", arch),
    ]


def test_a_device_kind_only_returned_is_no_condition(history: History) -> None:
    history.commit("device info", {"pkg/gpu_info.py": DEVICE_INFO_PY})
    changed = DEVICE_INFO_PY.replace("    return device.device_kind\n", "    return str(device.device_kind)\n")
    sha = history.commit("kind as str", {"pkg/gpu_info.py": changed})

    assert _rows(history, sha) == []


PARAMS_PY = """\
import dataclasses
import enum


class Semantics(enum.Enum):
    Lane = enum.auto()
    Warpgroup = enum.auto()


@dataclasses.dataclass(frozen=True)
class CompilerParams:
    num_stages: int = 2
    lowering_semantics: Semantics = Semantics.Lane
    scope: str = Defaults.SCOPE
"""


def test_an_enum_typed_default_naming_another_member_is_a_constant(history: History) -> None:
    history.commit("params", {"pkg/core.py": PARAMS_PY})
    changed = PARAMS_PY.replace("= Semantics.Lane", "= Semantics.Warpgroup").replace(
        "Defaults.SCOPE", "Defaults.OTHER_SCOPE"
    )
    sha = history.commit("warpgroup lowering by default", {"pkg/core.py": changed})

    assert [row[:2] for row in _rows(history, sha)] == [("constant", "CompilerParams.lowering_semantics")]


DTYPES_PY = """\
from pkg.version import fuser_version

DTYPE_MAP = {
    "float32": "Float",
    "float16": "Half",
}

if fuser_version() >= (0, 2, 27):
    DTYPE_MAP.update({"float8_e5m2": "Float8_e5m2"})


def to_fuser_dtype(dtype):
    return DTYPE_MAP[dtype]
"""


def test_entries_a_table_update_adds_are_rows_of_the_table(history: History) -> None:
    history.commit("dtype map", {"pkg/fuser.py": DTYPES_PY})
    changed = DTYPES_PY.replace(
        "\n\n\ndef to_fuser_dtype",
        '\n\nif fuser_version() >= (0, 2, 28):\n    DTYPE_MAP.update({"uint8": "Byte"})\n\n\ndef to_fuser_dtype',
    )
    sha = history.commit("uint8 on newer fusers", {"pkg/fuser.py": changed})

    assert [row[:2] for row in _rows(history, sha)] == [("table_entry", "DTYPE_MAP")]


def test_a_gfx_match_moved_out_of_a_walrus_is_no_row(history: History) -> None:
    source = """\
import re


def code_objects(targets):
    objects = []
    for target in targets:
        if match := re.search("gfx.*$", target):
            objects.append(match.group())
    return objects
"""
    history.commit("bundler", {"pkg/build.py": source})
    changed = source.replace(
        '        if match := re.search("gfx.*$", target):\n',
        '        match = re.search("gfx.*$", target)\n        if match:\n',
    )
    sha = history.commit("py36: no walrus", {"pkg/build.py": changed})

    assert rules_rows(history.path, sha) == []
    assert last_resort_functions(history.path, sha) == ["code_objects"]  # its changed branch test, no more


CHIPS_PY = """\
import dataclasses
import enum


class Chip(enum.Enum):
    V5 = "v5"
    V7 = "v7"


@dataclasses.dataclass(frozen=True)
class ChipInfo:
    num_cores: int
    num_accumulators: int


def chip_info(chip: Chip, num_cores: int) -> ChipInfo:
    match chip:
        case Chip.V5:
            return ChipInfo(num_cores=num_cores, num_accumulators=64)
        case Chip.V7:
            return ChipInfo(num_cores=num_cores, num_accumulators=128)
    raise ValueError(chip)


def row_sums(x):
    return x.sum(dim=1)
"""


def test_the_numbers_of_a_record_a_match_case_returns_are_returned_numbers(history: History) -> None:
    history.commit("chips", {"pkg/chip_info.py": CHIPS_PY})
    changed = CHIPS_PY.replace("num_accumulators=128", "num_accumulators=256").replace("dim=1", "dim=0")
    sha = history.commit("v7 accumulators", {"pkg/chip_info.py": changed})

    # a call of a function (`x.sum(dim=1)`) builds no record: its keyword is no returned number
    assert [row[:2] for row in _rows(history, sha)] == [("dispatch_logic", "chip_info")]
