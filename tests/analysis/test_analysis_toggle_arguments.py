"""Backend toggles passed to calls (toggle_arguments.py), on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

PACKING_PY = """\
from .import_utils import import_quant_linear


def pack_model(model, bits, use_triton=False):
    QuantLinear = import_quant_linear(use_triton=use_triton, bits=bits)
    return QuantLinear(model)


class FusedAttention:
    @classmethod
    def inject_to_model(cls, model, use_triton=False):
        QuantLinear = import_quant_linear(use_triton=use_triton, bits=4)
        return cls(QuantLinear, model)


def load(model, use_cache=True):
    return import_quant_linear(use_triton=False, bits=8, use_cache=use_cache)
"""


def test_a_backend_toggle_passed_differently_is_a_dispatch_row(history: History) -> None:
    history.commit("packing", {"pkg/packing.py": PACKING_PY})
    changed = (
        PACKING_PY.replace(
            "import_quant_linear(use_triton=use_triton, bits=bits)",
            "import_quant_linear(use_triton=use_triton, bits=bits, disable_exllama=False, disable_exllamav2=True)",
        )
        .replace(
            "    def inject_to_model(cls, model, use_triton=False):",
            "    def inject_to_model(cls, model, use_triton=False, disable_exllama=False):",
        )
        .replace("use_triton=use_triton, bits=4)", "use_triton=use_triton, bits=4, disable_exllama=disable_exllama)")
        .replace("use_cache=use_cache)", "use_cache=not use_cache)")
    )
    sha = history.commit("pack with exllama v1; fused attention may disable exllama", {"pkg/packing.py": changed})

    found = [f for f in explain(history.path, sha).table_findings if f.kind is FindingKind.DISPATCH_LOGIC]

    # use_cache names no kernel implementation: load gets no row
    assert [(f.name, f.before, f.after) for f in found] == [
        (
            "pack_model",
            None,
            "import_quant_linear(disable_exllama=False); import_quant_linear(disable_exllamav2=True)",
        ),
        ("FusedAttention.inject_to_model", None, "import_quant_linear(disable_exllama=disable_exllama)"),
    ]


LOADER_PY = """\
def from_quantized(model, use_triton=False, disable_exllama=True, trainable=False):
    if not use_triton and trainable:
        warn("cuda-old backend")
    if model.use_cache:
        model = model.cached()
    return load(model, use_triton=use_triton, disable_exllama=disable_exllama)
"""


def test_a_condition_on_a_backend_flag_is_a_backend_condition(history: History) -> None:
    history.commit("loader", {"pkg/loader.py": LOADER_PY})
    changed = LOADER_PY.replace(
        "    if not use_triton and trainable:",
        "    if not disable_exllama and trainable:\n        disable_exllama = True\n"
        "    elif not use_triton and trainable:",
    ).replace("if model.use_cache:", "if model.use_cache and not trainable:")
    sha = history.commit("exllama does not train: the pytorch backend", {"pkg/loader.py": changed})

    found = [f for f in explain(history.path, sha).table_findings if f.kind is FindingKind.BRANCH_CONDITION]

    # use_cache names no kernel implementation
    assert [(f.name, f.key, f.after) for f in found] == [
        ("from_quantized", "backend condition", "not disable_exllama and trainable")
    ]
