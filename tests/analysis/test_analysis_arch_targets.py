"""Arches a Python function picks without a branch (arch_targets.py): a clamped arch and a list of compile
targets, on real git histories."""

from __future__ import annotations

from analysis_history import History

from bisector.analysis import FindingKind, explain

BUILD_PY = """\
import os

QUICK_TARGETS = ["-gencode=arch=compute_75,code=compute_75"]


def build_lto_dot(m, n, k, arch, builder):
    symbol = f"dot_{m}_{n}_{k}_{arch}"
    return builder.build(symbol, arch)


def build_lto_fft(size, arch, builder):
    return builder.build(f"fft_{size}_{arch}", arch)


class Builder:
    def architectures(self, quick, toolkit):
        if quick:
            return QUICK_TARGETS
        flags = []
        if toolkit < (13, 0):
            flags += ["-gencode=arch=compute_70,code=sm_70"]
        flags += ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90a,code=sm_90a"]
        return flags

    def names(self):
        return ["release", "debug"]


def tuned(arch):
    return arch in ("gfx942",)


def launch(grid, block):
    width = max(block, 32)
    return grid, width
"""


def test_a_clamped_arch_is_a_condition_row_of_its_function(history: History) -> None:
    history.commit("build", {"pkg/__init__.py": "", "pkg/build.py": BUILD_PY})
    clamped = BUILD_PY.replace(
        '    symbol = f"dot_{m}_{n}_{k}_{arch}"\n', '    arch = min(arch, 90)\n    symbol = f"dot_{m}_{n}_{k}_{arch}"\n'
    ).replace("    width = max(block, 32)", "    width = max(block, 64)")
    sha = history.commit("no dot heuristics past SM90", {"pkg/build.py": clamped})

    rows = [(f.kind, f.name, f.key, f.after) for f in explain(history.path, sha).table_findings]

    # the launch width is a max of a number but names no arch: not a clamp row
    assert rows == [(FindingKind.BRANCH_CONDITION, "build_lto_dot", "arch clamp", "arch = min(arch, 90)")]


def test_changed_compile_targets_are_a_table_row_of_their_scope(history: History) -> None:
    history.commit("build", {"pkg/__init__.py": "", "pkg/build.py": BUILD_PY})
    changed = BUILD_PY.replace('"-gencode=arch=compute_70,code=sm_70"', '"-gencode=arch=compute_70,code=sm_70", "x"')
    changed = changed.replace('"-gencode=arch=compute_90a,code=sm_90a"]', '"-gencode=arch=compute_100a,code=sm_100a"]')
    changed = changed.replace('["-gencode=arch=compute_75,code=compute_75"]', '["-gencode=arch=compute_80,code=sm_80"]')
    changed = changed.replace('["release", "debug"]', '["release", "debug", "lineinfo"]')
    changed = changed.replace('("gfx942",)', '("gfx942", "gfx950")')
    sha = history.commit("sm100 instead of sm90a; quick builds for sm80", {"pkg/build.py": changed})

    rows = [
        (f.name, f.before, f.after)
        for f in explain(history.path, sha).table_findings
        if f.kind is FindingKind.TABLE_ENTRY and f.key == "arch targets"
    ]

    # a list without an arch ("x", the build names) changes no target; arches compared with are a condition
    assert rows == [
        ("<module>", "-gencode=arch=compute_75,code=compute_75", "-gencode=arch=compute_80,code=sm_80"),
        ("Builder.architectures", "-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_100a,code=sm_100a"),
    ]


def test_a_function_added_with_targets_or_a_clamp_is_new_code_not_a_row(history: History) -> None:
    history.commit("build", {"pkg/__init__.py": "", "pkg/build.py": BUILD_PY})
    added = BUILD_PY + '\n\ndef build_lto_solver(arch):\n    arch = min(arch, 90)\n    return ["sm_90"]\n'
    sha = history.commit("solver", {"pkg/build.py": added})

    rows = [f for f in explain(history.path, sha).table_findings if f.key in ("arch clamp", "arch targets")]

    assert rows == []


RMAKE_PY = """\
import argparse
import os


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("-a", "--architecture", dest="gpu_architecture", required=False,
                        default="gfx906;gfx1030;gfx1100;gfx1102",
                        help="Set GPU architectures, e.g. all, gfx000, gfx803, gfx906:xnack-;gfx1030 (default: all)")
    parser.add_argument("--compiler", default="clang++")
    return parser.parse_args()


def cuda_arch_flags():
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "7.0;7.5;8.0")
    minimum = os.environ.get("MIN_TOOLKIT", "11.8")
    if minimum is None:
        os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;8.6"
    return arch_list, minimum
"""


def test_a_string_of_targets_given_as_a_keyword_argument_is_a_table_row(history: History) -> None:
    history.commit("rmake", {"rmake.py": RMAKE_PY})
    changed = RMAKE_PY.replace("gfx1100;gfx1102", "gfx1100;gfx1101;gfx1102").replace('"7.0;7.5;8.0"', '"7.5;8.0;9.0"')
    changed = changed.replace("gfx906:xnack-;gfx1030 (", "gfx906:xnack-;gfx1030;gfx1100 (").replace("11.8", "12.1")
    changed = changed.replace('default="clang++"', 'default="hipcc"').replace('"8.0;8.6"', '"8.0;8.6;9.0"')
    sha = history.commit("gfx1101 by default; sm90 builds", {"rmake.py": changed})

    rows = sorted(
        (f.name, f.before, f.after)
        for f in explain(history.path, sha).table_findings
        if f.kind is FindingKind.TABLE_ENTRY and f.key == "arch targets"
    )

    # only a keyword argument's string counts: not the help text, an environment read's default or a value assigned
    assert rows == [("parse_args", None, "gfx1101")]


SETUP_PY = """\
import os


class CMakeBuild:
    def build_extension(self, ext):
        cmake_args = []
        if os.environ.get("MLX_BUILD_CUDA") == "ON":
            cuda_archs = ";".join(("70-real", "80-real", "90-real", "120"))
            cmake_args.append(f"-DMLX_CUDA_ARCHITECTURES={cuda_archs}")
        versions = ("11-real", "12")
        return cmake_args, versions
"""


def test_cmake_cuda_arches_in_a_tuple_an_arch_list_is_assigned_are_targets(history: History) -> None:
    history.commit("setup", {"setup.py": SETUP_PY})
    changed = SETUP_PY.replace('("70-real", "80-real", "90-real", "120")', '("75-real", "90a-real", "120-virtual")')
    sha = history.commit("arch-specific targets", {"setup.py": changed.replace('"11-real"', '"13-real"')})

    rows = [
        (f.name, f.before, f.after)
        for f in explain(history.path, sha).table_findings
        if f.kind is FindingKind.TABLE_ENTRY and f.key == "arch targets"
    ]

    # versions is no arch list's name
    assert rows == [("CMakeBuild.build_extension", "120; 70-real; 80-real; 90-real", "120-virtual; 75-real; 90a-real")]
