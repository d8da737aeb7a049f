"""Conditions on a settings or options object (conditions.py's option category): a per-module option that
replaces a global config read, a setting a compiler backend starts to honour, and `torch.backends` flags, on real
git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

BUILTINS_PY = """\
import warp


def tile_matmul_lto_dispatch_func(arch, options, M, N, builder):
    fun_forward, lto_forward = warp.build.build_lto_dot(M, N, arch, builder)
    if warp.config.enable_backward:
        fun_backward, lto_backward = warp.build.build_lto_dot(N, M, arch, builder)
    return fun_forward


def tile_name(options, name):
    if options.name_prefix:
        return options.name_prefix + name
    return name
"""

BACKEND_PY = """\
from .compile_environment import CompileEnvironment


class TritonBackend:
    function_decorator = "triton.jit"

    def function_decorator_for_args(self, args):
        do_not_specialize = [arg.name for arg in args if arg.is_scalar]
        return f"triton.jit(do_not_specialize={do_not_specialize!r})"

    def describe(self, config):
        if config.label:
            return config.label
        return "triton"
"""

MATMUL_PY = """\
import torch


def pick_gemm(a, b):
    if a.is_cuda:
        return cublas_gemm(a, b)
    return torch.mm(a, b)
"""


def _option_rows(history: History, sha: str) -> list[tuple[str, str | None, str | None]]:
    found = explain(history.path, sha).table_findings
    return sorted(
        (f.name, f.before, f.after)
        for f in found
        if f.kind is FindingKind.BRANCH_CONDITION and f.key == "option condition"
    )


def test_a_per_module_option_replacing_a_global_config_read_is_a_condition_row(history: History) -> None:
    history.commit("lto", {"pkg/__init__.py": "", "pkg/builtins.py": BUILTINS_PY})
    changed = BUILTINS_PY.replace("if warp.config.enable_backward:", 'if options["enable_backward"]:')
    sha = history.commit("per-module enable_backward", {"pkg/builtins.py": changed})

    assert _option_rows(history, sha) == [
        ("tile_matmul_lto_dispatch_func", "warp.config.enable_backward", "options['enable_backward']")
    ]


def test_an_option_that_only_names_things_changes_no_dispatch(history: History) -> None:
    history.commit("lto", {"pkg/__init__.py": "", "pkg/builtins.py": BUILTINS_PY})
    changed = BUILTINS_PY.replace("if options.name_prefix:", "if options.name_prefix is not None:")
    sha = history.commit("a None prefix", {"pkg/builtins.py": changed})

    assert _option_rows(history, sha) == []  # `options.x` is an attribute of whatever options is, not a setting read


def test_a_setting_a_backend_starts_to_honour_is_a_condition_row(history: History) -> None:
    history.commit("backend", {"pkg/__init__.py": "", "pkg/backend.py": BACKEND_PY})
    changed = BACKEND_PY.replace(
        "        do_not_specialize = [",
        "        if not CompileEnvironment.current().settings.triton_do_not_specialize:\n"
        "            return self.function_decorator\n"
        "        do_not_specialize = [",
    ).replace("if config.label:", "if config.label and config.verbose:")
    sha = history.commit("do_not_specialize opt-in", {"pkg/backend.py": changed})

    # the kernel config's own label and verbosity choose no kernel: no row for describe
    assert _option_rows(history, sha) == [
        (
            "TritonBackend.function_decorator_for_args",
            None,
            "not CompileEnvironment.current().settings.triton_do_not_specialize",
        )
    ]


def test_a_torch_backends_flag_that_gates_a_kernel_is_a_condition_row(history: History) -> None:
    history.commit("gemm", {"pkg/__init__.py": "", "pkg/matmul.py": MATMUL_PY})
    changed = MATMUL_PY.replace("if a.is_cuda:", "if torch.backends.cuda.matmul.allow_tf32:")
    sha = history.commit("cuBLAS only with TF32", {"pkg/matmul.py": changed})

    rows = [(f.kind, f.name, f.key) for f in explain(history.path, sha).table_findings]

    # the arch condition it replaces goes (before) and the flag comes (after) in one row of the function
    assert (FindingKind.BRANCH_CONDITION, "pick_gemm", "option condition") in rows
