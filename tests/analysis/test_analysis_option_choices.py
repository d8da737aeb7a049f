"""Conditions kept in an instance attribute or an assignment expression (conditions.py) and env reads through a
project's helper, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

DEVICE_PY = """\
import functools

from .renderers import CUDARenderer, NAKRenderer, PTXRenderer


class NVDevice:
    def __init__(self, arch):
        renderers = [functools.partial(CUDARenderer, arch), functools.partial(NAKRenderer, arch),
                     functools.partial(CUDARenderer, arch, use_nvcc=True)]
        self.renderers = renderers
        self.fallbacks = [PTXRenderer, CUDARenderer]
        self.names = ["cuda", "nak"]


class Linear:
    def __init__(self, module):
        self.can_use_nt = module.weight.dtype == torch.float16


class Renderer:
    def __init__(self, target):
        self.tensor_cores = TC_SM80 if (ver := int(target.arch[3:])) >= 80 else []

    def render(self, x):
        return x


def get_scheduler(sm_cnt, worker):
    return 4 * (sm_cnt - worker)
"""


def test_conditions_kept_in_an_attribute_or_an_assignment_expression(history: History) -> None:
    history.commit("device", {"pkg/__init__.py": "", "pkg/device.py": DEVICE_PY})
    cores = "        self.tensor_cores = TC_SM80 if (ver := int(target.arch[3:])) >= 80 else []\n"
    schedulers = "    return 4 * (sm_cnt - worker)"
    changed = (
        DEVICE_PY.replace("dtype == torch.float16", "dtype in (torch.float16, torch.bfloat16)")
        .replace(cores, cores + "        if ver < 80:\n            self.extra = HALF_IN_FLOAT\n")
        .replace(schedulers, "    if sm_cnt == 108:\n        return 27\n" + schedulers)
    )
    sha = history.commit("bf16 NT matmul; half in float before sm80; 27 schedulers on A100", {"pkg/device.py": changed})

    rows = sorted((f.kind, f.name) for f in explain(history.path, sha).table_findings)

    assert rows == [
        (FindingKind.BRANCH_CONDITION, "Linear.__init__"),
        (FindingKind.BRANCH_CONDITION, "Renderer.__init__"),
        (FindingKind.BRANCH_CONDITION, "get_scheduler"),
    ]


SETTINGS_PY = """\
import dataclasses
import functools

from .env import _env_get_bool, get_bool_env_var, set_env


@dataclasses.dataclass
class Settings:
    static_shapes: bool = dataclasses.field(
        default_factory=functools.partial(_env_get_bool, "PKG_STATIC_SHAPES", True)
    )
    use_triton: bool = dataclasses.field(default_factory=lambda: get_bool_env_var("PKG_USE_TRITON"))


def configure():
    set_env("PKG_LOG_LEVEL", "info")
"""


def test_reads_through_a_projects_env_helper_are_env_gates(history: History) -> None:
    history.commit("settings", {"pkg/__init__.py": "", "pkg/settings.py": SETTINGS_PY})
    changed = SETTINGS_PY.replace('"PKG_STATIC_SHAPES", True', '"PKG_STATIC_SHAPES", False')
    changed = changed.replace('"PKG_LOG_LEVEL", "info"', '"PKG_LOG_LEVEL", "debug"')
    changed = changed.replace(
        "\n\ndef configure",
        "    do_not_specialize: bool = dataclasses.field(\n"
        '        default_factory=functools.partial(_env_get_bool, "PKG_DO_NOT_SPECIALIZE", False)\n    )\n'
        "\n\ndef configure",
    )
    sha = history.commit("dynamic shapes by default; opt-in do_not_specialize", {"pkg/settings.py": changed})

    rows = [
        (f.name, f.before is None) for f in explain(history.path, sha).table_findings if f.kind is FindingKind.ENV_GATE
    ]

    # set_env writes a variable the module sets for itself, not one it reads: no row
    assert rows == [("PKG_DO_NOT_SPECIALIZE", True), ("PKG_STATIC_SHAPES", False)]
